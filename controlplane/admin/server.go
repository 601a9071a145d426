package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"
)

// ErrStarted is returned by Start on a server already started or closed.
var ErrStarted = errors.New("admin: server already started or closed")

// Options say where a Server listens and how much it may hold.
type Options struct {
	// Listen is the TCP listener's host:port: read-only endpoints.
	Listen string
	// Socket is the Unix socket's path: every endpoint, the state-changing
	// ones included; "" for none (then nothing can change state).
	Socket string
	// SocketOwner is the uid, besides root, that may own the socket's
	// directory: the user xlb runs as. nil: this process's effective uid.
	SocketOwner *int
	// Pprof serves /debug/pprof/ on the TCP listener.
	Pprof bool
	// Limits bound both listeners; zero fields take DefaultLimits'.
	Limits Limits
}

// Limits bound what clients of the listeners can make the process hold.
type Limits struct {
	// TCPConns and SocketConns are the connections each listener holds at
	// most; one over the limit takes the slot of the one that has waited
	// longest for a request, or is closed as soon as it is accepted when
	// every slot is serving one.
	TCPConns, SocketConns int
	// HeaderTimeout bounds the wait for a request's header, whole.
	HeaderTimeout time.Duration
}

// DefaultLimits are the limits of a process whose descriptor limit is
// large (ConnLimits says how they shrink).
var DefaultLimits = Limits{TCPConns: 256, SocketConns: 64, HeaderTimeout: 5 * time.Second}

// Request bounds of both listeners: a header must arrive whole within
// Limits.HeaderTimeout and fit maxHeaderBytes; no endpoint takes a body.
const (
	// writeTimeout leaves a /debug/pprof/profile of up to 25 s room.
	writeTimeout = 30 * time.Second
	// answerWriteTimeout bounds every other answer of the TCP listener
	// (boundWrite); the socket's capture streams set their own.
	answerWriteTimeout = 10 * time.Second
	idleTimeout        = 30 * time.Second
	maxHeaderBytes     = 8 << 10
)

// ConnLimits sizes the listeners' limits for a process that may open
// nofile descriptors: DefaultLimits, shrunk so that together they take at
// most a quarter of them and the rest stays for what the appliance opens
// itself (AF_XDP sockets, BPF objects, netlink, BGP sessions and the
// health-check probes, at most 64 in flight).
func ConnLimits(nofile uint64) Limits {
	l := DefaultLimits
	budget := nofile / 4
	if total := uint64(l.TCPConns + l.SocketConns); total > budget {
		l.TCPConns = max(4, int(budget*4/5))
		l.SocketConns = max(2, int(budget/5))
	}
	return l
}

// Server is the admin listeners: a TCP one for reading and a Unix socket
// for everything.
//
//	GET /metrics  Prometheus text format (METRICS.md), from a private registry
//	GET /status   Report as JSON
//	GET /healthz  200 "ok" while the process serves
//	GET /debug/pprof/...  Go's profiler (Options.Pprof; TCP only)
//	POST /drain?backend=NAME, /undrain?backend=NAME, /drain-node, /undrain-node,
//	     /reload, /reload-dry-run, /capture
//	              (Source; the socket only: the TCP listener answers 403;
//	              each logged once, with the peer's uid and pid: AuditMessage)
type Server struct {
	opts Options
	log  *zap.Logger
	tcp  *http.Server
	unix *http.Server // nil without a socket

	mu     sync.Mutex
	ln     net.Listener // nil until Start
	sock   *socketListener
	closed bool // Close was called
	done   sync.WaitGroup
}

// New prepares a server reading src; it listens only from Start. A TCP
// address that is not loopback is allowed, with a warning: the endpoints
// carry no authentication. Extra collectors are further metrics exported
// as they are (the health checks' HealthMetrics).
func New(opts Options, src Source, log *zap.Logger, extra ...prometheus.Collector) (*Server, error) {
	if src == nil {
		return nil, errors.New("admin: no source")
	}
	if log == nil {
		log = zap.NewNop()
	}
	loopback, err := loopbackOnly(opts.Listen)
	if err != nil {
		return nil, err
	}
	if !loopback {
		log.Warn("admin listener is not on a loopback address: /metrics and /status are reachable from the network, without authentication",
			zap.String("listen", opts.Listen))
	}
	if opts.Limits.TCPConns <= 0 {
		opts.Limits.TCPConns = DefaultLimits.TCPConns
	}
	if opts.Limits.SocketConns <= 0 {
		opts.Limits.SocketConns = DefaultLimits.SocketConns
	}
	if opts.Limits.HeaderTimeout <= 0 {
		opts.Limits.HeaderTimeout = DefaultLimits.HeaderTimeout
	}

	reg := prometheus.NewRegistry()
	cs := append([]prometheus.Collector{
		NewCollector(src),
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	}, extra...)
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("admin: registering metrics: %w", err)
		}
	}
	metrics := promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		ErrorLog: zap.NewStdLog(log.Named("metrics")),
		// One bad metric should not hide all the others.
		ErrorHandling: promhttp.ContinueOnError,
		Registry:      reg,
	})

	tcp := http.NewServeMux()
	readOnly(tcp, src, metrics, log)
	if opts.Pprof {
		tcp.HandleFunc("GET /debug/pprof/", pprof.Index)
		tcp.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
		tcp.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
		tcp.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
		tcp.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	}
	for _, op := range operations(src) {
		tcp.HandleFunc(op.path, refuseOnTCP(op.path, opts.Socket))
	}
	s := &Server{opts: opts, log: log, tcp: newHTTPServer(boundWrite(tcp), opts.Limits.HeaderTimeout, log)}
	if opts.Socket != "" {
		unix := http.NewServeMux()
		readOnly(unix, src, metrics, log)
		audit := &auditLog{log: log}
		for _, op := range operations(src) {
			unix.HandleFunc("POST "+op.path, audit.audited(op))
		}
		s.unix = newHTTPServer(peerChecked(unix, audit), opts.Limits.HeaderTimeout, log)
		s.unix.ConnContext = withPeer
	}
	return s, nil
}

// newHTTPServer bounds what one client can hold: a header read whole
// within headerTimeout and of at most maxHeaderBytes, no body, an idle
// connection closed after idleTimeout.
func newHTTPServer(h http.Handler, headerTimeout time.Duration, log *zap.Logger) *http.Server {
	return &http.Server{
		Handler:           noBody(h),
		ReadHeaderTimeout: headerTimeout,
		ReadTimeout:       headerTimeout,
		WriteTimeout:      writeTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		ErrorLog:          zap.NewStdLog(log.Named("http")),
	}
}

// boundWrite gives an answer other than a profile answerWriteTimeout to
// be written: a client that does not read it holds its connection, and
// the slot, no longer. /debug/pprof/ keeps writeTimeout (a profile takes
// up to 25 s).
func boundWrite(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if !strings.HasPrefix(req.URL.Path, "/debug/pprof/") {
			_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(answerWriteTimeout))
		}
		h.ServeHTTP(w, req)
	})
}

// readOnly adds the endpoints that change nothing to mux.
func readOnly(mux *http.ServeMux, src Source, metrics http.Handler, log *zap.Logger) {
	mux.Handle("GET /metrics", metrics)
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, _ *http.Request) {
		var b bytes.Buffer
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(false) // the whys' ">=" as they are
		enc.SetIndent("", "  ")
		if err := enc.Encode(src.Status()); err != nil {
			// Only a value JSON has no form for (a NaN latency) fails.
			log.Error("encoding /status", zap.Error(err))
			http.Error(w, "encoding status: "+err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(b.Bytes()) // Encode ended it with a newline
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok\n"))
	})
}

// noBody refuses a request that carries a body: no endpoint reads one, so
// none is buffered.
func noBody(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.ContentLength > 0 || len(req.TransferEncoding) > 0 {
			w.Header().Set("Connection", "close")
			http.Error(w, "the admin endpoints take no request body", http.StatusRequestEntityTooLarge)
			return
		}
		h.ServeHTTP(w, req)
	})
}

// refuseOnTCP answers a state-changing path on the TCP listener: whoever
// can reach a TCP port (any local user, a browser page on the host) must
// not change anything.
func refuseOnTCP(path, socket string) http.HandlerFunc {
	where := "the admin socket ([admin] socket)"
	if socket != "" {
		where = "the admin socket " + socket
	}
	msg := fmt.Sprintf("%s changes state: the TCP admin listener serves read-only endpoints only; use %s, as `xlb drain` and `xlb undrain` do (root only)", path, where)
	return func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, msg, http.StatusForbidden)
	}
}

// Start listens and serves in the background: the TCP listener, then the
// socket. It returns ErrStarted when called twice, or the listen error
// (address in use, another xlb on the socket...).
func (s *Server) Start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln != nil || s.closed {
		return ErrStarted
	}
	ln, err := net.Listen("tcp", s.opts.Listen)
	if err != nil {
		return fmt.Errorf("admin: %w", err)
	}
	var sock *socketListener
	if s.unix != nil {
		owner := os.Geteuid()
		if s.opts.SocketOwner != nil {
			owner = *s.opts.SocketOwner
		}
		if sock, err = listenSocket(s.opts.Socket, owner); err != nil {
			ln.Close()
			return fmt.Errorf("admin: %w", err)
		}
	}
	tcpLn := limitListener(ln, s.opts.Limits.TCPConns, s.log.With(zap.String("listener", "tcp")))
	s.tcp.ConnState = tcpLn.connState
	s.ln = tcpLn
	s.serve(s.tcp, s.ln)
	s.log.Info("admin listener started", zap.Stringer("address", ln.Addr()), zap.Int("max_connections", s.opts.Limits.TCPConns),
		zap.Bool("pprof", s.opts.Pprof))
	if sock != nil {
		s.sock = sock
		sockLn := limitListener(sock, s.opts.Limits.SocketConns, s.log.With(zap.String("listener", "socket")))
		s.unix.ConnState = sockLn.connState
		s.serve(s.unix, sockLn)
		s.log.Info("admin socket started", zap.String("path", s.opts.Socket), zap.Int("max_connections", s.opts.Limits.SocketConns))
	}
	return nil
}

func (s *Server) serve(srv *http.Server, ln net.Listener) {
	s.done.Go(func() {
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("admin listener stopped", zap.Error(err))
		}
	})
}

// Addr is the TCP address listened on (the port chosen for ":0"); nil
// before Start.
func (s *Server) Addr() net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln == nil {
		return nil
	}
	return s.ln.Addr()
}

// Close stops listening and waits for requests in flight until ctx ends,
// then closes their connections; the socket file is removed. A server
// never started is just marked closed. Close may be called more than once.
func (s *Server) Close(ctx context.Context) error {
	s.mu.Lock()
	s.closed = true
	started := s.ln != nil
	s.mu.Unlock()
	if !started {
		return nil
	}
	var errs []error
	for _, srv := range []*http.Server{s.tcp, s.unix} {
		if srv == nil {
			continue
		}
		if err := srv.Shutdown(ctx); err != nil {
			errs = append(errs, err, srv.Close())
		}
	}
	s.done.Wait()
	if s.sock != nil {
		s.sock.remove()
	}
	return errors.Join(errs...)
}

package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"
)

// ErrStarted is returned by Start on a server already started or closed.
var ErrStarted = errors.New("admin: server already started or closed")

// Server is the admin HTTP listener:
//
//	GET /metrics  Prometheus text format (METRICS.md), from a private registry
//	GET /status   Report as JSON
//	GET /healthz  200 "ok" while the process serves
//	POST /drain?backend=NAME, /undrain?backend=NAME  (Operator; loopback clients only)
type Server struct {
	listen string
	log    *zap.Logger
	srv    *http.Server

	mu     sync.Mutex
	ln     net.Listener  // nil until Start
	closed bool          // Close was called
	done   chan struct{} // closed when Serve returns
}

// New prepares a server on listen (host:port) reading src; it listens
// only from Start. An address that is not loopback is allowed, with a
// warning: the endpoints carry no authentication. Extra collectors are further
// metrics exported as they are (the health checks' HealthMetrics).
func New(listen string, src Source, log *zap.Logger, extra ...prometheus.Collector) (*Server, error) {
	if src == nil {
		return nil, errors.New("admin: no source")
	}
	if log == nil {
		log = zap.NewNop()
	}
	loopback, err := loopbackOnly(listen)
	if err != nil {
		return nil, err
	}
	if !loopback {
		log.Warn("admin listener is not on a loopback address: /metrics and /status are reachable from the network, without authentication",
			zap.String("listen", listen))
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
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		ErrorLog: zap.NewStdLog(log.Named("metrics")),
		// One bad metric should not hide all the others.
		ErrorHandling: promhttp.ContinueOnError,
		Registry:      reg,
	}))
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
	mux.HandleFunc("POST /drain", operate(src, false))
	mux.HandleFunc("POST /undrain", operate(src, true))
	mux.HandleFunc("POST /drain-node", operateNode(src, true))
	mux.HandleFunc("POST /undrain-node", operateNode(src, false))
	return &Server{
		listen: listen,
		log:    log,
		srv: &http.Server{
			Handler: mux,
			// A stuck or slow client must not hold a connection forever.
			ReadHeaderTimeout: 5 * time.Second,
			WriteTimeout:      30 * time.Second,
			IdleTimeout:       60 * time.Second,
			ErrorLog:          zap.NewStdLog(log.Named("http")),
		},
		done: make(chan struct{}),
	}, nil
}

// Start listens and serves in the background. It returns ErrStarted when
// called twice, or the listen error (address in use...).
func (s *Server) Start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln != nil || s.closed {
		return ErrStarted
	}
	ln, err := net.Listen("tcp", s.listen)
	if err != nil {
		return fmt.Errorf("admin: %w", err)
	}
	s.ln = ln
	s.log.Info("admin listener started", zap.Stringer("address", ln.Addr()))
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("admin listener stopped", zap.Error(err))
		}
	}()
	return nil
}

// Addr is the address listened on (the port chosen for ":0"); nil before
// Start.
func (s *Server) Addr() net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln == nil {
		return nil
	}
	return s.ln.Addr()
}

// Close stops listening and waits for requests in flight until ctx ends,
// then closes their connections. A server never started is just marked
// closed. Close may be called more than once.
func (s *Server) Close(ctx context.Context) error {
	s.mu.Lock()
	s.closed = true
	started := s.ln != nil
	s.mu.Unlock()
	if !started {
		return nil
	}
	err := s.srv.Shutdown(ctx)
	if err != nil {
		err = errors.Join(err, s.srv.Close())
	}
	<-s.done
	return err
}

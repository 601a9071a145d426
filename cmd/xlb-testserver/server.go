package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.uber.org/zap"
)

// server holds every socket of one backend; listen binds them all before
// anything is served, so a pid file written after listen means "ready".
type server struct {
	name       string
	weight     int
	weightFile string
	log        *zap.Logger
	verbose    bool
	healthy    atomic.Bool

	tcp  []net.Listener
	udp  []*udpEcho
	quic []*quicServer
	http *http.Server
}

func listen(cfg serveConfig, log *zap.Logger) (*server, error) {
	s := &server{name: cfg.name, weight: cfg.weight, weightFile: cfg.weightFile, log: log, verbose: cfg.verbose}
	s.healthy.Store(true)
	for _, ap := range cfg.tcp {
		ln, err := net.Listen(network("tcp", ap), ap.String())
		if err != nil {
			s.close()
			return nil, fmt.Errorf("listening on tcp %s: %w", ap, err)
		}
		s.tcp = append(s.tcp, ln)
	}
	for _, ap := range cfg.udp {
		u, err := listenUDPEcho(ap)
		if err != nil {
			s.close()
			return nil, fmt.Errorf("listening on udp %s: %w", ap, err)
		}
		s.udp = append(s.udp, u)
	}
	if len(cfg.quic.addrs) > 0 {
		tlsConf, err := selfSigned(cfg.name)
		if err != nil {
			s.close()
			return nil, fmt.Errorf("making the QUIC certificate: %w", err)
		}
		for _, ap := range cfg.quic.addrs {
			q, err := listenQUIC(ap, cfg.quic, tlsConf)
			if err != nil {
				s.close()
				return nil, fmt.Errorf("listening on quic %s: %w", ap, err)
			}
			s.quic = append(s.quic, q)
		}
	}
	s.http = &http.Server{
		Handler:           s.handler(),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       time.Minute,
		ErrorLog:          zap.NewStdLog(log),
	}
	return s, nil
}

// tcpAddrs and udpAddrs report the bound addresses (ephemeral ports resolved).
func (s *server) tcpAddrs() []netip.AddrPort {
	out := make([]netip.AddrPort, len(s.tcp))
	for i, ln := range s.tcp {
		out[i] = ln.Addr().(*net.TCPAddr).AddrPort()
	}
	return out
}

func (s *server) udpAddrs() []netip.AddrPort {
	out := make([]netip.AddrPort, len(s.udp))
	for i, u := range s.udp {
		out[i] = u.conn.LocalAddr().(*net.UDPAddr).AddrPort()
	}
	return out
}

func (s *server) quicAddrs() []netip.AddrPort {
	out := make([]netip.AddrPort, len(s.quic))
	for i, q := range s.quic {
		out[i] = q.addr()
	}
	return out
}

// serve answers until ctx is done, then closes every socket; it returns
// the first error of a socket that failed on its own.
func (s *server) serve(ctx context.Context) error {
	errc := make(chan error, len(s.tcp)+len(s.udp)+len(s.quic))
	var wg sync.WaitGroup
	for _, ln := range s.tcp {
		wg.Go(func() {
			if err := s.http.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
				errc <- fmt.Errorf("tcp %s: %w", ln.Addr(), err)
			}
		})
	}
	for _, u := range s.udp {
		wg.Go(func() {
			if err := u.serve(s.name, s.logUDP); err != nil && ctx.Err() == nil {
				errc <- fmt.Errorf("udp %s: %w", u.conn.LocalAddr(), err)
			}
		})
	}
	for _, q := range s.quic {
		wg.Go(func() {
			if err := q.serve(ctx, s.name, s.log, s.verbose); err != nil && ctx.Err() == nil {
				errc <- fmt.Errorf("quic %s: %w", q.addr(), err)
			}
		})
	}
	var err error
	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	s.close()
	wg.Wait()
	return err
}

func (s *server) close() {
	if s.http != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = s.http.Shutdown(ctx) // closes the listeners too
		cancel()
	}
	for _, ln := range s.tcp {
		_ = ln.Close()
	}
	for _, u := range s.udp {
		_ = u.conn.Close()
	}
	for _, q := range s.quic {
		q.close()
	}
}

func (s *server) logUDP(from, to netip.AddrPort, n int) {
	if s.verbose {
		s.log.Debug("udp", zap.Stringer("from", from), zap.Stringer("to", to), zap.Int("bytes", n))
	}
}

func cmdServe(args []string) error {
	cfg, err := parseServe(args)
	if err != nil {
		return err
	}
	log, err := newLogger(cfg.verbose)
	if err != nil {
		return err
	}
	defer func() { _ = log.Sync() }()
	log = log.With(zap.String("backend", cfg.name))

	// Signals are caught before the pid file says "ready", so a TERM sent
	// as soon as it appears is a clean stop, not the default death.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	health := make(chan os.Signal, 1)
	signal.Notify(health, syscall.SIGUSR1, syscall.SIGUSR2)
	defer signal.Stop(health)
	s, err := listen(cfg, log)
	if err != nil {
		return err
	}
	go s.healthSignals(ctx, health)
	if cfg.pidfile != "" {
		if err := os.WriteFile(cfg.pidfile, []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644); err != nil {
			s.close()
			return fmt.Errorf("writing pid file: %w", err)
		}
		defer os.Remove(cfg.pidfile)
	}
	log.Info("serving", zap.Stringers("tcp", s.tcpAddrs()), zap.Stringers("udp", s.udpAddrs()), zap.Stringers("quic", s.quicAddrs()),
		zap.String("quic_lb", quicLBString(cfg.quic)),
		zap.Int("weight", cfg.weight), zap.String("weight_file", cfg.weightFile))

	err = s.serve(ctx)
	log.Info("stopped", zap.Error(err))
	return err
}

// healthSignals lets a test fail /healthz without killing the server (its
// TCP connections and UDP echo keep working): SIGUSR1 sick, SIGUSR2 well.
func (s *server) healthSignals(ctx context.Context, ch <-chan os.Signal) {
	for {
		select {
		case <-ctx.Done():
			return
		case sig := <-ch:
			s.healthy.Store(sig == syscall.SIGUSR2)
			s.log.Info("health set", zap.Bool("healthy", sig == syscall.SIGUSR2))
		}
	}
}

func newLogger(verbose bool) (*zap.Logger, error) {
	zc := zap.NewProductionConfig()
	zc.Sampling = nil // every line of a test run matters
	zc.Encoding = "console"
	zc.EncoderConfig = zap.NewDevelopmentEncoderConfig()
	if verbose {
		zc.Level = zap.NewAtomicLevelAt(zap.DebugLevel)
	}
	log, err := zc.Build()
	if err != nil {
		return nil, fmt.Errorf("logger: %w", err)
	}
	return log, nil
}

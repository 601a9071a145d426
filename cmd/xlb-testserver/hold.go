package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// holdConfig is the validated form of the hold flags.
type holdConfig struct {
	tcp         []netip.AddrPort
	n           int
	interval    time.Duration // between the requests of a long-lived connection
	newInterval time.Duration // between new connections; 0: none
}

func parseHold(args []string) (holdConfig, error) {
	fs := newFlags("hold")
	tcp := fs.String("tcp", "", "HTTP addresses (ADDR:PORT,...) to connect to, in turn")
	n := fs.Int("n", 300, "long-lived connections")
	interval := fs.Duration("interval", 100*time.Millisecond, "between the requests of each long-lived connection")
	newInterval := fs.Duration("new-interval", 20*time.Millisecond, "between new connections (0: none)")
	if err := parseFlags(fs, args); err != nil {
		return holdConfig{}, err
	}
	cfg := holdConfig{n: *n, interval: *interval, newInterval: *newInterval}
	for _, a := range strings.Split(*tcp, ",") {
		ap, err := netip.ParseAddrPort(a)
		if err != nil || ap.Port() == 0 {
			return holdConfig{}, fmt.Errorf("hold: --tcp: %q is not ADDR:PORT or [ADDR6]:PORT (%w)", a, errUsage)
		}
		cfg.tcp = append(cfg.tcp, ap)
	}
	if cfg.n < 1 || cfg.interval <= 0 || cfg.newInterval < 0 {
		return holdConfig{}, fmt.Errorf("hold: -n and --interval must be positive (%w)", errUsage)
	}
	return cfg, nil
}

// Timeouts of hold: a long-lived connection's answer may wait out TCP's
// retransmissions while routes change; a new connection counts as failed
// when it is not answered within holdLate (its SYN lost once), and gives
// up after holdNewTimeout.
const (
	holdAnswerTimeout = 10 * time.Second
	holdLate          = time.Second
	holdNewTimeout    = 3 * time.Second
)

// holdConn is one long-lived connection.
type holdConn struct {
	backend string // of its first answer
	mu      sync.Mutex
	answers int
	brokeAt time.Time // zero: still alive
	err     error
	movedAt time.Time // first answer from another backend
	moved   string
}

// holdNew is one new connection of the stream.
type holdNew struct {
	at      time.Time
	latency time.Duration
	err     error
}

// cmdHold is `xlb-testserver hold`: it opens -n long-lived kept-alive HTTP
// connections, each asking every --interval, and a new connection every
// --new-interval, and reports in phases: SIGUSR1 prints what happened
// since the last report and starts a new phase; SIGINT or SIGTERM prints
// the last phase and ends. A report says how many long-lived connections
// broke (an error or no answer within 10 s: a reset, a timeout) or changed
// backend, and how many new connections failed (not answered within 1 s)
// and over which span of time: the outage.
func cmdHold(args []string, stdout io.Writer) error {
	cfg, err := parseHold(args)
	if err != nil {
		return err
	}
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGUSR1, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)

	// Each connection asks from its first answer on: one left idle until
	// all were open would meet its server's idle timeout where opening
	// takes long (a loaded machine), and break before anything happened.
	stop := make(chan struct{})
	var all sync.WaitGroup
	conns := make([]*holdConn, cfg.n)
	clients := make([]*keptClient, cfg.n)
	errs := make([]error, cfg.n)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	for i := range conns {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			c, err := dialKept(cfg.tcp[i%len(cfg.tcp)])
			if err == nil {
				var name string
				if name, err = c.get(holdNewTimeout); err == nil {
					hc := &holdConn{backend: name}
					conns[i], clients[i] = hc, c
					all.Go(func() { hc.run(c, cfg.interval, stop) })
					return
				}
				c.conn.Close()
			}
			errs[i] = err
		})
	}
	wg.Wait()
	per := map[string]int{}
	for i, err := range errs {
		if err != nil {
			close(stop)
			closeClients(clients)
			all.Wait()
			return fmt.Errorf("hold: long-lived connection %d: %w", i, err)
		}
		per[conns[i].backend]++
	}
	fmt.Fprintf(stdout, "%d long-lived connections open (to %s), each asking every %v; per backend: %s\n",
		cfg.n, joinAddrs(cfg.tcp), cfg.interval, countsText(per))

	var (
		nmu   sync.Mutex
		fresh []holdNew
	)
	if cfg.newInterval > 0 {
		all.Go(func() {
			tick := time.NewTicker(cfg.newInterval)
			defer tick.Stop()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				case <-tick.C:
				}
				dst := cfg.tcp[i%len(cfg.tcp)]
				all.Go(func() {
					at := time.Now()
					_, err := probeHTTP(dst, holdNewTimeout, 0)
					nmu.Lock()
					fresh = append(fresh, holdNew{at, time.Since(at), err})
					nmu.Unlock()
				})
			}
		})
	}

	phase, since := 1, time.Now()
	for sig := range sigs {
		now := time.Now()
		nmu.Lock()
		news := slices.Clone(fresh)
		nmu.Unlock()
		reportHold(stdout, phase, since, now, conns, news)
		if sig != syscall.SIGUSR1 {
			break
		}
		phase, since = phase+1, now
	}
	close(stop)
	closeClients(clients)
	all.Wait()
	return nil
}

// closeClients closes the connections opened (nil: none opened there).
func closeClients(clients []*keptClient) {
	for _, c := range clients {
		if c != nil {
			c.conn.Close()
		}
	}
}

// reportHold prints phase's lines: what happened in [since, now).
func reportHold(w io.Writer, phase int, since, now time.Time, conns []*holdConn, news []holdNew) {
	alive, broke, moved := 0, 0, 0
	var firstErr error
	for _, c := range conns {
		c.mu.Lock()
		if c.brokeAt.IsZero() {
			alive++
		} else if !c.brokeAt.Before(since) {
			broke++
			if firstErr == nil {
				firstErr = c.err
			}
		}
		if !c.movedAt.IsZero() && !c.movedAt.Before(since) {
			moved++
		}
		c.mu.Unlock()
	}
	fmt.Fprintf(w, "phase %d (%.1f s): long-lived connections: %d alive, %d broke, %d changed backend in this phase",
		phase, now.Sub(since).Seconds(), alive, broke, moved)
	if firstErr != nil {
		fmt.Fprintf(w, " (first: %v)", firstErr)
	}
	fmt.Fprintln(w)
	n, failed := 0, 0
	var first, last time.Time
	for _, a := range news {
		if a.at.Before(since) || !a.at.Before(now) {
			continue
		}
		n++
		if a.err != nil || a.latency > holdLate {
			failed++
			if first.IsZero() || a.at.Before(first) {
				first = a.at
			}
			if a.at.After(last) {
				last = a.at
			}
		}
	}
	fmt.Fprintf(w, "phase %d: new connections: %d opened, %d failed (not answered within %v)", phase, n, failed, holdLate)
	if failed > 0 {
		fmt.Fprintf(w, ", from %.2f s to %.2f s into the phase: new connections failed for %.2f s",
			first.Sub(since).Seconds(), last.Sub(since).Seconds(), last.Sub(first).Seconds())
	}
	fmt.Fprintln(w)
}

func (c *holdConn) run(kc *keptClient, interval time.Duration, stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			return
		case <-time.After(interval):
		}
		name, err := kc.get(holdAnswerTimeout)
		now := time.Now()
		c.mu.Lock()
		if err != nil {
			c.brokeAt, c.err = now, err
			c.mu.Unlock()
			return
		}
		c.answers++
		if name != c.backend && c.moved == "" {
			c.moved, c.movedAt = name, now
		}
		c.mu.Unlock()
	}
}

// keptClient is a kept-alive HTTP/1.1 connection.
type keptClient struct {
	conn net.Conn
	r    *bufio.Reader
	host string
}

func dialKept(dst netip.AddrPort) (*keptClient, error) {
	conn, err := net.DialTimeout("tcp", dst.String(), holdNewTimeout)
	if err != nil {
		return nil, err
	}
	return &keptClient{conn: conn, r: bufio.NewReader(conn), host: dst.String()}, nil
}

// get asks for / and returns the X-Backend of a 200 answer.
func (k *keptClient) get(timeout time.Duration) (string, error) {
	return askBackend(k.conn, k.r, k.host, "/", timeout, false)
}

func joinAddrs(a []netip.AddrPort) string {
	s := make([]string, len(a))
	for i, ap := range a {
		s[i] = ap.String()
	}
	return strings.Join(s, ", ")
}

// countsText is "b1 100, b2 98, b3 102", sorted by name.
func countsText(m map[string]int) string {
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	slices.Sort(names)
	parts := make([]string, len(names))
	for i, n := range names {
		parts[i] = fmt.Sprintf("%s %d", n, m[n])
	}
	return strings.Join(parts, ", ")
}

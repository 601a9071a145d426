package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"sync"
	"time"
)

// probeConfig is the validated form of the probe flags.
type probeConfig struct {
	tcp, udp netip.AddrPort // invalid: not probed
	n        int
	parallel int
	timeout  time.Duration
}

func parseProbe(args []string) (probeConfig, error) {
	fs := newFlags("probe")
	tcp := fs.String("tcp", "", "HTTP address to open connections to")
	udp := fs.String("udp", "", "UDP echo address to exchange datagrams with")
	n := fs.Int("n", 100, "connections (and UDP exchanges) to make")
	parallel := fs.Int("parallel", 8, "how many at a time")
	timeout := fs.Duration("timeout", 2*time.Second, "limit for each exchange")
	if err := parseFlags(fs, args); err != nil {
		return probeConfig{}, err
	}
	cfg := probeConfig{n: *n, parallel: *parallel, timeout: *timeout}
	for _, a := range []struct {
		flag, val string
		dst       *netip.AddrPort
	}{{"--tcp", *tcp, &cfg.tcp}, {"--udp", *udp, &cfg.udp}} {
		if a.val == "" {
			continue
		}
		ap, err := netip.ParseAddrPort(a.val)
		if err != nil || ap.Port() == 0 {
			return probeConfig{}, fmt.Errorf("probe: %s: %q is not ADDR:PORT or [ADDR6]:PORT (%w)", a.flag, a.val, errUsage)
		}
		*a.dst = ap
	}
	switch {
	case !cfg.tcp.IsValid() && !cfg.udp.IsValid():
		return probeConfig{}, fmt.Errorf("probe: give --tcp, --udp or both (%w)", errUsage)
	case cfg.n < 1 || cfg.parallel < 1 || cfg.timeout <= 0:
		return probeConfig{}, fmt.Errorf("probe: -n, --parallel and --timeout must be positive (%w)", errUsage)
	}
	return cfg, nil
}

// errProbes reports that some exchanges failed; the counts are printed anyway.
var errProbes = errors.New("some probes failed")

func cmdProbe(args []string, stdout io.Writer) error {
	cfg, err := parseProbe(args)
	if err != nil {
		return err
	}
	failed := false
	for _, p := range []struct {
		proto string
		dst   netip.AddrPort
		one   func(netip.AddrPort, time.Duration, int) (string, error)
	}{{"tcp", cfg.tcp, probeHTTP}, {"udp", cfg.udp, probeUDP}} {
		if !p.dst.IsValid() {
			continue
		}
		counts, errs, firstErr := probeMany(cfg, p.dst, p.one)
		names := make([]string, 0, len(counts))
		for name := range counts {
			names = append(names, name)
		}
		slices.Sort(names)
		for _, name := range names {
			fmt.Fprintf(stdout, "%s %s %d\n", p.proto, name, counts[name])
		}
		fmt.Fprintf(stdout, "%s errors %d\n", p.proto, errs)
		if errs > 0 {
			failed = true
			fmt.Fprintf(stdout, "%s first error: %v\n", p.proto, firstErr)
		}
	}
	if failed {
		return errProbes
	}
	return nil
}

// probeMany runs cfg.n exchanges, cfg.parallel at a time, and counts the
// backends that answered.
func probeMany(cfg probeConfig, dst netip.AddrPort, one func(netip.AddrPort, time.Duration, int) (string, error)) (map[string]int, int, error) {
	var (
		mu       sync.Mutex
		counts   = map[string]int{}
		errs     int
		firstErr error
		next     = make(chan int)
		wg       sync.WaitGroup
	)
	for range min(cfg.parallel, cfg.n) {
		wg.Go(func() {
			for i := range next {
				name, err := one(dst, cfg.timeout, i)
				mu.Lock()
				if err != nil {
					if errs == 0 {
						firstErr = err
					}
					errs++
				} else {
					counts[name]++
				}
				mu.Unlock()
			}
		})
	}
	for i := range cfg.n {
		next <- i
	}
	close(next)
	wg.Wait()
	return counts, errs, firstErr
}

// probeHTTP opens one new connection, asks for / and returns X-Backend.
func probeHTTP(dst netip.AddrPort, timeout time.Duration, _ int) (string, error) {
	conn, err := net.DialTimeout("tcp", dst.String(), timeout)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	return httpGet(conn, dst.String(), "/", timeout)
}

// httpGet asks for path over conn, one request with Connection: close,
// and returns the X-Backend header of a 200 answer.
func httpGet(conn net.Conn, host, path string, timeout time.Duration) (string, error) {
	return askBackend(conn, bufio.NewReader(conn), host, path, timeout, true)
}

// askBackend sends one GET of path over conn (closing it after the answer
// when closeAfter), reads the answer from r (conn's reader, kept across
// requests on a kept-alive connection) and returns the X-Backend header of
// a 200 answer.
func askBackend(conn net.Conn, r *bufio.Reader, host, path string, timeout time.Duration, closeAfter bool) (string, error) {
	if err := conn.SetDeadline(time.Now().Add(timeout)); err != nil {
		return "", err
	}
	req, err := http.NewRequest(http.MethodGet, "http://"+host+path, nil)
	if err != nil {
		return "", err
	}
	req.Close = closeAfter
	if err := req.Write(conn); err != nil {
		return "", err
	}
	resp, err := http.ReadResponse(r, req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return "", err
	}
	name := resp.Header.Get(headerBackend)
	if resp.StatusCode != http.StatusOK || name == "" {
		return "", fmt.Errorf("%s: status %d, %s %q", host, resp.StatusCode, headerBackend, name)
	}
	return name, nil
}

// probeUDP sends one datagram from a new port and returns the name the
// echo put in front of it. The socket is connected, so an answer from any
// other address than dst (a backend replying from its own) is not seen.
func probeUDP(dst netip.AddrPort, timeout time.Duration, i int) (string, error) {
	conn, err := net.DialTimeout("udp", dst.String(), timeout)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(timeout)); err != nil {
		return "", err
	}
	payload := []byte("probe " + strconv.Itoa(i))
	if _, err := conn.Write(payload); err != nil {
		return "", err
	}
	buf := make([]byte, 2048)
	n, err := conn.Read(buf)
	if err != nil {
		return "", err
	}
	name, rest, ok := bytes.Cut(buf[:n], []byte(": "))
	if !ok || !bytes.Equal(rest, payload) || len(name) == 0 {
		return "", fmt.Errorf("%s: unexpected echo %q", dst, buf[:n])
	}
	return string(name), nil
}

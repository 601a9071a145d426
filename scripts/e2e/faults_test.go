package e2e

import (
	"bufio"
	"errors"
	"fmt"
	"math"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"xlb/scripts/testbed"
)

// The fault tests change backends while xlb runs (scripts/testbed:
// SetHealthy, SetWeight, StopServer) and check what a client sees. Their
// HTTP health checks probe every second.
const checkInterval = time.Second

// faultSvc is one TCP service of a fault test's configuration, on VIP4.
type faultSvc struct {
	name      string
	port      uint16
	primaries []string // backend names of the primary group
	failover  []string // of the failover group; none: failover off
	keys      string   // extra keys of the service (TOML lines)
	tables    string   // its subtables (connection_tracking_policy, failover_policy)
}

// faultConfig writes a configuration for b: one HTTP health check on
// /healthz every second with the given thresholds, and svcs.
func faultConfig(t *testing.T, b *testbed.Bed, healthy, unhealthy int, svcs ...faultSvc) string {
	t.Helper()
	var text strings.Builder
	text.WriteString(bedHead(b.LB.Iface, adminSocket(b.LB.NS)))
	fmt.Fprintf(&text, `
[[health_check]]
name = "hc"
type = "HTTP"
port = %d
request_path = "/healthz"
check_interval_sec = %d
timeout_sec = 1
healthy_threshold = %d
unhealthy_threshold = %d
`, testbed.HTTPPort, int(checkInterval/time.Second), healthy, unhealthy)
	group := func(svc, name string, failover bool, members []string) {
		var eps []string
		for _, n := range members {
			eps = append(eps, fmt.Sprintf("{ name = %q, ip = %q }", endpoint(n, svc), b.Backend(n).Addr4))
		}
		fmt.Fprintf(&text, "  [[backend_service.backend]]\n  group = %q\n  failover = %v\n  endpoints = [ %s ]\n",
			name, failover, strings.Join(eps, ", "))
	}
	for _, s := range svcs {
		fmt.Fprintf(&text, "\n[[backend_service]]\nname = %q\nprotocol = \"TCP\"\nhealth_checks = [\"hc\"]\n%s\n%s\n", s.name, s.keys, s.tables)
		group(s.name, "primary", false, s.primaries)
		if len(s.failover) > 0 {
			group(s.name, "spare", true, s.failover)
		}
		fmt.Fprintf(&text, "\n[[forwarding_rule]]\nname = %q\nip_address = %q\nip_protocol = \"TCP\"\nports = [\"%d\"]\nbackend_service = %q\n",
			s.name, testbed.VIP4, s.port, s.name)
	}
	path := filepath.Join(t.TempDir(), "xlb.toml")
	if err := os.WriteFile(path, []byte(text.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// endpoint is the configured name of the bed's backend in service svc:
// endpoint names are unique across services.
func endpoint(backend, svc string) string { return backend + "-" + svc }

// bedName is the bed's backend an endpoint name of faultConfig names.
func bedName(endpoint string) string {
	n, _, _ := strings.Cut(endpoint, "-")
	return n
}

// backendIn finds the bed's backend name in service svc of s (nil if
// absent).
func backendIn(s status, svc, name string) *statusBackend {
	for i := range s.Services {
		if s.Services[i].Name != svc {
			continue
		}
		for j := range s.Services[i].Backends {
			if bedName(s.Services[i].Backends[j].Name) == name {
				return &s.Services[i].Backends[j]
			}
		}
	}
	return nil
}

// healthyIn reports whether backend name is healthy (or unhealthy, want
// false) in every service of s that has it, and s has one.
func healthyIn(s status, name string, want bool) bool {
	found := false
	for _, svc := range s.Services {
		if be := backendIn(s, svc.Name, name); be != nil {
			found = true
			if be.Healthy != want {
				return false
			}
		}
	}
	return found
}

// eligibleOf is service svc's eligible set in s, as the bed's backend
// names, sorted (nil: no such service).
func eligibleOf(s status, svc string) []string {
	for _, sv := range s.Services {
		if sv.Name == svc {
			e := []string{}
			for _, n := range sv.Eligible {
				e = append(e, bedName(n))
			}
			sort.Strings(e)
			return e
		}
	}
	return nil
}

// sideOf is service svc's side in s.
func sideOf(s status, svc string) string {
	for _, sv := range s.Services {
		if sv.Name == svc {
			return sv.Side
		}
	}
	return ""
}

// untilStatus polls /status every 50 ms until ok accepts it and returns
// how long that took from since; after limit it fails t with the last
// status.
func untilStatus(t *testing.T, b *testbed.Bed, what string, since time.Time, limit time.Duration, ok func(status) bool) time.Duration {
	t.Helper()
	for {
		s := getStatus(t, b)
		if ok(s) {
			return time.Since(since)
		}
		if time.Since(since) > limit {
			t.Fatalf("/status: no %s within %v: %+v", what, limit, s)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// must fails t on a bed helper's error.
func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// connTo opens kept-alive connections to dst until one is answered by
// backend want (at most 60 tries, closing the others) and returns it.
// keepAlive false turns TCP keep-alive probes off, for a connection that
// must send nothing while it waits.
func connTo(t *testing.T, b *testbed.Bed, dst netip.AddrPort, want string, keepAlive bool) *testbed.HTTPConn {
	t.Helper()
	for range 60 {
		c, err := dialRetry(b, dst)
		if err != nil {
			t.Fatalf("connection to %s: %v", dst, err)
		}
		r, err := c.Get("/", 2*time.Second)
		if err != nil {
			c.Close()
			t.Fatalf("connection to %s: first request: %v", dst, err)
		}
		if r.Backend == want {
			if err := c.Conn.(*net.TCPConn).SetKeepAlive(keepAlive); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
			return c
		}
		c.Close()
	}
	t.Fatalf("60 connections to %s, none answered by %s", dst, want)
	return nil
}

// dialRetry opens a TCP connection from the bed's client to dst, allowing
// one SYN retransmit (the kernel's 1 s): a new connection fails only if
// the balancer loses its SYN twice.
func dialRetry(b *testbed.Bed, dst netip.AddrPort) (*testbed.HTTPConn, error) {
	return testbed.DialHTTP(b.Clients[0].NS, dst, 3*time.Second)
}

// askOn sends one request on c and returns the backend that answered.
func askOn(c *testbed.HTTPConn) (string, error) {
	r, err := c.Get("/", 2*time.Second)
	if err == nil && r.Status != 200 {
		err = fmt.Errorf("status %d", r.Status)
	}
	return r.Backend, err
}

// wantReset fails t unless err is the connection being reset: what a
// client sees when the next segment of its connection reaches a backend
// that has no such connection (its kernel answers a mid-stream segment
// for an unknown connection with RST).
func wantReset(t *testing.T, what string, backend string, err error) {
	t.Helper()
	switch {
	case err == nil:
		t.Errorf("%s: answered by %s, want the connection reset (moved to a backend that does not know it)", what, backend)
	case !errors.Is(err, syscall.ECONNRESET):
		t.Errorf("%s: %v, want the connection reset by peer", what, err)
	}
}

// series is the /metrics series of a per-backend metric of faultConfig's
// service svc.
func series(name, svc, backend string, b *testbed.Bed) string {
	return fmt.Sprintf(`%s{backend=%q,ip=%q,service=%q}`, name, endpoint(backend, svc), b.Backend(backend).Addr4, svc)
}

// runProbe is probe without failing t (for a goroutine): n new
// connections to dst from the bed's client, counted by backend; any
// failed exchange is an error.
func runProbe(b *testbed.Bed, dst netip.AddrPort, n int) (map[string]int, error) {
	out, err := testbed.Exec(b.Clients[0].NS, serverBin, "probe", "--tcp", dst.String(),
		"-n", strconv.Itoa(n), "--parallel", "8", "--timeout", "3s")
	if err != nil {
		return nil, err
	}
	counts := map[string]int{}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		c, err := strconv.Atoi(f[len(f)-1])
		if len(f) != 3 || f[0] != "tcp" || err != nil {
			return nil, fmt.Errorf("probe: unexpected line %q", sc.Text())
		}
		if f[1] != "errors" {
			counts[f[1]] = c
		}
	}
	return counts, nil
}

// newConns is runProbe, failing t on an error.
func newConns(t *testing.T, b *testbed.Bed, dst netip.AddrPort, n int) map[string]int {
	t.Helper()
	counts, err := runProbe(b, dst, n)
	if err != nil {
		t.Fatalf("%d new connections to %s: %v", n, dst, err)
	}
	return counts
}

// checkSpread fails t unless counts splits as want (shares in [0, 1]),
// each share within 4.5 standard deviations of a binomial share for the
// sample's size (a correct balancer fails about once in 10^5 runs), and a
// backend that should get none gets none.
func checkSpread(t *testing.T, what string, counts map[string]int, want map[string]float64) {
	t.Helper()
	n := 0
	for _, c := range counts {
		n += c
	}
	if n == 0 {
		t.Fatalf("%s: no answers", what)
	}
	var names []string
	for name := range want {
		names = append(names, name)
	}
	for name := range counts {
		if _, ok := want[name]; !ok {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	var report []string
	bad := false
	for _, name := range names {
		p, got := want[name], float64(counts[name])/float64(n)
		tol := 4.5 * math.Sqrt(p*(1-p)/float64(n))
		report = append(report, fmt.Sprintf("%s %d (%.1f%%, want %.1f±%.1f%%)", name, counts[name], 100*got, 100*p, 100*tol))
		if math.Abs(got-p) > tol || p == 0 && counts[name] != 0 {
			bad = true
		}
	}
	if bad {
		t.Errorf("%s: shares off: %s", what, strings.Join(report, ", "))
	} else {
		t.Logf("%s: %s", what, strings.Join(report, ", "))
	}
}

// only reports whether counts has answers from the named backends alone.
func only(counts map[string]int, names ...string) bool {
	for n, c := range counts {
		if c > 0 && !slices.Contains(names, n) {
			return false
		}
	}
	return len(counts) > 0
}

package testbed

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"xlb/internal/nettest"
	"xlb/internal/nsx"
)

const (
	answerTimeout  = 2 * time.Second
	silenceTimeout = 300 * time.Millisecond // long enough on veth: answers take microseconds
)

func vip(v6 bool, port uint16) netip.AddrPort {
	if v6 {
		return netip.AddrPortFrom(VIP6, port)
	}
	return netip.AddrPortFrom(VIP4, port)
}

func families() []bool { return []bool{false, true} }

func family(v6 bool) string {
	if v6 {
		return "IPv6"
	}
	return "IPv4"
}

// TestBed brings the default bed up and checks what the balancer will rely
// on: names, addresses, servers, that the VIPs get no answer without a
// balancer, that the backends answer VIP traffic sent to them (by plain
// routing, and by L2 DSR from the balancer's interface) straight back to
// the client, that no backend answers ARP/NDP for a VIP, that native XDP on
// the balancer's interface sees flows on every rx queue, and that a second
// up changes nothing.
func TestBed(t *testing.T) {
	b := Up(t, Options{Prefix: "tbt", Weights: []int{1, 2, 3, 1}})
	c1 := b.Clients[0]

	t.Run("names and addresses", func(t *testing.T) {
		want := []string{"tbt-b1", "tbt-b2", "tbt-b3", "tbt-b4", "tbt-c1", "tbt-lb", "tbt-sw"}
		if got := namespaces(t, "tbt"); !slices.Equal(got, want) {
			t.Fatalf("namespaces %v, want %v", got, want)
		}
		for _, ns := range want {
			for _, l := range links(t, ns) {
				if l == "lo" {
					continue
				}
				if !strings.HasPrefix(l, "tbt-") || len(l) > 15 {
					t.Errorf("%s: link %q: not named tbt-... in <= 15 characters", ns, l)
				}
			}
		}
		hosts := append([]Host{b.LB, c1}, backendHosts(b)...)
		for _, h := range hosts {
			checkIface(t, h)
		}
		for _, be := range b.Backends {
			if got := addrsOn(t, be.NS, "lo"); !slices.Contains(got, VIP4) || !slices.Contains(got, VIP6) {
				t.Errorf("%s: lo has %v, want the VIPs", be.NS, got)
			}
			for key, want := range map[string]string{
				"net.ipv4.conf.all.arp_ignore": "1", "net.ipv4.conf.all.arp_announce": "2",
				"net.ipv4.conf.all.rp_filter": "0",
			} {
				if got := sysctl(t, be.NS, key); got != want {
					t.Errorf("%s: %s = %s, want %s", be.NS, key, got, want)
				}
			}
		}
		for _, v6 := range families() {
			fam, dst := "-4", VIP4.String()
			if v6 {
				fam, dst = "-6", VIP6.String()
			}
			if out := mustExec(t, b.LB.NS, "ip", fam, "route", "show", "to", dst); !strings.HasPrefix(out, "blackhole "+dst) {
				t.Errorf("balancer: route to %s: %q, want a blackhole", dst, out)
			}
		}
		if got := sysctl(t, b.LB.NS, "net.ipv4.ip_forward"); got != "0" {
			t.Errorf("balancer forwards (ip_forward %s): it must leave VIP traffic to xlb", got)
		}
		out, err := Exec(b.LB.NS, "ls", "/sys/class/net/"+b.LB.Iface+"/queues")
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Count(out, "rx-"); got != b.Opts.Queues {
			t.Errorf("%s has %d rx queues, want %d", b.LB.Iface, got, b.Opts.Queues)
		}
	})

	t.Run("servers answer the balancer", func(t *testing.T) {
		// The health checker's path: from the balancer to each backend's own address.
		for _, be := range b.Backends {
			for _, v6 := range families() {
				addr := be.Addr4
				if v6 {
					addr = be.Addr6
				}
				r, err := HTTPGet(b.LB.NS, netip.AddrPortFrom(addr, HealthPort), "/healthz", answerTimeout)
				if err != nil {
					t.Fatalf("%s %s: %v", be.Name, family(v6), err)
				}
				if r.Status != 200 || r.Backend != be.Name || r.Header.Get("X-Load-Balancing-Endpoint-Weight") != strconv.Itoa(be.Weight) {
					t.Errorf("%s %s /healthz: status %d, backend %q, weight %q; want 200, %s, %d", be.Name, family(v6),
						r.Status, r.Backend, r.Header.Get("X-Load-Balancing-Endpoint-Weight"), be.Name, be.Weight)
				}
				name, err := UDPEcho(b.LB.NS, netip.AddrPortFrom(addr, UDPEchoPort), "hc", answerTimeout)
				if err != nil || name != be.Name {
					t.Errorf("%s %s udp echo: %q, %v", be.Name, family(v6), name, err)
				}
			}
		}
	})

	t.Run("no answer on the VIPs without a balancer", func(t *testing.T) {
		assertSilent(t, c1.NS)
	})

	t.Run("routed to b1", func(t *testing.T) {
		// The balancer's kernel as a plain router to b1: checks the backend
		// side (VIP on lo, replies from the VIP straight to the client).
		lb := b.LB.NS
		b1 := b.Backend("b1")
		lbRoutes(t, b, "via", b1.Addr4.String(), b1.Addr6.String())
		mustExec(t, lb, "sysctl", "-qw", "net.ipv4.ip_forward=1", "net.ipv6.conf.all.forwarding=1")
		assertServedBy(t, c1.NS, "b1")
		mustExec(t, lb, "sysctl", "-qw", "net.ipv4.ip_forward=0", "net.ipv6.conf.all.forwarding=0")
		lbRoutes(t, b, "blackhole")
		assertSilent(t, c1.NS)
	})

	t.Run("L2 DSR from the balancer interface to b2", func(t *testing.T) {
		r := startRelay(t, b, b.Backend("b2"))
		assertServedBy(t, c1.NS, "b2")
		if r.relayed.Load() == 0 {
			t.Error("nothing went through the relay")
		}
		r.close()
		assertSilent(t, c1.NS)
	})

	t.Run("no backend answers ARP or NDP for a VIP", func(t *testing.T) {
		lb := b.LB.NS
		// On-link routes make the balancer ask the bridge for the VIPs.
		lbRoutes(t, b, "dev", b.LB.Iface, b.LB.Iface)
		defer func() {
			lbRoutes(t, b, "blackhole")
			_, _ = Exec(lb, "ip", "neigh", "flush", "dev", b.LB.Iface)
		}()
		for _, v6 := range families() {
			if st := resolve(t, lb, vip(v6, UDPEchoPort)); st != "" {
				t.Errorf("%s VIP resolved on the bridge: %s", family(v6), st)
			}
		}
		// The check can fail: with arp_ignore=0, b1 answers ARP for its lo.
		b1 := b.Backend("b1")
		mustExec(t, b1.NS, "sysctl", "-qw", "net.ipv4.conf.all.arp_ignore=0")
		st := resolve(t, lb, vip(false, UDPEchoPort))
		mustExec(t, b1.NS, "sysctl", "-qw", "net.ipv4.conf.all.arp_ignore=1")
		if !strings.Contains(st, b1.MAC.String()) {
			t.Errorf("control: with arp_ignore=0 b1 should answer ARP for the VIP; neighbour: %q", st)
		}
	})

	t.Run("flows spread over the balancer's rx queues", func(t *testing.T) {
		checkQueuesSpread(t, b)
	})

	// What tests change at runtime, seen where xlb's health checks look:
	// the weight header, /healthz's status, and the server being there.
	t.Run("weights, health and servers change at runtime", func(t *testing.T) {
		b2 := b.Backend("b2")
		at := netip.AddrPortFrom(b2.Addr4, HealthPort)
		healthz := func() (int, []string, error) {
			r, err := HTTPGet(b.LB.NS, at, "/healthz", answerTimeout)
			return r.Status, r.Header["X-Load-Balancing-Endpoint-Weight"], err
		}
		for _, w := range []string{"4", "0", "abc", ""} {
			if err := b.SetWeight("b2", w); err != nil {
				t.Fatal(err)
			}
			status, got, err := healthz()
			if want := []string{w}; err != nil || status != 200 || w == "" && got != nil || w != "" && !slices.Equal(got, want) {
				t.Errorf("after SetWeight(b2, %q): /healthz %d, weight header %q, %v", w, status, got, err)
			}
		}
		if err := b.SetWeight("b2", "2"); err != nil {
			t.Fatal(err)
		}
		for _, healthy := range []bool{false, true} {
			if err := b.SetHealthy("b2", healthy); err != nil {
				t.Fatal(err)
			}
			status, _, err := healthz()
			if want := map[bool]int{false: 503, true: 200}[healthy]; err != nil || status != want {
				t.Errorf("after SetHealthy(b2, %v): /healthz %d, %v; want %d", healthy, status, err, want)
			}
			// Unhealthy or not, it serves.
			if r, err := HTTPGet(b.LB.NS, netip.AddrPortFrom(b2.Addr4, HTTPPort), "/", answerTimeout); err != nil || r.Backend != "b2" {
				t.Errorf("SetHealthy(b2, %v): / answered %+v, %v", healthy, r, err)
			}
		}
		pid, err := b.ServerPID("b2")
		if err != nil {
			t.Fatal(err)
		}
		if err := b.StopServer("b2"); err != nil {
			t.Fatal(err)
		}
		if running(pid) {
			t.Errorf("b2's server (pid %d) runs after StopServer", pid)
		}
		if _, err := HTTPGet(b.LB.NS, at, "/healthz", answerTimeout); !errors.Is(err, syscall.ECONNREFUSED) {
			t.Errorf("b2 stopped: /healthz %v, want connection refused", err)
		}
		if err := b.SetHealthy("b2", true); err == nil {
			t.Error("SetHealthy on a stopped server: no error")
		}
		if err := b.StartServer("b2"); err != nil {
			t.Fatal(err)
		}
		if again, err := b.ServerPID("b2"); err != nil || again == pid {
			t.Errorf("after StartServer: pid %d (%v), was %d", again, err, pid)
		}
		// It starts with the weight the file holds, not --weights' value.
		if status, got, err := healthz(); err != nil || status != 200 || !slices.Equal(got, []string{"2"}) {
			t.Errorf("b2 restarted: /healthz %d, weight %q, %v; want 200, 2", status, got, err)
		}
		if err := b.StartServer("b2"); err != nil {
			t.Errorf("StartServer of a running server: %v", err)
		}
	})

	t.Run("up again changes nothing", func(t *testing.T) {
		before := serverPIDs(t, b)
		if _, err := b.run(append([]string{"up"}, b.Opts.args()...)...); err != nil {
			t.Fatal(err)
		}
		if after := serverPIDs(t, b); !slices.Equal(before, after) {
			t.Errorf("servers restarted: pids %v, then %v", before, after)
		}
		if r, err := HTTPGet(b.LB.NS, netip.AddrPortFrom(b.Backends[0].Addr4, HTTPPort), "/", answerTimeout); err != nil || r.Body != "backend b1\n" {
			t.Errorf("b1 after a second up: %+v, %v", r, err)
		}
		assertSilent(t, c1.NS)
	})
}

// TestDownTwice: down removes everything, twice in a row and on a prefix
// that never existed, and kills the servers.
func TestDownTwice(t *testing.T) {
	b := Up(t, Options{Prefix: "tbd", Backends: 1, Failover: -1})
	pids := serverPIDs(t, b)
	for i := range 2 {
		if err := b.Down(); err != nil {
			t.Fatalf("down #%d: %v", i+1, err)
		}
		assertGone(t, b, pids)
	}
	never, err := newBed(Options{Prefix: "tbnever"})
	if err != nil {
		t.Fatal(err)
	}
	if err := never.Down(); err != nil {
		t.Fatalf("down on nothing: %v", err)
	}
}

// TestDownAfterFailure: a test that fails right after Up still leaves
// nothing behind, because Up registered the teardown first.
func TestDownAfterFailure(t *testing.T) {
	f := &fakeTB{TB: t}
	var b *Bed
	var pids []int
	done := make(chan struct{})
	go func() {
		defer close(done)
		b = Up(f, Options{Prefix: "tbf", Backends: 1})
		pids = serverPIDs(f, b)
		f.Fatal("simulated failure")
		t.Error("Fatal returned")
	}()
	<-done
	if f.Skipped() {
		f.runCleanups()
		t.Skip("Up skipped (logged above)")
	}
	if !f.Failed() || b == nil {
		t.Fatalf("the simulated test did not get to fail after Up (failed %v)", f.Failed())
	}
	if len(namespaces(t, "tbf")) == 0 {
		t.Fatal("bed gone before its cleanup ran")
	}
	f.runCleanups()
	assertGone(t, b, pids)
}

// TestDownSweeps: down also removes namespaces that up did not make, the
// processes inside them, and links left in the namespace it runs in; it
// does not kill a process a stale pid file names.
func TestDownSweeps(t *testing.T) {
	nettest.RequireRoot(t)
	const p = "tbs"
	host := "tbsh-host" // another prefix: down for tbs must leave it
	t.Cleanup(func() { delNS(host); delNS(p + "-x9") })
	for _, ns := range []string{p + "-x9", host} {
		if out, err := runCmd("ip", "netns", "add", ns); err != nil {
			t.Fatal(out, err)
		}
	}
	mustExec(t, p+"-x9", "ip", "link", "add", p+"-xa", "type", "veth", "peer", "name", p+"-xb")
	mustExec(t, host, "ip", "link", "add", p+"-stray", "type", "veth", "peer", "name", "other0")
	inside := startProc(t, "ip", "netns", "exec", p+"-x9", "sleep", "60")
	outside := startProc(t, "sleep", "60")
	run := "/run/xlb-testbed-" + p
	if err := os.MkdirAll(run, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(run+"/b1.pid", []byte(strconv.Itoa(outside.Process.Pid)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	b, err := newBed(Options{Prefix: p})
	if err != nil {
		t.Fatal(err)
	}
	// Run down inside host, where its sweep of "links left outside
	// namespaces" finds tbs-stray; the machine's own namespace is not touched.
	if out, err := Exec(host, b.script, "down", "--prefix", p); err != nil {
		t.Fatal(out, err)
	}
	if got := namespaces(t, p); len(got) != 0 {
		t.Errorf("namespaces left: %v", got)
	}
	if got := links(t, host); slices.Contains(got, p+"-stray") || !slices.Contains(got, "lo") {
		t.Errorf("links in %s after down: %v; want lo and no %s-stray", host, got, p)
	}
	if err := waitExit(inside, 3*time.Second); err != nil {
		t.Errorf("process inside %s-x9: %v", p, err)
	}
	if running(outside.Process.Pid) {
		outside.Process.Kill()
		_, _ = outside.Process.Wait()
	} else {
		t.Error("down killed a process a stale pid file named")
	}
	if _, err := os.Stat(run); !os.IsNotExist(err) {
		t.Errorf("run directory left: %v", err)
	}
}

// TestScriptRefuses: bad arguments exit 2, a bad prefix or no root exit 1
// with a line saying why, before anything is touched.
func TestScriptRefuses(t *testing.T) {
	script, err := scriptPath()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		args   []string
		noRoot bool
		code   int
		says   string
	}{
		{"no command", nil, false, 2, "usage:"},
		{"unknown command", []string{"sideways"}, false, 2, "unknown command"},
		{"unknown flag", []string{"up", "--fast"}, false, 2, "unknown argument"},
		{"long prefix", []string{"up", "--prefix", "waytoolong"}, false, 1, "--prefix must be 1-8"},
		{"prefix with a dash", []string{"down", "--prefix", "a-b"}, false, 1, "--prefix must be"},
		{"too many clients", []string{"up", "--clients", "10"}, false, 1, "--clients must be a number from 1 to 9"},
		{"weights do not match", []string{"up", "--weights", "1,2"}, false, 1, "--weights needs 4 values"},
		{"too many instances", []string{"up", "--instances", "9"}, false, 1, "--instances must be a number from 0 to 8"},
		{"not root", []string{"status", "--prefix", "tbnr"}, true, 1, "must run as root"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.noRoot {
				nettest.RequireRoot(t) // dropping root needs it
			}
			code, out := runScript(t, script, tc.noRoot, tc.args...)
			if code != tc.code || !strings.Contains(out, tc.says) {
				t.Errorf("exit %d, output %q; want exit %d saying %q", code, out, tc.code, tc.says)
			}
		})
	}
}

func TestOptions(t *testing.T) {
	o, err := Options{Prefix: "ab1"}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if o.Clients != 1 || o.Backends != 3 || o.Failover != 1 || o.Queues != 2 {
		t.Errorf("defaults: %+v", o)
	}
	if o, err := (Options{Prefix: "ab1", Failover: -1}).withDefaults(); err != nil || o.Failover != 0 {
		t.Errorf("Failover -1: %+v, %v", o, err)
	}
	for _, bad := range []Options{
		{}, {Prefix: "Upper"}, {Prefix: "1abc"}, {Prefix: "abcdefghi"}, {Prefix: "a-b"},
		{Prefix: "a", Clients: 10}, {Prefix: "a", Backends: 50}, {Prefix: "a", Failover: -2},
		{Prefix: "a", Queues: 17}, {Prefix: "a", Weights: []int{1}}, {Prefix: "a", Weights: []int{1, 1, -1, 1}},
		{Prefix: "a", Instances: 9}, {Prefix: "a", Instances: -1},
	} {
		if _, err := bad.withDefaults(); err == nil {
			t.Errorf("%+v: accepted", bad)
		}
	}
	b, err := newBed(Options{Prefix: "ab1", Backends: 2, Failover: 2, Weights: []int{5, 6, 7, 8}})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"ab1-b1 10.97.0.11 fd00:97::11 02:97:00:00:00:0b false 5",
		"ab1-b2 10.97.0.12 fd00:97::12 02:97:00:00:00:0c false 6",
		"ab1-b3 10.97.0.13 fd00:97::13 02:97:00:00:00:0d true 7",
		"ab1-b4 10.97.0.14 fd00:97::14 02:97:00:00:00:0e true 8"}
	for i, be := range b.Backends {
		got := fmt.Sprintf("%s %s %s %s %v %d", be.NS, be.Addr4, be.Addr6, be.MAC, be.Failover, be.Weight)
		if got != want[i] {
			t.Errorf("backend %d: %s, want %s", i+1, got, want[i])
		}
	}
	if c := b.Clients[0]; c.Iface != "ab1-c1eth" || c.Addr4.String() != "10.98.0.101" || c.Addr6.String() != "fd00:98::101" {
		t.Errorf("client: %+v", c)
	}
	if b.LB.Iface != "ab1-lbeth" || b.LB.NS != "ab1-lb" {
		t.Errorf("balancer: %+v", b.LB)
	}
	if got := strings.Join(b.Opts.args(), " "); got != "--prefix ab1 --clients 1 --backends 2 --failover 2 --queues 2 --weights 5,6,7,8" {
		t.Errorf("script args: %s", got)
	}
	f, err := newBed(Options{Prefix: "ab2", Instances: 2})
	if err != nil {
		t.Fatal(err)
	}
	if f.LB.NS != "" || len(f.Instances) != 2 || f.Router.NS != "ab2-r" || f.Router.Addr4 != RouterSegment4 {
		t.Errorf("fleet bed: LB %+v, instances %+v, router %+v", f.LB, f.Instances, f.Router)
	}
	if in := f.Instances[1]; in.NS != "ab2-l2" || in.Iface != "ab2-l2eth" || in.Addr4.String() != "10.97.0.3" ||
		in.Addr6.String() != "fd00:97::3" || in.MAC.String() != "02:97:00:00:01:02" {
		t.Errorf("instance 2: %+v", in)
	}
	if got := strings.Join(f.Opts.args(), " "); !strings.HasSuffix(got, " --instances 2") {
		t.Errorf("fleet script args: %s", got)
	}
}

// lbRoutes replaces the balancer's routes to the VIPs: "blackhole" (the
// bed's own), or "via"/"dev" with an IPv4 and an IPv6 argument.
func lbRoutes(t *testing.T, b *Bed, kind string, v4v6 ...string) {
	t.Helper()
	for i, v6 := range families() {
		args := []string{"ip", "-4", "route", "replace"}
		dst := VIP4.String() + "/32"
		if v6 {
			args[1], dst = "-6", VIP6.String()+"/128"
		}
		if kind == "blackhole" {
			args = append(args, "blackhole", dst)
		} else {
			args = append(args, dst, kind, v4v6[i])
		}
		mustExec(t, b.LB.NS, args...)
	}
}

// assertServedBy: from ns, HTTP and UDP to both VIPs are answered by backend.
func assertServedBy(t *testing.T, ns, backend string) {
	t.Helper()
	for _, v6 := range families() {
		r, err := HTTPGet(ns, vip(v6, HTTPPort), "/", answerTimeout)
		if err != nil {
			t.Errorf("%s HTTP to the VIP: %v", family(v6), err)
		} else if r.Status != 200 || r.Backend != backend || r.Body != "backend "+backend+"\n" {
			t.Errorf("%s HTTP to the VIP: status %d, X-Backend %q, body %q; want 200 from %s", family(v6), r.Status, r.Backend, r.Body, backend)
		}
		// The echo socket is connected to the VIP: an answer from the
		// backend's own address would not be seen.
		name, err := UDPEcho(ns, vip(v6, UDPEchoPort), "ping "+family(v6), answerTimeout)
		if err != nil || name != backend {
			t.Errorf("%s UDP to the VIP: %q, %v; want %s", family(v6), name, err, backend)
		}
	}
}

// assertSilent: from ns, nothing answers on the VIPs.
func assertSilent(t *testing.T, ns string) {
	t.Helper()
	for _, v6 := range families() {
		if c, err := Dial(ns, "tcp", vip(v6, HTTPPort), silenceTimeout); err == nil {
			c.Close()
			t.Errorf("%s TCP to the VIP connected: something answers", family(v6))
		}
		if name, err := UDPEcho(ns, vip(v6, UDPEchoPort), "hello?", silenceTimeout); err == nil {
			t.Errorf("%s UDP to the VIP answered by %s", family(v6), name)
		}
	}
}

// resolve sends a datagram from ns to dst and returns its neighbour entry
// if it resolved (REACHABLE and the like), or "" if it did not.
func resolve(t *testing.T, ns string, dst netip.AddrPort) string {
	t.Helper()
	fam := "-4"
	if dst.Addr().Is6() {
		fam = "-6"
	}
	_, _ = Exec(ns, "ip", "neigh", "flush", "to", dst.Addr().String())
	c, err := Dial(ns, "udp", dst, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for range 3 {
		_, _ = c.Write([]byte("x"))
		time.Sleep(100 * time.Millisecond)
	}
	out := mustExec(t, ns, "ip", fam, "neigh", "show", "to", dst.Addr().String())
	if strings.Contains(out, "lladdr") {
		return strings.TrimSpace(out)
	}
	return ""
}

func backendHosts(b *Bed) []Host {
	var hs []Host
	for _, be := range b.Backends {
		hs = append(hs, be.Host)
	}
	return hs
}

// checkIface: h's interface exists in its namespace with its MAC and addresses.
func checkIface(t *testing.T, h Host) {
	t.Helper()
	var mac net.HardwareAddr
	var addrs []netip.Addr
	err := nsx.Do(h.NS, func() error {
		ifc, err := net.InterfaceByName(h.Iface)
		if err != nil {
			return err
		}
		mac = ifc.HardwareAddr
		addrs, err = ifaceAddrs(ifc)
		return err
	})
	if err != nil {
		t.Fatalf("%s: %v", h.NS, err)
	}
	if mac.String() != h.MAC.String() {
		t.Errorf("%s %s: MAC %s, want %s", h.NS, h.Iface, mac, h.MAC)
	}
	for _, a := range []netip.Addr{h.Addr4, h.Addr6} {
		if !slices.Contains(addrs, a) {
			t.Errorf("%s %s: addresses %v lack %s", h.NS, h.Iface, addrs, a)
		}
	}
}

func addrsOn(t *testing.T, ns, iface string) []netip.Addr {
	t.Helper()
	var addrs []netip.Addr
	err := nsx.Do(ns, func() error {
		ifc, err := net.InterfaceByName(iface)
		if err != nil {
			return err
		}
		addrs, err = ifaceAddrs(ifc)
		return err
	})
	if err != nil {
		t.Fatalf("%s: %v", ns, err)
	}
	return addrs
}

func ifaceAddrs(ifc *net.Interface) ([]netip.Addr, error) {
	as, err := ifc.Addrs()
	if err != nil {
		return nil, err
	}
	var out []netip.Addr
	for _, a := range as {
		if p, err := netip.ParsePrefix(a.String()); err == nil {
			out = append(out, p.Addr())
		}
	}
	return out, nil
}

func sysctl(t *testing.T, ns, key string) string {
	t.Helper()
	return strings.TrimSpace(mustExec(t, ns, "sysctl", "-n", key))
}

func serverPIDs(t testing.TB, b *Bed) []int {
	t.Helper()
	var pids []int
	for _, be := range b.Backends {
		pid, err := b.ServerPID(be.Name)
		if err != nil {
			t.Fatalf("%s: %v", be.Name, err)
		}
		if !running(pid) {
			t.Fatalf("%s: server pid %d not running", be.Name, pid)
		}
		pids = append(pids, pid)
	}
	return pids
}

// assertGone: no namespace or machine-level link with b's prefix, no run
// directory, none of the servers' pids running.
func assertGone(t *testing.T, b *Bed, pids []int) {
	t.Helper()
	p := b.Opts.Prefix
	if got := namespaces(t, p); len(got) != 0 {
		t.Errorf("namespaces left: %v", got)
	}
	out, err := runCmd("ip", "-o", "link", "show")
	if err != nil {
		t.Fatal(out, err)
	}
	if strings.Contains(out, ": "+p+"-") {
		t.Errorf("links left on the machine:\n%s", out)
	}
	if _, err := os.Stat(b.RunDir); !os.IsNotExist(err) {
		t.Errorf("run directory left: %v", err)
	}
	for _, pid := range pids {
		if running(pid) {
			t.Errorf("server pid %d still running", pid)
		}
	}
}

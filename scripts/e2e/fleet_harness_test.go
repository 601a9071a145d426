package e2e

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"xlb/controlplane/cptest"
	"xlb/dataplane/craft"
	"xlb/dataplane/packet"
	"xlb/internal/syncbuf"
	"xlb/scripts/testbed"
)

// The fleet: xlb instances l1..l3 of the fleet bed (scripts/testbed.sh
// --instances 3) behind its router, each running `xlb run` with the same
// services. The harness here starts and stops instances, watches the
// router's ECMP route to the VIPs, and runs the clients'
// traffic: long-lived kept-alive connections and a steady stream of new
// ones, recording every answer, failure and change of backend.

const (
	// fleetHold and fleetGrace are the instances' [bgp] hold_time_sec and
	// graceful_shutdown_sec.
	fleetHold  = 3 * time.Second
	fleetGrace = 2 * time.Second
	// fleetWait bounds every wait for a state (routes, health, answers):
	// generous for a loaded machine, never an expectation.
	fleetWait = 60 * time.Second
	// fleetAdminPort: each instance's admin listener listens on every
	// address (0.0.0.0:9110), so that /status is read from inside the
	// namespace (fleetAdmin) and from the router's (xlb status --fleet);
	// drain and undrain go through each instance's socket (adminSocket).
	fleetAdminPort = 9110
)

var fleetAdmin = netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), fleetAdminPort)

// fleet is the bed and its running instances.
type fleet struct {
	bed   *testbed.Bed
	cfgs  []string   // configuration file per instance
	procs []*xlbProc // per instance, nil when not started
	// started is every xlb ever started, stopped by upFleet's cleanup.
	started []*xlbProc
	// rig decides new connections as l1's configuration does: the
	// predictions. xlb explain builds a control plane per call (120 ms
	// under -race, more on a loaded machine); 1,050 calls took minutes.
	rig *cptest.Rig
}

// fleetConfig is instance in's configuration: web (TCP 80 on VIP4) and
// web6 (TCP 80 on VIP6) over b1-b3, L2 DSR, HTTP health checks of
// /healthz every second (SetHealthy turns a backend's verdict), and [bgp]:
// AS 65010, hold time 3 s (BIRD offers 9; the session takes the smaller),
// graceful shutdown 2 s, with neighbors ("": the router) as its sessions.
func fleetConfig(b *testbed.Bed, in testbed.Host, neighbors string) string {
	return fleetConfigWith(b, in, neighbors, fleetOpts{})
}

// fleetOpts vary fleetConfig for a test of its own.
type fleetOpts struct {
	backends []string // the bed's backends the services have; nil: all
	svcKeys  string   // more keys of both services (TOML lines)
	stateDir string   // dataplane.state_dir; "": none kept
	more     string   // more sections, after [bgp]
}

// fleetConfigWith is fleetConfig varied by o.
func fleetConfigWith(b *testbed.Bed, in testbed.Host, neighbors string, o fleetOpts) string {
	eps := func(v6 bool) string {
		var e []string
		for _, be := range b.Backends {
			if o.backends != nil && !slices.Contains(o.backends, be.Name) {
				continue
			}
			a, name := be.Addr4, be.Name
			if v6 {
				a, name = be.Addr6, be.Name+"-v6" // names are unique in a file
			}
			e = append(e, fmt.Sprintf("{ name = %q, ip = %q }", name, a))
		}
		return strings.Join(e, ", ")
	}
	svc := func(name string, v6 bool) string {
		return fmt.Sprintf(`
[[backend_service]]
name = %q
protocol = "TCP"
health_checks = ["hc"]
forwarding_method = "L2_DSR"
%s
  [[backend_service.backend]]
  group = "primary"
  endpoints = [ %s ]
`, name, o.svcKeys, eps(v6))
	}
	rule := func(name string, vip netip.Addr, service string) string {
		return fmt.Sprintf(`
[[forwarding_rule]]
name = %q
ip_address = %q
ip_protocol = "TCP"
ports = ["%d"]
backend_service = %q
`, name, vip, testbed.HTTPPort, service)
	}
	if neighbors == "" {
		neighbors = fmt.Sprintf("  [[bgp.neighbor]]\n  address = %q\n  asn = %d\n", testbed.RouterSegment4, testbed.RouterASN)
	}
	bgp := fmt.Sprintf(`
[bgp]
asn = %d
hold_time_sec = %d
graceful_shutdown_sec = %d
%s`, testbed.InstanceASN, int(fleetHold/time.Second), int(fleetGrace/time.Second), neighbors)
	text := fmt.Sprintf(`
[dataplane]
interface = %q
queues = "all"
xdp_mode = "native"
zero_copy = "auto"
frame_size = 2048
ring_size = 512
conntrack_capacity = 65536
state_dir = ""

[admin]
listen = "0.0.0.0:%d"
socket = %q

[[health_check]]
name = "hc"
type = "HTTP"
port = %d
request_path = "/healthz"
check_interval_sec = 1
timeout_sec = 1
healthy_threshold = 1
unhealthy_threshold = 1
`, in.Iface, fleetAdminPort, adminSocket(in.NS), testbed.HTTPPort) +
		svc("web", false) + svc("web6", true) +
		rule("web-v4", testbed.VIP4, "web") + rule("web-v6", testbed.VIP6, "web6") + bgp + o.more
	if o.stateDir != "" {
		text = strings.Replace(text, "\nstate_dir = \"\"\n", fmt.Sprintf("\nstate_dir = %q\n", o.stateDir), 1)
	}
	return text
}

// upFleet brings the fleet bed up with three instances and writes their
// configurations; no instance runs yet.
func upFleet(t *testing.T, prefix string) *fleet {
	t.Helper()
	return upFleetWith(t, testbed.Options{Prefix: prefix, Instances: 3, Failover: -1}, nil)
}

// upFleetWith is upFleet on a bed of opts, with conf(b, j) as instance
// j's configuration (nil: fleetConfig's).
func upFleetWith(t *testing.T, opts testbed.Options, conf func(b *testbed.Bed, j int) string) *fleet {
	t.Helper()
	b := upBed(t, opts)
	f := &fleet{bed: b, procs: make([]*xlbProc, len(b.Instances))}
	dir := t.TempDir()
	for j, in := range b.Instances {
		f.cfgs = append(f.cfgs, filepath.Join(dir, in.Name+".toml"))
		if conf == nil {
			f.writeConfig(t, j, "")
		} else {
			f.write(t, j, conf(b, j))
		}
	}
	f.loadExp(t)
	// One cleanup for every instance ever started: diagnostics while they
	// run, then stop them, then their logs.
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("fleet diagnostics at failure:\n%s", f.diagnostics())
		}
		for _, p := range f.started {
			p.stop()
		}
		for _, p := range f.started {
			ns := p.cmd.Args[3]
			if strings.Contains(p.log.String(), "WARNING: DATA RACE") {
				t.Errorf("xlb in %s reported a data race (log below)", ns)
			}
			if t.Failed() {
				t.Logf("xlb log of %s (pid %d, %v):\n%s", ns, p.cmd.Process.Pid, p.err, p.log.String())
			}
		}
	})
	return f
}

// writeConfig writes instance j's configuration, with neighbors as its
// [bgp] neighbors ("" for the router).
func (f *fleet) writeConfig(t *testing.T, j int, neighbors string) {
	t.Helper()
	if err := os.WriteFile(f.cfgs[j], []byte(fleetConfig(f.bed, f.bed.Instances[j], neighbors)), 0o644); err != nil {
		t.Fatal(err)
	}
}

// write writes text as instance j's configuration.
func (f *fleet) write(t *testing.T, j int, text string) {
	t.Helper()
	if err := os.WriteFile(f.cfgs[j], []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

// loadExp reads l1's configuration for the predictions: again after a
// change every instance is given.
func (f *fleet) loadExp(t *testing.T) {
	t.Helper()
	text, err := os.ReadFile(f.cfgs[0])
	if err != nil {
		t.Fatal(err)
	}
	f.rig = cptest.New(t, string(text))
}

// start runs `xlb run` in instance j's namespace and waits for its admin
// listener; whatever runs at the end of the top-level test is stopped, and
// a failed test gets every instance's log.
func (f *fleet) start(t *testing.T, j int) *xlbProc {
	t.Helper()
	in := f.bed.Instances[j]
	ownStateDir(t, f.cfgs[j])
	p := &xlbProc{bed: f.bed, log: &syncbuf.Buffer{}, exited: make(chan struct{}),
		cmd: exec.Command("ip", "netns", "exec", in.NS, xlbBin, "run", "-c", f.cfgs[j])}
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("starting xlb in %s: %v", in.NS, err)
	}
	go func() { p.err = p.cmd.Wait(); close(p.exited) }()
	f.procs[j] = p
	f.started = append(f.started, p)
	deadline := time.Now().Add(fleetWait)
	for {
		select {
		case <-p.exited:
			t.Fatalf("xlb in %s exited before serving /healthz (%v):\n%s", in.NS, p.err, p.log.String())
		default:
		}
		if r, err := testbed.HTTPGet(in.NS, fleetAdmin, "/healthz", time.Second); err == nil && r.Status == 200 {
			return p
		}
		if time.Now().After(deadline) {
			t.Fatalf("xlb in %s: no /healthz within %v:\n%s", in.NS, fleetWait, p.log.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// adminGet fetches path from instance j's admin listener.
func (f *fleet) adminGet(t *testing.T, j int, path string) string {
	t.Helper()
	r, err := testbed.HTTPGet(f.bed.Instances[j].NS, fleetAdmin, path, 2*time.Second)
	if err != nil {
		t.Fatalf("%s admin %s: %v", f.bed.Instances[j].Name, path, err)
	}
	if r.Status != 200 {
		t.Fatalf("%s admin %s: status %d: %s", f.bed.Instances[j].Name, path, r.Status, r.Body)
	}
	return r.Body
}

// fleetStatus is the part of an instance's /status the fleet tests read.
type fleetStatus struct {
	Services []struct {
		statusService
		Fingerprint string `json:"fingerprint"`
	} `json:"services"`
	BGP *struct {
		ASN          uint32 `json:"asn"`
		RouterID     string `json:"router_id"`
		NodeDrained  bool   `json:"node_drained"`
		ShuttingDown bool   `json:"shutting_down"`
		Neighbors    []struct {
			Address     string `json:"address"`
			ASN         uint32 `json:"asn"`
			State       string `json:"state"`
			Up          bool   `json:"up"`
			Reason      string `json:"reason"`
			Transitions uint64 `json:"transitions"`
		} `json:"neighbors"`
		VIPs []struct {
			VIP       string `json:"vip"`
			Announced bool   `json:"announced"`
			NextHop   string `json:"next_hop"`
			Reason    string `json:"reason"`
		} `json:"vips"`
	} `json:"bgp"`
}

func (f *fleet) status(t *testing.T, j int) fleetStatus {
	t.Helper()
	var s fleetStatus
	body := f.adminGet(t, j, "/status")
	if err := json.Unmarshal([]byte(body), &s); err != nil {
		t.Fatalf("%s /status: %v\n%s", f.bed.Instances[j].Name, err, body)
	}
	return s
}

// waitStatus polls instance j's /status until ok accepts it.
func (f *fleet) waitStatus(t *testing.T, j int, what string, ok func(fleetStatus) bool) fleetStatus {
	t.Helper()
	deadline := time.Now().Add(fleetWait)
	for {
		s := f.status(t, j)
		if ok(s) {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s /status: no %s within %v: %+v", f.bed.Instances[j].Name, what, fleetWait, s)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// fleetHealthy accepts a status whose backends all pass their checks.
func fleetHealthy(s fleetStatus) bool {
	for _, svc := range s.Services {
		for _, be := range svc.Backends {
			if !be.Removed && !be.Healthy {
				return false
			}
		}
	}
	return len(s.Services) > 0
}

// newConns sums instance j's xlb_backend_new_connections_total per backend
// over its services (b1 -> count): the flows it recorded, new connections
// and flows it saw first in mid-connection (a CT4 miss) alike.
func (f *fleet) newConns(t *testing.T, j int) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for _, line := range strings.Split(f.adminGet(t, j, "/metrics"), "\n") {
		if !strings.HasPrefix(line, "xlb_backend_new_connections_total{") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("/metrics: %q", line)
		}
		be := line[strings.Index(line, `backend="`)+len(`backend="`):]
		out[strings.TrimSuffix(be[:strings.IndexByte(be, '"')], "-v6")] += v
	}
	return out
}

// newConnsTotal is the sum of newConns for every instance in js.
func (f *fleet) newConnsTotal(t *testing.T, js ...int) []float64 {
	t.Helper()
	var tot []float64
	for _, j := range js {
		s := 0.0
		for _, v := range f.newConns(t, j) {
			s += v
		}
		tot = append(tot, s)
	}
	return tot
}

// --- the router's route to the VIPs ---------------------------------------

// routeVia is the router's kernel route to the VIP of a family: its next
// hops as instance indexes (sorted), and the route's text.
func (f *fleet) routeVia(t *testing.T, v6 bool) ([]int, string) {
	t.Helper()
	fam, dst := "-4", testbed.VIP4.String()
	if v6 {
		fam, dst = "-6", testbed.VIP6.String()
	}
	out, err := testbed.Exec(f.bed.Router.NS, "ip", fam, "route", "show", "to", dst)
	if err != nil {
		t.Fatal(err)
	}
	var js []int
	fields := strings.Fields(out)
	for i := 0; i+1 < len(fields); i++ {
		if fields[i] != "via" {
			continue
		}
		a := fields[i+1]
		if (a == "inet" || a == "inet6") && i+2 < len(fields) {
			a = fields[i+2]
		}
		for j, in := range f.bed.Instances {
			if a == in.Addr4.String() || a == in.Addr6.String() {
				js = append(js, j)
			}
		}
	}
	sort.Ints(js)
	return slices.Compact(js), out
}

// waitRoutes waits until the router's routes to both VIPs go via exactly
// instances js (none: no route) and returns when they first did.
func (f *fleet) waitRoutes(t *testing.T, js ...int) time.Time {
	t.Helper()
	want := slices.Clone(js)
	sort.Ints(want)
	deadline := time.Now().Add(fleetWait)
	for {
		g4, o4 := f.routeVia(t, false)
		g6, o6 := f.routeVia(t, true)
		if slices.Equal(g4, want) && slices.Equal(g6, want) {
			return time.Now()
		}
		if time.Now().After(deadline) {
			bird, _ := f.bed.BirdC("show", "protocols", "all")
			t.Fatalf("router: routes to the VIPs %q, %q; want next hops %s within %v\nBIRD:\n%s",
				o4, o6, f.names(want...), fleetWait, bird)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// names lists instances js by name ("l1, l3").
func (f *fleet) names(js ...int) string {
	var n []string
	for _, j := range js {
		n = append(n, f.bed.Instances[j].Name)
	}
	if len(n) == 0 {
		return "none"
	}
	return strings.Join(n, ", ")
}

// --- predictions -------------------------------------------------------------

// predict is the backend for a new TCP connection from src to dst (SYN)
// on the fleet's configuration with every backend healthy: the engine
// every instance runs, on the tables every instance builds (S5), as `xlb
// explain` decides it (it runs that engine; ECMPSpread asks the command
// itself for a few).
func (f *fleet) predict(t *testing.T, src, dst netip.AddrPort) string {
	t.Helper()
	f.rig.TB = t
	r := f.rig.Send(craft.Packet{Src: src.Addr().Unmap(), Dst: dst.Addr().Unmap(), Proto: packet.ProtoTCP,
		SrcPort: src.Port(), DstPort: dst.Port(), Flags: "S"})
	return strings.TrimSuffix(r.BackendName(), "-v6") // the server's name
}

// --- diagnostics ---------------------------------------------------------------

// diagnostics says where the fleet's packets went, for a failed test: the
// router's routes and sessions, each running instance's drops, queues and
// BGP status, and TCP's counters at the clients and backends.
func (f *fleet) diagnostics() string {
	var out strings.Builder
	section := func(title, body string) {
		fmt.Fprintf(&out, "== %s\n%s\n", title, strings.TrimRight(body, "\n"))
	}
	for _, c := range [][]string{{"ip", "-4", "route"}, {"ip", "-6", "route"}, {"ip", "-s", "link"}} {
		o, err := testbed.Exec(f.bed.Router.NS, c...)
		if err != nil {
			o = err.Error()
		}
		section("router: "+strings.Join(c, " "), o)
	}
	if o, err := f.bed.BirdC("show", "protocols"); err == nil {
		section("router: birdc show protocols", o)
	}
	for j, in := range f.bed.Instances {
		p := f.procs[j]
		if p == nil {
			continue
		}
		select {
		case <-p.exited:
			section(in.Name, fmt.Sprintf("not running (%v)", p.err))
			continue
		default:
		}
		r, err := testbed.HTTPGet(in.NS, fleetAdmin, "/metrics", 2*time.Second)
		if err != nil {
			section(in.Name+" /metrics", err.Error())
			continue
		}
		var lines []string
		for _, line := range strings.Split(r.Body, "\n") {
			i := strings.LastIndexByte(line, ' ')
			if line == "" || line[0] == '#' || i < 0 {
				continue
			}
			name, v := line[:i], line[i+1:]
			if (strings.Contains(name, "drop") && v != "0") || strings.HasPrefix(name, "xlb_queue_rx") ||
				strings.HasPrefix(name, "xlb_backend_new_connections_total") || strings.HasPrefix(name, "xlb_bgp") {
				lines = append(lines, line)
			}
		}
		section(in.Name+" /metrics (drops, rx, new connections, bgp)", strings.Join(lines, "\n"))
		if r, err := testbed.HTTPGet(in.NS, fleetAdmin, "/status", 2*time.Second); err == nil {
			var st struct {
				BGP json.RawMessage `json:"bgp"`
			}
			if json.Unmarshal([]byte(r.Body), &st) == nil && st.BGP != nil {
				section(in.Name+" /status bgp", string(st.BGP))
			}
		}
	}
	tcp := tcpCounters(f.bed, "Tcp.ActiveOpens", "Tcp.PassiveOpens", "Tcp.AttemptFails", "Tcp.RetransSegs",
		"Tcp.OutRsts", "Tcp.EstabResets", "TcpExt.TCPSynRetrans", "TcpExt.TCPTimeouts", "TcpExt.ListenOverflows")
	section("kernel TCP counters", tcp)
	return out.String()
}

// --- traffic ---------------------------------------------------------------------

// longConn is a long-lived kept-alive HTTP connection from the client to a
// VIP (a keptConn whose answers may take 10 s, so that it waits out TCP's
// retransmissions while its route changes), asking every 100 ms until
// stopped or its first failure; its backend is the one of its first
// answer, which predict foresees.
type longConn struct {
	keptConn
	local, remote netip.AddrPort
}

// attempt is one new connection of the steady stream: connect, GET, answer.
type attempt struct {
	at      time.Time
	latency time.Duration
	v6      bool
	backend string
	err     error
}

// traffic is the clients' load on the fleet.
type traffic struct {
	f    *fleet
	stop chan struct{}
	wg   sync.WaitGroup

	conns []*longConn
	// timeout is how long each answer of a long-lived connection may take
	// (0: 10 s).
	timeout time.Duration

	mu         sync.Mutex
	attempts   []attempt
	streamStop chan struct{}
}

func newTraffic(t *testing.T, f *fleet) *traffic {
	tr := &traffic{f: f, stop: make(chan struct{})}
	t.Cleanup(tr.close)
	return tr
}

// close stops everything and waits for it.
func (tr *traffic) close() {
	select {
	case <-tr.stop:
	default:
		close(tr.stop)
	}
	tr.wg.Wait()
}

// open opens n long-lived connections from the first client (every fourth
// to VIP6), 16 at a time, each asking from its first answer on. Each
// one's first answer must come from the predicted backend (predict).
// A connection left idle until all were open would be closed by its
// server's idle timeout (a minute) where opening takes that long: a
// loaded machine under -race took 70 s, and the first ones opened failed
// with EOF before any event of the test.
func (tr *traffic) open(t *testing.T, n int) []*longConn {
	t.Helper()
	c := tr.f.bed.Clients[0]
	conns := make([]*longConn, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	for i := range n {
		vip := testbed.VIP4
		if i%4 == 3 {
			vip = testbed.VIP6
		}
		dst := netip.AddrPortFrom(vip, testbed.HTTPPort)
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			hc, err := testbed.DialHTTP(c.NS, dst, 3*time.Second)
			if err != nil {
				errs[i] = err
				return
			}
			r, err := hc.Get("/", 3*time.Second)
			if err != nil {
				hc.Close()
				errs[i] = fmt.Errorf("first request: %w", err)
				return
			}
			timeout := tr.timeout
			if timeout == 0 {
				timeout = 10 * time.Second
			}
			lc := &longConn{keptConn: keptConn{backend: r.Backend, timeout: timeout},
				local: netip.MustParseAddrPort(hc.LocalAddr().String()), remote: dst}
			conns[i] = lc
			tr.wg.Go(func() { lc.run(hc, tr.stop) }) // tr.close ends it
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("long-lived connection %d of %d: %v", i, n, err)
		}
	}
	for _, lc := range conns {
		if want := tr.f.predict(t, lc.local, lc.remote); lc.backend != want {
			t.Errorf("long-lived connection %s -> %s answered by %s, predicted %s", lc.local, lc.remote, lc.backend, want)
		}
	}
	tr.conns = append(tr.conns, conns...)
	return conns
}

// startStream opens a new connection every 20 ms (alternately to VIP4 and
// VIP6), each with its own goroutine and 3 s to be answered (a SYN the
// kernel retransmits after 1 s still counts), until stopStream.
func (tr *traffic) startStream() {
	c := tr.f.bed.Clients[0]
	tr.streamStop = make(chan struct{})
	stop := tr.streamStop
	tr.wg.Go(func() {
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-tr.stop:
				return
			case <-tick.C:
			}
			v6 := i%2 == 1
			dst := netip.AddrPortFrom(testbed.VIP4, testbed.HTTPPort)
			if v6 {
				dst = netip.AddrPortFrom(testbed.VIP6, testbed.HTTPPort)
			}
			tr.wg.Go(func() {
				at := time.Now()
				r, err := testbed.HTTPGet(c.NS, dst, "/", 3*time.Second)
				a := attempt{at: at, latency: time.Since(at), v6: v6, backend: r.Backend, err: err}
				tr.mu.Lock()
				tr.attempts = append(tr.attempts, a)
				tr.mu.Unlock()
			})
		}
	})
}

// stopStream stops opening new connections and waits until every one
// opened has its result.
func (tr *traffic) stopStream() {
	close(tr.streamStop)
	time.Sleep(3500 * time.Millisecond) // the last attempts' timeout
}

// attemptsBetween returns the stream's attempts started in [from, to).
func (tr *traffic) attemptsBetween(from, to time.Time) []attempt {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	var out []attempt
	for _, a := range tr.attempts {
		if !a.at.Before(from) && a.at.Before(to) {
			out = append(out, a)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].at.Before(out[j].at) })
	return out
}

// alive are the long-lived connections that have not failed.
func (tr *traffic) alive() []*longConn {
	var out []*longConn
	for _, c := range tr.conns {
		c.mu.Lock()
		if c.failAt.IsZero() {
			out = append(out, c)
		}
		c.mu.Unlock()
	}
	return out
}

// settle waits until every connection of conns has been answered after
// since, or has failed: then whatever an event did to them is known.
func (tr *traffic) settle(t *testing.T, conns []*longConn, since time.Time) {
	t.Helper()
	deadline := time.Now().Add(fleetWait)
	for {
		waiting := 0
		for _, c := range conns {
			if !c.answeredSince(since, 1) {
				waiting++
			}
		}
		if waiting == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d long-lived connections neither answered nor failed within %v", waiting, fleetWait)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// broken lists the connections of conns that failed or changed backend
// at or after since, one line each.
func (tr *traffic) broken(conns []*longConn, since time.Time) []string {
	var out []string
	for _, c := range conns {
		c.mu.Lock()
		switch {
		case !c.failAt.IsZero() && !c.failAt.Before(since):
			out = append(out, fmt.Sprintf("%s -> %s (%s): failed after %v: %v", c.local, c.remote, c.backend, c.failAt.Sub(since).Round(time.Millisecond), c.failErr))
		case !c.movedAt.IsZero() && !c.movedAt.Before(since):
			out = append(out, fmt.Sprintf("%s -> %s: moved from %s to %s after %v", c.local, c.remote, c.backend, c.moved, c.movedAt.Sub(since).Round(time.Millisecond)))
		}
		c.mu.Unlock()
	}
	return out
}

// answers is the number of answers the connections have had in all.
func answers(conns []*longConn) int {
	n := 0
	for _, c := range conns {
		c.mu.Lock()
		n += len(c.ok)
		c.mu.Unlock()
	}
	return n
}

// signal sends sig to instance j's xlb.
func (f *fleet) signal(t *testing.T, j int, sig syscall.Signal) {
	t.Helper()
	if err := f.procs[j].cmd.Process.Signal(sig); err != nil {
		t.Fatalf("%v to xlb in %s: %v", sig, f.bed.Instances[j].NS, err)
	}
}

// waitExit waits until instance j's xlb has exited and returns its error.
func (f *fleet) waitExit(t *testing.T, j int) error {
	t.Helper()
	select {
	case <-f.procs[j].exited:
		return f.procs[j].err
	case <-time.After(fleetWait):
		t.Fatalf("xlb in %s still runs %v later", f.bed.Instances[j].NS, fleetWait)
		return nil
	}
}

// xlbIn runs the xlb command (drain, status, ...) in instance j's namespace.
func (f *fleet) xlbIn(j int, args ...string) (string, error) {
	return testbed.Exec(f.bed.Instances[j].NS, append([]string{xlbBin}, args...)...)
}

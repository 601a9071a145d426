package e2e

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"xlb/internal/nsx"
	"xlb/scripts/testbed"
)

// Sizes of TestReload_EverySYNAccounted: the reloads of its burst (at
// most synReloads; at least synMinReloads, however long they take), how
// long a burst of more than synMinReloads may go on, the pace of its new
// connections, and how long one reload may take before xlb is taken for
// hung (a bound against a hang only: a reload took 0.3-2 s under eight busy
// processes at nice -10).
const (
	synReloads    = 50
	synMinReloads = 10
	synBurstFor   = 15 * time.Second
	synEvery      = 15 * time.Millisecond
	synHung       = 5 * time.Minute
)

// synConn is one new connection of TestReload_EverySYNAccounted.
type synConn struct {
	at      time.Time     // when its connect began
	took    time.Duration // until established (or failed)
	port    uint16        // its source port
	retrans uint32        // SYNs the kernel sent again before it was established (TCP_INFO)
	backend string
	err     error
}

// TestReload_EverySYNAccounted (X2) opens a new connection (connect and a
// GET through the VIP) every 15 ms while xlb reloads 50 times (or as many
// as 15 s allow on a starved machine, 10 at least however long they take),
// each SIGHUP once the reload before it was applied, between
// two valid files that rebuild the service's tables: MAGLEV over b1-b3,
// and WEIGHTED_MAGLEV (reported weights 1, 1, 4) over b1-b4 (b4 comes and
// goes: neighbours, health targets, a drain of 10 s, so that a connection
// b4 took is not reset by its removal), with two busy processes per CPU.
// Every connection must succeed. A SYN the client had to send again (its
// socket's TCP_INFO says which connection) was lost or answered late; the
// test asserts that each one is accounted for by a counter: xlb's drops by
// reason and frames it passed, its AF_XDP rings, VIP frames the XDP
// program passed to the balancer's kernel (which drops them), the
// interfaces' and the host backlog's drops, the backends' listen queues,
// or a backend that answered a SYN again (the SYN reached it: late, or its
// answer was lost on the way back, which does not pass through xlb). A SYN
// sent again that no counter explains fails the test with the diagnostics.
func TestReload_EverySYNAccounted(t *testing.T) {
	// Not parallel: it keeps every CPU busy while it runs.
	b := upBed(t, testbed.Options{Prefix: "e2esyn", Backends: 4, Failover: -1, Weights: []int{1, 1, 4, 1}})
	web := netip.AddrPortFrom(testbed.VIP4, testbed.HTTPPort)
	config := func(policy string, backends ...string) []byte {
		text, err := os.ReadFile(faultConfig(t, b, 1, 2, faultSvc{name: "web", port: web.Port(),
			primaries: backends, keys: fmt.Sprintf("locality_lb_policy = %q\nconnection_draining_timeout_sec = 10", policy)}))
		must(t, err)
		return text
	}
	files := [2][]byte{config("MAGLEV", "b1", "b2", "b3"), config("WEIGHTED_MAGLEV", "b1", "b2", "b3", "b4")}
	cfg := faultConfig(t, b, 1, 2, faultSvc{name: "web", port: web.Port(), primaries: []string{"b1", "b2", "b3"}})
	must(t, os.WriteFile(cfg, files[0], 0o644))
	p := startXLB(t, b, cfg)
	waitWeights(t, b, "MAGLEV, every backend healthy", false,
		map[string]uint32{"b1": 1, "b2": 1, "b3": 1}, map[string]uint32{"b1": 1, "b2": 1, "b3": 4})
	if _, err := testbed.HTTPGet(b.Clients[0].NS, web, "/", 5*time.Second); err != nil {
		t.Fatalf("a first connection through the VIP: %v", err)
	}

	before := lossCounters(t, b)
	stopBusy := busyCPUs(t)
	defer stopBusy()

	// New connections, each from its own goroutine, one every synEvery.
	var (
		cmu   sync.Mutex
		conns []synConn
		cwg   sync.WaitGroup
	)
	stop := make(chan struct{})
	var gen sync.WaitGroup
	gen.Go(func() {
		tick := time.NewTicker(synEvery)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			cwg.Go(func() {
				c := synConnect(b.Clients[0].NS, web)
				cmu.Lock()
				conns = append(conns, c)
				cmu.Unlock()
			})
		}
	})
	stopConns := sync.OnceFunc(func() { close(stop); gen.Wait(); cwg.Wait() })
	t.Cleanup(stopConns)
	time.Sleep(300 * time.Millisecond)

	// The burst: each reload is sent once the one before was applied, so
	// that every one of them rebuilds the table. Its end is a count: the
	// first synMinReloads whatever they take (a slow machine tests the
	// same), more up to synReloads while synBurstFor lasts.
	start := time.Now()
	var signalled []time.Time
	applied := 0 // and xlb, just started, had applied none
	for applied < synMinReloads || (applied < synReloads && time.Since(start) < synBurstFor) {
		must(t, os.WriteFile(cfg, files[(applied+1)%2], 0o644))
		signalled = append(signalled, time.Now())
		must(t, p.cmd.Process.Signal(syscall.SIGHUP))
		sent := time.Now()
		for reloadsApplied(b) < applied+1 {
			if m := reloadFailures(b); m > 0 {
				t.Fatalf("reload %d failed (xlb_reload_failure_total %d)", applied+1, m)
			}
			if time.Since(sent) > synHung {
				t.Fatalf("reload %d not applied %v after its SIGHUP: xlb hung", applied+1, synHung)
			}
			time.Sleep(10 * time.Millisecond)
		}
		applied++
	}
	burst := time.Since(start)
	// Connections opened at the end of the burst may still retransmit.
	time.Sleep(500 * time.Millisecond)
	stopConns()
	stopBusy()
	after := lossCounters(t, b)

	if m := metrics(t, b); m["xlb_reload_failure_total"] != 0 {
		t.Errorf("%v reloads failed", m["xlb_reload_failure_total"])
	}

	// What the connections saw.
	cmu.Lock()
	defer cmu.Unlock()
	sort.Slice(conns, func(i, j int) bool { return conns[i].at.Before(conns[j].at) })
	var (
		failed, retransmitted []string
		resent                uint32
		per                   = map[string]int{}
	)
	for _, c := range conns {
		if c.err != nil {
			failed = append(failed, fmt.Sprintf("opened %v after the first reload: %v", c.at.Sub(start).Round(time.Millisecond), c.err))
			continue
		}
		per[c.backend]++
		if c.retrans > 0 {
			resent += c.retrans
			retransmitted = append(retransmitted, fmt.Sprintf("port %d opened %v after the first reload (%s) sent its SYN %d more time(s), established after %v, answered by %s",
				c.port, c.at.Sub(start).Round(time.Millisecond), nearestReload(c.at, signalled), c.retrans, c.took.Round(time.Millisecond), c.backend))
		}
	}
	if len(failed) > 0 {
		t.Errorf("%d of %d new connections failed:\n%s", len(failed), len(conns), strings.Join(failed, "\n"))
	}

	// Every SYN sent again must have a counter that explains it. The
	// client's own count includes the SYNs of connections that failed.
	d := after.sub(before)
	clientSYNs := d["client TcpExt.TCPSynRetrans"]
	if clientSYNs < int64(resent) {
		t.Errorf("the client namespace counted %d SYN retransmits, its sockets %d", clientSYNs, resent)
	}
	lost := max(clientSYNs, int64(resent))
	explained, why := d.explains()
	t.Logf("%d reloads applied in %v under %d busy processes; %d new connections, by backend %v; %d SYN(s) sent again by %d connection(s):\n%s",
		applied, burst.Round(time.Millisecond), busyProcs(), len(conns), per, lost, len(retransmitted), strings.Join(retransmitted, "\n"))
	t.Logf("counters that moved (after - before):\n%s", d)
	t.Logf("SYNs sent again %d; accounted for %d: %s", lost, explained, why)
	if explained < lost {
		t.Errorf("%d SYN(s) sent again, only %d accounted for by a loss counter (%s): a SYN lost where nothing counts it", lost, explained, why)
	}
}

// reloadsApplied is xlb_reload_success_total, or -1 when /metrics does
// not answer within 5 s (a starved xlb is slow to, and the burst goes on).
func reloadsApplied(b *testbed.Bed) int { return reloadCounter(b, "xlb_reload_success_total") }

// reloadFailures is xlb_reload_failure_total, or -1 as reloadsApplied.
func reloadFailures(b *testbed.Bed) int { return reloadCounter(b, "xlb_reload_failure_total") }

// reloadCounter is the value of the metric name, or -1 when /metrics does
// not answer within 5 s or lacks it.
func reloadCounter(b *testbed.Bed, name string) int {
	r, err := testbed.HTTPGet(b.LB.NS, adminAddr, "/metrics", 5*time.Second)
	if err != nil {
		return -1
	}
	for line := range strings.Lines(r.Body) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+" "); ok {
			n, err := strconv.ParseFloat(v, 64)
			if err == nil {
				return int(n)
			}
		}
	}
	return -1
}

// synConnect opens a connection from ns to dst, reads from TCP_INFO how
// many times its SYN was sent again, then asks for / on it. 7 s lets the
// kernel send the SYN three times (after 1 s and 3 s).
func synConnect(ns string, dst netip.AddrPort) synConn {
	c := synConn{at: time.Now()}
	hc, err := testbed.DialHTTP(ns, dst, 7*time.Second)
	c.took = time.Since(c.at)
	if err != nil {
		c.err = fmt.Errorf("connect: %w", err)
		return c
	}
	defer hc.Close()
	c.port = uint16(hc.LocalAddr().(*net.TCPAddr).Port)
	raw, err := hc.Conn.(*net.TCPConn).SyscallConn()
	if err == nil {
		cerr := raw.Control(func(fd uintptr) {
			var info *unix.TCPInfo
			if info, err = unix.GetsockoptTCPInfo(int(fd), unix.SOL_TCP, unix.TCP_INFO); err == nil {
				// Nothing but the SYN has been sent yet.
				c.retrans = info.Total_retrans
			}
		})
		if err == nil {
			err = cerr
		}
	}
	if err != nil {
		c.err = fmt.Errorf("TCP_INFO: %w", err)
		return c
	}
	r, err := hc.Get("/", 5*time.Second)
	if err == nil && r.Status != 200 {
		err = fmt.Errorf("status %d", r.Status)
	}
	c.backend, c.err = r.Backend, err
	return c
}

// nearestReload says how far t is from the nearest SIGHUP of sent.
func nearestReload(t time.Time, sent []time.Time) string {
	best, k := time.Duration(1<<62), -1
	for i, s := range sent {
		if d := t.Sub(s); d.Abs() < best.Abs() {
			best, k = d, i
		}
	}
	if k < 0 {
		return "no reload sent"
	}
	return fmt.Sprintf("%v from reload %d's SIGHUP", best.Round(time.Millisecond), k+1)
}

// busyProcs is how many busy processes busyCPUs starts: two per CPU.
func busyProcs() int { return 2 * runtime.NumCPU() }

// busyCPUs starts busy-looping shells, two per CPU, at the test's own
// priority, and returns what stops them (also run at cleanup; each is
// killed by its pid and waited for).
func busyCPUs(t *testing.T) func() {
	t.Helper()
	var procs []*exec.Cmd
	stop := sync.OnceFunc(func() {
		for _, p := range procs {
			_ = p.Process.Kill()
			_ = p.Wait()
		}
	})
	t.Cleanup(stop)
	for range busyProcs() {
		p := exec.Command("sh", "-c", "while :; do :; done")
		if err := p.Start(); err != nil {
			stop()
			t.Fatalf("starting a busy process: %v", err)
		}
		procs = append(procs, p)
	}
	return stop
}

// counts are named counters, or their deltas.
type counts map[string]int64

func (c counts) sub(o counts) counts {
	d := counts{}
	for k, v := range c {
		if v-o[k] != 0 {
			d[k] = v - o[k]
		}
	}
	return d
}

func (c counts) String() string {
	var lines []string
	for k, v := range c {
		lines = append(lines, fmt.Sprintf("  %s %d", k, v))
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

// Prefixes of the counters of lossCounters that count a packet lost, or
// a SYN answered twice, on the way from the client to a backend and back.
var synLossPrefixes = []string{
	"xlb_queue_drop_packets_total",                    // xlb dropped it, by reason
	"xlb_afxdp_drop_packets_total",                    // its AF_XDP socket lost it
	"xlb_queue_pass_packets_total",                    // a worker left it to the kernel, which cannot have it from AF_XDP
	"lb Ip.",                                          // the balancer's kernel dropped VIP traffic the XDP program passed (blackhole route: InAddrErrors)
	`xlb_xdp_frames_total{verdict="passed_no_socket"`, // VIP traffic the kernel drops
	`xlb_xdp_frames_total{verdict="passed_malformed_vip"`,
	`xlb_xdp_frames_total{verdict="passed_vlan_offload"`, // a tag the program could not put back: the kernel's
	"link ",           // an interface of the bed dropped it
	"softnet dropped", // the host's input backlog was full
	"backend TcpExt.ListenOverflows",
	"backend TcpExt.ListenDrops",
	"backend TcpExt.TCPSynRetrans", // a backend answered a SYN again (it saw it twice, or its answer went unacknowledged)
	"backend TcpExt.TCPSYNChallenge",
}

// explains sums the deltas that account for a lost SYN and names them.
func (c counts) explains() (int64, string) {
	var sum int64
	var why []string
	for k, v := range c {
		for _, p := range synLossPrefixes {
			if strings.HasPrefix(k, p) && v > 0 {
				sum += v
				why = append(why, fmt.Sprintf("%s %d", k, v))
				break
			}
		}
	}
	sort.Strings(why)
	if len(why) == 0 {
		return 0, "no loss counter moved"
	}
	return sum, strings.Join(why, ", ")
}

// lossCounters reads every counter that says where a packet between the
// client and the backends was lost: xlb's drop, ring and XDP counters,
// the drops of every interface of the bed, the host's backlog drops, and
// the TCP counters of the client and the backends (summed over the
// backends).
func lossCounters(t *testing.T, b *testbed.Bed) counts {
	t.Helper()
	c := counts{}
	for k, v := range metrics(t, b) {
		if strings.HasPrefix(k, "xlb_queue_drop_packets_total") || strings.HasPrefix(k, "xlb_afxdp_drop_packets_total") ||
			strings.HasPrefix(k, "xlb_afxdp_fill_ring_empty_total") || strings.HasPrefix(k, "xlb_xdp_frames_total") ||
			strings.HasPrefix(k, "xlb_queue_pass_packets_total") {
			c[k] = int64(v)
		}
	}
	namespaces := []string{b.LB.NS, b.Opts.Prefix + "-sw", b.Clients[0].NS}
	for _, be := range b.Backends {
		namespaces = append(namespaces, be.NS)
	}
	for _, ns := range namespaces {
		err := nsx.Do(ns, func() error {
			links, err := netlink.LinkList()
			if err != nil {
				return err
			}
			for _, l := range links {
				a := l.Attrs()
				if s := a.Statistics; s != nil {
					c["link "+ns+"/"+a.Name+" rx_dropped"] = int64(s.RxDropped)
					c["link "+ns+"/"+a.Name+" tx_dropped"] = int64(s.TxDropped)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatalf("reading the interfaces of %s: %v", ns, err)
		}
	}
	if raw, err := os.ReadFile("/proc/net/softnet_stat"); err == nil {
		for line := range strings.Lines(string(raw)) {
			if f := strings.Fields(line); len(f) >= 2 {
				d, _ := strconv.ParseUint(f[1], 16, 64)
				c["softnet dropped"] += int64(d)
			}
		}
	}
	tcp := func(who, ns string) {
		o, err := testbed.Exec(ns, "cat", "/proc/net/snmp", "/proc/net/netstat")
		if err != nil {
			t.Fatalf("TCP counters of %s: %v", ns, err)
		}
		n := netCounters(o)
		for _, k := range []string{"TcpExt.TCPSynRetrans", "TcpExt.ListenOverflows", "TcpExt.ListenDrops",
			"TcpExt.TCPSYNChallenge", "TcpExt.TCPTimeouts", "Tcp.RetransSegs"} {
			c[who+" "+k] += n[k]
		}
	}
	if o, err := testbed.Exec(b.LB.NS, "cat", "/proc/net/snmp"); err == nil {
		n := netCounters(o)
		for _, k := range []string{"Ip.InAddrErrors", "Ip.InNoRoutes", "Ip.InDiscards", "Ip.InHdrErrors"} {
			c["lb "+k] = n[k]
		}
	} else {
		t.Fatalf("IP counters of %s: %v", b.LB.NS, err)
	}
	tcp("client", b.Clients[0].NS)
	for _, be := range b.Backends {
		tcp("backend", be.NS)
	}
	return c
}

// TestCounts_Explains: of the counters that moved, only those that count a
// lost packet (or a SYN a backend answered again) explain a SYN sent
// again; traffic counters and the client's own retransmits explain none.
func TestCounts_Explains(t *testing.T) {
	none := counts{
		`xlb_xdp_frames_total{verdict="redirected"}`:     1800,
		`xlb_xdp_frames_total{verdict="passed_not_vip"}`: 12,
		`xlb_afxdp_fill_ring_empty_total{queue="0"}`:     3,
		"client TcpExt.TCPSynRetrans":                    2,
		"backend Tcp.RetransSegs":                        1,
	}
	if n, why := none.explains(); n != 0 {
		t.Errorf("traffic counters explain %d SYNs (%s), want 0", n, why)
	}
	some := counts{
		`xlb_queue_drop_packets_total{queue="1",reason="backend-not-ready"}`:   1,
		`xlb_afxdp_drop_packets_total{queue="0",reason="rx_ring_full"}`:        2,
		`xlb_xdp_frames_total{verdict="passed_no_socket"}`:                     1,
		"link e2esyn-sw/e2esyn-lbsw tx_dropped":                                1,
		"lb Ip.InAddrErrors":                                                   1,
		"backend TcpExt.TCPSynRetrans":                                         1,
		"client TcpExt.TCPSynRetrans":                                          7,
		`xlb_xdp_frames_total{verdict="redirected"}`:                           100,
		`xlb_queue_drop_packets_total{queue="0",reason="no-eligible-backend"}`: -1, // never negative; ignored
	}
	if n, why := some.explains(); n != 7 {
		t.Errorf("explains %d (%s), want 7", n, why)
	}
}

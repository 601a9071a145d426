package e2e

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"xlb/scripts/testbed"
)

// TestFlood_EstablishedSurviveSYNFlood: 300 kept-alive connections through
// xlb ask on, a round at a time, while the client's namespace sends a SYN
// flood from spoofed sources (198.18.0.0/15, new 5-tuples) as fast as its
// writers go (one per CPU, at most two, unpaced: see tcpFlooder) at a
// table of 16 K entries; after the first round under the flood b1's health
// check fails.
// Every request on every established connection is answered by its own
// backend, b1's included (P1 keeps them there, which needs their
// entries): 0 connections broken, 0 established entries evicted, and b2
// and b3 stay healthy throughout. The flood's rate at each hop, xlb's
// drops and evictions, the request latency and b1's time to unhealthy are
// logged.
//
// xlb is the plain build here, not the race detector's, so that the rate
// its workers keep up with is xlb's own.
func TestFlood_EstablishedSurviveSYNFlood(t *testing.T) {
	floodEstablished(t, floodCase{prefix: "e2efld", flags: "S", capacity: 16384})
}

// TestFlood_EstablishedSurviveACKFlood: the same with a flood of TCP ACKs
// (mid-flow packets of flows xlb never saw) at a table of 64 K entries.
// Each such packet misses and is recorded, but on probation (CT4, X3):
// evicted first, never evicting an established entry, gone after the SYN
// timeout unless a second packet of its flow confirms it. Before
// probation, the flood's entries were established and evicted the
// connections' own (94 of 300 reset when b1 failed).
func TestFlood_EstablishedSurviveACKFlood(t *testing.T) {
	floodEstablished(t, floodCase{prefix: "e2eack", flags: "A", capacity: 65536})
}

// TestFlood_EstablishedSurviveACKFloodDefaultTable: the ACK flood at the
// default table (4 Mi entries), run until xlb's workers have decided as
// many flood frames as the table holds: established entries (60 s) would
// have filled it and evicted live ones, the connections' among them,
// where probation entries (5 s) expire long before the flood fills it.
func TestFlood_EstablishedSurviveACKFloodDefaultTable(t *testing.T) {
	floodEstablished(t, floodCase{prefix: "e2eackd", flags: "A", decided: 4194304})
}

// floodCase is one flood of floodEstablished: its bed's prefix, the TCP
// flags of its frames, the table's capacity (0: the default), and how many
// frames xlb's workers must have decided before the flood stops (0: it runs
// 10 s).
type floodCase struct {
	prefix   string
	flags    string
	capacity int
	decided  float64
}

func floodEstablished(t *testing.T, fc floodCase) {
	const (
		conns  = 300
		askers = 30 // requests of a round in flight at once
	)
	capacity := fc.capacity
	b := upBed(t, testbed.Options{Prefix: fc.prefix, Failover: -1})
	web := netip.AddrPortFrom(testbed.VIP4, testbed.HTTPPort)
	cfg := faultConfig(t, b, 1, 2, faultSvc{name: "web", port: web.Port(), primaries: []string{"b1", "b2", "b3"}})
	text, err := os.ReadFile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	line := ""
	if capacity > 0 {
		line = fmt.Sprintf("conntrack_capacity = %d", capacity)
	} else {
		capacity = 4194304 // the default
	}
	sized := strings.Replace(string(text), "conntrack_capacity = 65536", line, 1)
	if sized == string(text) && capacity != 65536 {
		t.Fatal("fault configuration has no conntrack_capacity line to change")
	}
	if err := os.WriteFile(cfg, []byte(sized), 0o644); err != nil {
		t.Fatal(err)
	}
	startXLBWith(t, b, cfg, plainXLB(t))
	waitStatus(t, b, "b1-b3 healthy", allHealthy)

	ests := make([]*floodConn, 0, conns)
	onB1 := 0
	for range conns {
		c, err := dialRetry(b, web)
		if err != nil {
			t.Fatalf("connection %d: %v", len(ests), err)
		}
		t.Cleanup(func() { c.Close() })
		be, err := askOn(c)
		if err != nil {
			t.Fatalf("connection %d: first request: %v", len(ests), err)
		}
		if be == "b1" {
			onB1++
		}
		// askOn read its whole answer: nothing is left in c's reader.
		ests = append(ests, &floodConn{c: c, r: bufio.NewReader(c.Conn), backend: be})
	}
	if onB1 == 0 {
		t.Fatal("no connection on b1: its failure would test nothing")
	}

	// Requests on every connection: a round before the flood, one while it
	// runs before b1 fails, then b1 fails its health check and, once xlb
	// has it unhealthy, two or more rounds; a last one after the flood. A
	// round asks on askers connections at a time, so that it lasts well
	// under the idle timeouts (xlb's 60 s, the backends' keep-alive 60 s)
	// even when requests wait for retransmissions.
	var (
		mu       sync.Mutex
		broken   = map[int]string{}
		asked    int
		late     int
		roundNum int
		phase    int // of the rounds: latencies are summed per phase
		lat      [4]latency
	)
	const (
		beforeFlood = iota
		underFlood  // b1 healthy
		b1Unhealthy // under the flood
		afterFlood
	)
	fail := func(i int, e *floodConn, got string, err error) {
		mu.Lock()
		defer mu.Unlock()
		broken[i] = e.backend
		t.Errorf("round %d: connection %d to %s: answered by %q, %v", roundNum, i, e.backend, got, err)
	}
	round := func() {
		jobs := make(chan int)
		var wg sync.WaitGroup
		for range askers {
			wg.Go(func() {
				for i := range jobs {
					e := ests[i]
					t0 := time.Now()
					// A generous read timeout: under the flood xlb's
					// rings overflow and a request waits for TCP's
					// retransmissions (200 ms, then doubling). One still
					// unanswered then is awaited after the flood; a
					// broken connection (its entry lost, so another
					// backend resets it) fails at once all the same.
					got, err := e.ask(true, 15*time.Second)
					d := time.Since(t0)
					switch {
					case e.unanswered(err):
						e.pending = true
					case err != nil || got != e.backend:
						fail(i, e, got, err)
					default:
						mu.Lock()
						lat[phase].add(d)
						mu.Unlock()
					}
				}
			})
		}
		for i, e := range ests {
			mu.Lock()
			_, gone := broken[i]
			mu.Unlock()
			if gone || e.pending {
				continue
			}
			asked++
			jobs <- i
		}
		close(jobs)
		wg.Wait()
		roundNum++
	}
	phase = beforeFlood
	round()

	// The flood, as fast as the kernel takes the frames: a writer per CPU,
	// at most two (the bed's two queues; on this 2-core VM two writers
	// offer the most, more would only take CPU from xlb's workers).
	senders := min(runtime.NumCPU(), 2)
	var floods []*tcpFlooder
	for k := range senders {
		f, err := newTCPFlooder(b.Clients[0], testbed.LBMAC, web, fc.flags)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(f.close)
		f.n = uint32(k) * (1 << 27 / uint32(senders)) // disjoint 5-tuples
		floods = append(floods, f)
	}
	before := floodCounters(t, b)
	var sent atomic.Uint64
	var stopped atomic.Bool
	var wg sync.WaitGroup
	start := time.Now()
	for _, f := range floods {
		wg.Go(func() {
			for !stopped.Load() {
				n, err := f.sendBatch()
				if err != nil {
					t.Errorf("flood: %v", err)
					return
				}
				sent.Add(uint64(n))
			}
		})
	}
	// b2 and b3 must stay healthy under the flood: their probes' answers
	// come in through xlb's interface like the flood.
	flapped := map[string]int{}
	wg.Go(func() {
		for !stopped.Load() {
			if s, err := statusOf(b); err == nil {
				for _, n := range []string{"b2", "b3"} {
					if healthyIn(s, n, false) {
						mu.Lock()
						flapped[n]++
						mu.Unlock()
					}
				}
			}
			time.Sleep(100 * time.Millisecond)
		}
	})

	time.Sleep(2 * time.Second) // the table is full of the flood's entries
	phase = underFlood
	round()
	sick := time.Now()
	must(t, b.SetHealthy("b1", false))
	took := untilStatus(t, b, "b1 unhealthy", sick, 20*time.Second, func(s status) bool { return healthyIn(s, "b1", false) })
	t.Logf("b1 unhealthy in /status %v after its /healthz failed, under the flood", took.Round(10*time.Millisecond))
	// Two rounds with b1 unhealthy, and more while the flood has run less
	// than twice the half-open timeout (5 s): its entries are then both
	// evicted and expired under the established ones.
	phase = b1Unhealthy
	round()
	for round(); time.Since(start) < 10*time.Second; {
		round()
	}
	// A flood that must fill a large table runs on, in rounds, until the
	// workers have decided enough of it (bounded against a hang only).
	for fc.decided > 0 && (counterSet{metrics(t, b)}).sum("xlb_queue_rx_packets_total")-before.sum("xlb_queue_rx_packets_total") < fc.decided {
		if time.Since(start) > 10*time.Minute {
			t.Fatalf("the flood has not reached %.0f decided frames in 10 minutes", fc.decided)
		}
		round()
	}
	stopped.Store(true)
	wg.Wait()
	took = time.Since(start)
	after := floodCounters(t, b)
	// A request unanswered under the flood: its connection holds it and
	// retransmits; once the flood is over it gets through, to its own
	// backend, or the connection is broken.
	pending := 0
	for i, e := range ests {
		if !e.pending {
			continue
		}
		pending++
		got, err := e.ask(false, 30*time.Second)
		if err != nil || got != e.backend {
			fail(i, e, got, err)
			continue
		}
		e.pending = false
		late++
	}
	phase = afterFlood
	round()
	s := getStatus(t, b)

	d := func(series string) float64 { return after.sum(series) - before.sum(series) }
	rate := func(n float64) string { return fmt.Sprintf("%.0f kpps", n/took.Seconds()/1000) }
	t.Logf("%s flood for %v from %d AF_PACKET writers (sendmmsg, qdisc bypassed): %d sent (%s)",
		map[string]string{"S": "SYN", "A": "ACK"}[fc.flags], took.Round(time.Millisecond), senders, sent.Load(), rate(float64(sent.Load())))
	t.Logf("hops: client veth sent %s; switch veth to xlb sent %s, dropped %.0f; xlb's veth received %s, dropped %.0f; "+
		"XDP saw %s, redirected %s; xlb's workers decided %s (%.1f %% of sent)",
		rate(d("c1:tx_packets")), rate(d("lbsw:tx_packets")), d("lbsw:tx_dropped"),
		rate(d("lbeth:rx_packets")), d("lbeth:rx_dropped"),
		rate(d("xlb_xdp_frames_total")), rate(d(`xlb_xdp_frames_total{verdict="redirected"}`)),
		rate(d("xlb_queue_rx_packets_total")), 100*d("xlb_queue_rx_packets_total")/float64(max(sent.Load(), 1)))
	for _, k := range after.keys("xlb_afxdp_drop_packets_total", "xlb_xdp_frames_total") {
		if v := after.m[k] - before.m[k]; v != 0 {
			t.Logf("  %s +%.0f", k, v)
		}
	}
	t.Logf("%d established connections (%d on b1, unhealthy after the first round under the flood: %v), %d requests in %d rounds: %d broken, %d answered only after the flood",
		conns, onB1, healthyIn(s, "b1", false), asked, roundNum, len(broken), late)
	t.Logf("request latency, mean / slowest / share over 200 ms (waited for a retransmission): before the flood %v; under it, b1 healthy %v; under it, b1 unhealthy %v; after it %v",
		lat[beforeFlood], lat[underFlood], lat[b1Unhealthy], lat[afterFlood])
	t.Logf("table of %d: %.0f inserts; evicted %.0f half-open, %.0f established; %.0f refused; spills %.0f, moves %.0f; entries now %.0f",
		capacity, d("xlb_conntrack_inserts_total"), d(`xlb_conntrack_evicted_entries_total{state="half_open"}`), d(`xlb_conntrack_evicted_entries_total{state="established"}`),
		d("xlb_conntrack_refused_total"), d("xlb_conntrack_spills_total"), d("xlb_conntrack_moves_total"), after.m["xlb_conntrack_entries"])
	t.Logf("health probes under the flood: %.0f passed, %.0f failed (b1's, once it fails)",
		d(`xlb_health_checks_total{check="hc",result="pass"}`), d(`xlb_health_checks_total{check="hc",result="fail"}`))

	if e := d(`xlb_conntrack_evicted_entries_total{state="established"}`); e != 0 {
		t.Errorf("%.0f established entries evicted by the flood, want 0 (half-open ones go first)", e)
	}
	if len(broken) != 0 {
		t.Errorf("%d of %d established connections broken, want 0", len(broken), conns)
	}
	switch {
	case fc.decided > 0:
		// The table is not filled by probation entries, which expire,
		// but the flood must have put about a table's worth into it (the
		// decided frames count the connections' too).
		if ins := d("xlb_conntrack_inserts_total"); ins < float64(capacity)*9/10 {
			t.Errorf("the flood made %.0f entries in a table of %d: the test shows nothing", ins, capacity)
		}
	case d(`xlb_conntrack_evicted_entries_total{state="half_open"}`) == 0:
		t.Error("the flood evicted nothing: it did not fill the table, the test shows nothing")
	}
	if len(flapped) != 0 {
		t.Errorf("healthy backends seen unhealthy under the flood (samples of /status, every 100 ms): %v", flapped)
	}
}

// latency sums the answer times of requests.
type latency struct {
	n, slow    int // answers; those slower than 200 ms
	sum, worst time.Duration
}

func (l *latency) add(d time.Duration) {
	l.n++
	l.sum += d
	l.worst = max(l.worst, d)
	if d > 200*time.Millisecond {
		l.slow++
	}
}

func (l latency) String() string {
	return fmt.Sprintf("%v / %v / %.1f %% of %d", (l.sum / time.Duration(max(l.n, 1))).Round(10*time.Microsecond),
		l.worst.Round(10*time.Microsecond), 100*float64(l.slow)/float64(max(l.n, 1)), l.n)
}

// floodConn is an established connection of the flood test, with its own
// reader so that a request unanswered in time can be awaited later.
type floodConn struct {
	c       *testbed.HTTPConn
	r       *bufio.Reader
	backend string
	pending bool // a request went unanswered in its round
}

// ask sends GET / (unless send is false: the last request is still
// unanswered) and returns the X-Backend of the answer read within timeout.
func (e *floodConn) ask(send bool, timeout time.Duration) (string, error) {
	if send {
		if err := e.c.SetWriteDeadline(time.Now().Add(timeout)); err != nil {
			return "", err
		}
		if _, err := io.WriteString(e.c, "GET / HTTP/1.1\r\nHost: "+testbed.VIP4.String()+"\r\n\r\n"); err != nil {
			return "", err
		}
	}
	if err := e.c.SetReadDeadline(time.Now().Add(timeout)); err != nil {
		return "", err
	}
	resp, err := http.ReadResponse(e.r, nil)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return "", err
	}
	if resp.StatusCode != 200 {
		return "", fmt.Errorf("status %d", resp.StatusCode)
	}
	return resp.Header.Get("X-Backend"), nil
}

// unanswered reports whether err is ask's timeout with nothing of the
// answer read: the request may still be answered.
func (e *floodConn) unanswered(err error) bool {
	return errors.Is(err, os.ErrDeadlineExceeded) && e.r.Buffered() == 0
}

// statusOf is /status, for a goroutine other than the test's.
func statusOf(b *testbed.Bed) (status, error) {
	var s status
	r, err := testbed.HTTPGet(b.LB.NS, adminAddr, "/status", 2*time.Second)
	if err != nil {
		return s, err
	}
	return s, json.Unmarshal([]byte(r.Body), &s)
}

// counterSet is xlb's metrics and the flood path's interface counters
// (as "c1:tx_packets", "lbsw:tx_dropped", "lbeth:rx_dropped").
type counterSet struct{ m map[string]float64 }

func floodCounters(t *testing.T, b *testbed.Bed) counterSet {
	t.Helper()
	cs := counterSet{metrics(t, b)}
	sw := strings.TrimSuffix(b.LB.NS, "-lb") + "-sw"
	for _, l := range []struct{ name, ns, dev string }{
		{"c1", b.Clients[0].NS, b.Clients[0].Iface},
		{"lbsw", sw, strings.TrimSuffix(b.LB.Iface, "eth") + "sw"},
		{"lbeth", b.LB.NS, b.LB.Iface},
	} {
		st, err := linkStats(l.ns, l.dev)
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range st {
			cs.m[l.name+":"+k] = v
		}
	}
	return cs
}

// sum adds the series whose name starts with prefix.
func (cs counterSet) sum(prefix string) float64 {
	v := 0.0
	for k, x := range cs.m {
		if strings.HasPrefix(k, prefix) {
			v += x
		}
	}
	return v
}

// keys are the series starting with one of prefixes.
func (cs counterSet) keys(prefixes ...string) []string {
	var ks []string
	for k := range cs.m {
		for _, p := range prefixes {
			if strings.HasPrefix(k, p) {
				ks = append(ks, k)
				break
			}
		}
	}
	slices.Sort(ks)
	return ks
}

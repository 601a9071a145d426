package healthcheck

import (
	"context"
	"errors"
	"net/http"
	"net/netip"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"xlb/config"
)

// scripted answers the i-th request (from 0) with step(i): 'p' 200, 'f'
// 503, 't' nothing until the client gives up; then the weight header, if
// any ("" none).
func scripted(t *testing.T, step func(i int) (byte, string)) netip.AddrPort {
	t.Helper()
	var n atomic.Int32
	_, ap := serve(t, "127.0.0.1:0", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		kind, weight := step(int(n.Add(1) - 1))
		if weight != "" {
			w.Header().Set(WeightHeader, weight)
		}
		switch kind {
		case 'f':
			w.WriteHeader(503)
		case 't':
			select {
			case <-r.Context().Done():
			case <-time.After(time.Second):
			}
		}
	}))
	return ap
}

// TestChecker_Thresholds: through real probes, a target becomes healthy
// after healthy_threshold passes and unhealthy after unhealthy_threshold
// failures in a row; failures and passes alternating faster than the
// thresholds change nothing. Each change is logged once, with its reason.
func TestChecker_Thresholds(t *testing.T) {
	t.Parallel()
	const seq = "pppfpfpfffppp" // then passes
	ap := scripted(t, func(i int) (byte, string) {
		if i < len(seq) {
			return seq[i], ""
		}
		return 'p', ""
	})
	r := start(t, Options{}, httpTarget("a", ap, func(c *config.HealthCheck) { c.HealthyThreshold, c.UnhealthyThreshold = 3, 2 }))
	res := r.results(t, "a", len(seq))
	const want = "uuHHHHHHuuuuH"
	got := ""
	var changes []int
	for i, x := range res {
		if x.Healthy {
			got += "H"
		} else {
			got += "u"
		}
		if x.Changed {
			changes = append(changes, i)
		}
		if x.Pass != (seq[i] == 'p') {
			t.Errorf("result %d: pass %v for script %c (%s)", i, x.Pass, seq[i], x.Reason)
		}
	}
	if got != want || len(changes) != 3 || changes[0] != 2 || changes[1] != 8 || changes[2] != 12 {
		t.Fatalf("script %s: states %s changes at %v, want %s changes at [2 8 12]", seq, got, changes, want)
	}
	ups := r.logs.FilterMessage("backend healthy").All()
	downs := r.logs.FilterMessage("backend unhealthy").All()
	if len(ups) != 2 || len(downs) != 1 {
		t.Fatalf("logged %d healthy and %d unhealthy, want 2 and 1", len(ups), len(downs))
	}
	if reason := downs[0].ContextMap()["reason"]; reason != "HTTP 503 Service Unavailable" {
		t.Errorf("unhealthy logged with reason %q", reason)
	}
}

// TestChecker_NeverAnsweredStartsUnhealthy: a target that never answered
// is unhealthy before its first probe and stays so, without a change; its
// weight is unavailable (0, none ever valid); the first failure is logged
// once.
func TestChecker_NeverAnsweredStartsUnhealthy(t *testing.T) {
	t.Parallel()
	r := start(t, Options{}, httpTarget("a", closedPort(t), func(c *config.HealthCheck) { c.CheckInterval = 30 * time.Millisecond }))
	if s := r.status(t, "a"); s.Healthy || s.Probes != 0 && s.Last.Pass {
		t.Fatalf("status %+v, want unhealthy", s)
	}
	for i, x := range r.results(t, "a", 4) {
		if x.Healthy || x.Changed || x.Pass || x.WeightState != WeightUnavailable || x.Weight != 0 || x.WeightChanged != (i == 0) {
			t.Errorf("result %d: %+v, want unhealthy, unchanged, UNAVAILABLE weight 0", i, x)
		}
	}
	if n := r.logs.FilterMessage("backend unhealthy").FilterField(zapBool("never_answered", true)).Len(); n != 1 {
		t.Errorf("\"never answered\" logged %d times, want once", n)
	}
}

// TestW1a_ThroughProbes: each reply's weight report, in order: VALID,
// MISSING, INVALID for "abc", "1001", "-1", and a timeout that keeps the
// last valid weight (UNAVAILABLE), then VALID again.
func TestW1a_ThroughProbes(t *testing.T) {
	t.Parallel()
	type step struct {
		kind   byte
		header string
		state  WeightState
		weight uint32
	}
	steps := []step{
		{'p', "5", WeightValid, 5},
		{'p', "", WeightMissing, 0},
		{'p', "abc", WeightInvalid, 0},
		{'p', "1001", WeightInvalid, 0},
		{'p', "-1", WeightInvalid, 0},
		{'p', "5", WeightValid, 5},
		{'t', "9", WeightUnavailable, 5},
		{'f', "9", WeightUnavailable, 5},
		{'p', "0", WeightValid, 0},
		{'p', "7", WeightValid, 7},
	}
	ap := scripted(t, func(i int) (byte, string) {
		if i < len(steps) {
			return steps[i].kind, steps[i].header
		}
		return 'p', "7"
	})
	r := start(t, Options{}, httpTarget("a", ap, func(c *config.HealthCheck) { c.Timeout = 100 * time.Millisecond }))
	for i, x := range r.results(t, "a", len(steps)) {
		s := steps[i]
		if x.WeightState != s.state || x.Weight != s.weight || x.Pass != (s.kind == 'p') {
			t.Errorf("step %d (%c %q): %v weight %d pass %v (%s), want %v %d", i, s.kind, s.header, x.WeightState, x.Weight, x.Pass, x.Reason, s.state, s.weight)
		}
		if s.kind == 't' && !strings.Contains(x.Reason, "timed out after 100ms") {
			t.Errorf("step %d: reason %q, want a timeout", i, x.Reason)
		}
	}
}

// TestChecker_TCPReportsNoWeight: a TCP target passes on connect and says
// nothing about weight.
func TestChecker_TCPReportsNoWeight(t *testing.T) {
	t.Parallel()
	tg := tcpTarget(tcpServer(t, ""), "")
	tg.Check.CheckInterval = 50 * time.Millisecond
	r := start(t, Options{}, tg)
	for _, x := range r.results(t, "t", 2) {
		if !x.Healthy || !x.Pass || x.WeightState != WeightNone || x.Weight != 0 {
			t.Errorf("%+v, want healthy, no weight", x)
		}
	}
}

// TestChecker_Stagger: each target's first probe comes at its own point of
// the interval, fixed by a hash of its key, not all at once.
func TestChecker_Stagger(t *testing.T) {
	t.Parallel()
	const interval = 400 * time.Millisecond
	// The rule: deterministic, inside the interval, spread evenly.
	var buckets [10]int
	for i := range 1000 {
		key := "web/10.0." + itoa(i/256) + "." + itoa(i%256)
		d := firstDelay(key, interval)
		if d != firstDelay(key, interval) || d < 0 || d >= interval {
			t.Fatalf("firstDelay(%q) = %v: not a fixed point of [0, %v)", key, d, interval)
		}
		buckets[d*10/interval]++
	}
	for i, n := range buckets {
		if n < 60 || n > 140 {
			t.Errorf("tenth %d of the interval holds %d of 1000 first probes, want about 100: %v", i, n, buckets)
		}
	}

	// The probes: each target's first request (named by its Host header)
	// arrives at its delay.
	var (
		mu    sync.Mutex
		first = map[string]time.Time{}
	)
	_, ap := serve(t, "127.0.0.1:0", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if _, ok := first[r.Host]; !ok {
			first[r.Host] = time.Now()
		}
	}))
	keys := []string{"a", "b", "c", "d", "e", "f"}
	var targets []Target
	lo, hi := interval, time.Duration(0)
	for _, k := range keys {
		targets = append(targets, httpTarget(k, ap, func(c *config.HealthCheck) { c.Host, c.CheckInterval = k, interval }))
		lo, hi = min(lo, firstDelay(k, interval)), max(hi, firstDelay(k, interval))
	}
	if hi-lo < interval/4 {
		t.Fatalf("the keys' delays span %v only: pick keys that show a spread", hi-lo)
	}
	begin := time.Now()
	r := start(t, Options{}, targets...)
	for _, k := range keys {
		r.results(t, k, 1)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, k := range keys {
		at, want := first[k].Sub(begin), firstDelay(k, interval)
		if at < want-5*time.Millisecond || at > want+150*time.Millisecond {
			t.Errorf("target %s: first probe after %v, want at %v", k, at, want)
		}
	}
}

func itoa(i int) string {
	const digits = "0123456789"
	if i < 10 {
		return digits[i : i+1]
	}
	return itoa(i/10) + digits[i%10:i%10+1]
}

// TestChecker_ConcurrencyBound: no more probes of passing targets are in
// flight than MaxConcurrent, and the bound is what limits them (without it,
// more are).
func TestChecker_ConcurrencyBound(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		bound int
		check func(peak int) bool
		want  string
	}{
		{2, func(p int) bool { return p == 2 }, "exactly 2"},
		{6, func(p int) bool { return p > 2 }, "more than 2"},
	} {
		t.Run(itoa(tc.bound), func(t *testing.T) {
			t.Parallel()
			var inflight, peak atomic.Int32
			_, ap := serve(t, "127.0.0.1:0", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				n := inflight.Add(1)
				defer inflight.Add(-1)
				for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
				}
				time.Sleep(30 * time.Millisecond)
			}))
			var targets []Target
			keys := []string{"a", "b", "c", "d", "e", "f"}
			for _, k := range keys {
				// No probe times out: one given up on would free its slot
				// while the server still counts it.
				targets = append(targets, httpTarget(k, ap))
			}
			r := start(t, Options{MaxConcurrent: tc.bound}, targets...)
			// First probes run in the failing lane (no target is known
			// to answer yet); from then on all are in the passing lane,
			// whose bound is MaxConcurrent.
			for _, k := range keys {
				r.results(t, k, 1)
			}
			peak.Store(0)
			for _, k := range keys {
				r.results(t, k, r.count(k)+3)
			}
			if p := int(peak.Load()); !tc.check(p) {
				t.Errorf("MaxConcurrent %d: at most %d probes in flight, want %s", tc.bound, p, tc.want)
			}
		})
	}
}

// TestChecker_SetReconciles: Set keeps the state of an unchanged target
// and of one whose check changed, starts new targets (and one whose
// address changed) unhealthy, and stops removed ones.
func TestChecker_SetReconciles(t *testing.T) {
	t.Parallel()
	var other atomic.Bool
	_, ap := serve(t, "127.0.0.1:0", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(WeightHeader, "3")
		if r.URL.Path == "/other" {
			other.Store(true)
		}
	}))
	two := func(c *config.HealthCheck) { c.HealthyThreshold, c.UnhealthyThreshold = 2, 2 }
	keep, changed, moved, gone := httpTarget("keep", ap, two), httpTarget("changed", ap, two), httpTarget("moved", ap, two), httpTarget("gone", ap, two)
	r := start(t, Options{}, keep, changed, moved, gone)
	for _, k := range []string{"keep", "changed", "moved", "gone"} {
		if x := r.results(t, k, 2)[1]; !x.Healthy || !x.Changed || x.Weight != 3 {
			t.Fatalf("%s: second result %+v, want healthy now, weight 3", k, x)
		}
	}
	before := r.status(t, "keep").Probes

	changed.Check.RequestPath = "/other"
	moved.Addr = netip.MustParseAddr("127.0.0.2") // nothing listens there
	fresh := httpTarget("new", ap, two)
	if err := r.c.Set([]Target{keep, changed, moved, fresh}); err != nil {
		t.Fatal(err)
	}
	goneAt := r.count("gone")
	for _, tc := range []struct {
		key     string
		healthy bool
	}{{"keep", true}, {"changed", true}, {"moved", false}, {"new", false}} {
		if s := r.status(t, tc.key); s.Healthy != tc.healthy {
			t.Errorf("%s right after Set: healthy %v, want %v", tc.key, s.Healthy, tc.healthy)
		}
	}
	if s := r.status(t, "keep"); s.Probes < before {
		t.Errorf("keep: %d probes after Set, %d before: its state was reset", s.Probes, before)
	}
	if s := r.status(t, "changed"); s.Target.Check.RequestPath != "/other" {
		t.Errorf("changed still probes %q", s.Target.Check.RequestPath)
	}
	n := r.count("changed")
	if x := r.results(t, "changed", n+1)[n]; !x.Healthy || x.Changed {
		t.Errorf("changed: first result with the new check %+v, want still healthy, no change", x)
	}
	if x := r.results(t, "new", 2); x[0].Healthy || !x[1].Healthy {
		t.Errorf("new: %+v, want unhealthy, then healthy after two passes", x)
	}
	if !other.Load() {
		t.Error("no probe asked for /other: the changed check did not take over")
	}
	time.Sleep(150 * time.Millisecond)
	if n := r.count("gone"); n > goneAt+1 {
		t.Errorf("gone: %d results after Set removed it (%d before)", n, goneAt)
	}
	for _, s := range r.c.Status() {
		if s.Key == "gone" {
			t.Error("gone is still in Status")
		}
	}
}

// TestChecker_SetRejects: an invalid target makes Set change nothing.
func TestChecker_SetRejects(t *testing.T) {
	t.Parallel()
	ap := closedPort(t)
	ok := httpTarget("ok", ap)
	c := New(nil, Options{})
	if err := c.Set([]Target{ok}); err != nil {
		t.Fatal(err)
	}
	for name, bad := range map[string][]Target{
		"duplicate key":      {ok, ok},
		"no address":         {{Key: "x", Check: ok.Check}},
		"port 0":             {httpTarget("x", ap, func(c *config.HealthCheck) { c.Port = 0 })},
		"interval 0":         {httpTarget("x", ap, func(c *config.HealthCheck) { c.CheckInterval = 0 })},
		"timeout 0":          {httpTarget("x", ap, func(c *config.HealthCheck) { c.Timeout = 0 })},
		"relative path":      {httpTarget("x", ap, func(c *config.HealthCheck) { c.RequestPath = "healthz" })},
		"unknown check type": {httpTarget("x", ap, func(c *config.HealthCheck) { c.Type = 9 })},
	} {
		if err := c.Set(bad); err == nil {
			t.Errorf("%s: Set accepted it", name)
		}
		if st := c.Status(); len(st) != 1 || st[0].Key != "ok" {
			t.Errorf("%s: a rejected Set changed the targets: %+v", name, st)
		}
	}
}

// TestChecker_Batches: results that end close together reach Notify as one
// batch, each target's in order.
func TestChecker_Batches(t *testing.T) {
	t.Parallel()
	_, ap := serve(t, "127.0.0.1:0", http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	keys := []string{"a", "b", "c", "d"}
	var targets []Target
	for _, k := range keys {
		targets = append(targets, httpTarget(k, ap))
	}
	begin := time.Now()
	r := start(t, Options{BatchDelay: 150 * time.Millisecond}, targets...)
	for _, k := range keys {
		r.results(t, k, 6)
	}
	elapsed := time.Since(begin)
	r.mu.Lock()
	defer r.mu.Unlock()
	if max := int(elapsed/(150*time.Millisecond)) + 1; len(r.batches) > max {
		t.Errorf("%d batches in %v, want at most %d", len(r.batches), elapsed, max)
	}
	if len(r.batches[0]) < 4 {
		t.Errorf("first batch of %d results, want the first probes of all 4 targets at least", len(r.batches[0]))
	}
	for k, rs := range r.byKey {
		for i := 1; i < len(rs); i++ {
			if rs[i].Time.Before(rs[i-1].Time) {
				t.Errorf("%s: results out of order", k)
			}
		}
	}
}

// TestChecker_StopsOnCancel: cancelling Run's context stops every loop,
// probes in flight included, and leaves no goroutine of ours. The probes
// wait on a server that never answers, with a timeout (an hour) longer
// than any test: only the cancel can end them, so a checker that left a
// probe running would hang here until go test's timeout.
func TestChecker_StopsOnCancel(t *testing.T) {
	entered, left := make(chan struct{}, 16), make(chan struct{}, 16)
	_, ap := serve(t, "127.0.0.1:0", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		entered <- struct{}{}
		<-r.Context().Done() // never answers: ends when the probe is aborted
		left <- struct{}{}
	}))
	never := func(c *config.HealthCheck) { c.CheckInterval, c.Timeout = 20*time.Millisecond, time.Hour }
	var targets []Target
	for _, k := range []string{"a", "b", "c"} {
		targets = append(targets, httpTarget(k, ap, never))
	}
	targets = append(targets, tcpTarget(closedPort(t), ""))
	// Two workers for the targets not known to answer (all of them): two
	// probes hang in flight, the others wait in the queue.
	r := start(t, Options{MaxConcurrent: 2, MaxConcurrentFailing: 2}, targets...)
	<-entered
	<-entered
	r.cancel()
	if err := <-r.done; err != nil { // no deadline: a hang is the failure
		t.Errorf("Run: %v", err)
	}
	close(r.done) // for r.stop at cleanup
	// The two requests in flight were aborted, not abandoned.
	<-left
	<-left
	if err := r.c.Run(context.Background()); !errors.Is(err, ErrRunning) {
		t.Errorf("a second Run: %v, want ErrRunning", err)
	}
	buf := make([]byte, 1<<20)
	stacks := string(buf[:runtime.Stack(buf, true)])
	for _, fn := range []string{"healthcheck.(*Checker)", "healthcheck.(*httpProber)", "healthcheck.(*tcpProber)"} {
		if strings.Contains(stacks, fn) {
			t.Errorf("a goroutine in %s is still running after Run returned:\n%s", fn, stacks)
		}
	}
}

// TestChecker_DeadEndpointsDoNotStarveLive: 200 targets whose probes, once
// they failed, never end (endpoints that stopped answering, with a timeout
// longer than the test) hold every worker of the failing lane; the live
// targets go on being probed in the passing lane. With one pool of workers
// the live probes would wait forever behind them.
func TestChecker_DeadEndpointsDoNotStarveLive(t *testing.T) {
	t.Parallel()
	const dead = 200
	// Dead targets fail at once until gate closes (every target probed
	// once: the dead known to fail, the live known to answer), then hang.
	var (
		hung atomic.Int32
		gate = make(chan struct{})
	)
	probe := func(ctx context.Context, tg Target) bool {
		if !strings.HasPrefix(tg.Key, "dead") {
			return true
		}
		select {
		case <-gate:
		default:
			return false // refused: known to fail
		}
		hung.Add(1)
		<-ctx.Done() // never answers
		return false
	}
	ap := netip.MustParseAddrPort("127.0.0.1:9") // never dialled: Probe stands in
	never := func(c *config.HealthCheck) { c.CheckInterval, c.Timeout = 10*time.Millisecond, time.Hour }
	var targets []Target
	for i := range dead {
		targets = append(targets, httpTarget("dead"+itoa(i), ap, never))
	}
	live := []string{"live0", "live1", "live2"}
	for _, k := range live {
		targets = append(targets, httpTarget(k, ap, never))
	}
	r := start(t, Options{Probe: probe, MaxConcurrent: 8, MaxConcurrentFailing: 16}, targets...)
	for i := range dead {
		r.results(t, "dead"+itoa(i), 1)
	}
	for _, k := range live {
		r.results(t, k, 1)
	}
	close(gate)
	// From here on the failing lane's 16 workers get stuck for good; each
	// live target must still get 20 more probes.
	for _, k := range live {
		n := r.count(k)
		r.results(t, k, n+20)
	}
	// The dead probes due meanwhile (each every 10 ms) hold the whole
	// failing lane, and no more than it.
	if h := hung.Load(); h != 16 {
		t.Errorf("%d dead probes hanging, want the failing lane's 16 workers", h)
	}
}

// TestChecker_DeadEndpointsKeepLiveSchedule: 200 HTTP endpoints that accept
// and never answer, each probe ending by its timeout, and a few that answer
// at once, on a real loopback network. The dead ones need far more probes
// in flight than the failing lane has, so their own probes run late; the
// live ones, in the passing lane, keep their short interval: while every
// dead target is probed twice, each live one is probed many times (with one
// pool of workers, a live probe would queue behind ~200 timeouts and get a
// handful).
func TestChecker_DeadEndpointsKeepLiveSchedule(t *testing.T) {
	t.Parallel()
	_, deadAP := serve(t, "127.0.0.1:0", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done()
	}))
	_, liveAP := serve(t, "127.0.0.1:0", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	const dead = 200
	slow := func(c *config.HealthCheck) { c.CheckInterval, c.Timeout = 200*time.Millisecond, 200*time.Millisecond }
	quick := func(c *config.HealthCheck) { c.CheckInterval = 20 * time.Millisecond }
	var targets []Target
	for i := range dead {
		targets = append(targets, httpTarget("dead"+itoa(i), deadAP, slow))
	}
	live := []string{"live0", "live1", "live2"}
	for _, k := range live {
		targets = append(targets, httpTarget(k, liveAP, quick))
	}
	r := start(t, Options{MaxConcurrent: 16, MaxConcurrentFailing: 16}, targets...)
	// Every target's first probe runs in the failing lane (none is known
	// to answer yet); a round of the dead ones there takes ~2.5 s (200
	// probes of 200 ms over 16 workers). Once each dead target failed
	// once and each live one answered, count the live probes during the
	// dead targets' second round.
	for i := range dead {
		r.results(t, "dead"+itoa(i), 1)
	}
	base := map[string]int{}
	for _, k := range live {
		r.results(t, k, 1)
		base[k] = r.count(k)
	}
	for i := range dead {
		if x := r.results(t, "dead"+itoa(i), 2)[1]; x.Pass {
			t.Fatalf("dead%d passed: %+v", i, x)
		}
	}
	for _, k := range live {
		if n := r.count(k) - base[k]; n < 20 {
			t.Errorf("%s: %d probes while 200 dead endpoints were each probed once more, want >= 20 (live probes waited behind dead ones)", k, n)
		}
	}
}

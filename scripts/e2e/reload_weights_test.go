package e2e

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"xlb/scripts/testbed"
)

// TestX2_ReloadReweights: backends b1-b3 report weights 1, 1 and 4 (W1)
// to a MAGLEV service, which ignores them: new connections split in
// thirds (S2). Kept-alive connections to each backend ask every 100 ms
// and a steady stream of new connections runs while SIGHUP reloads the
// same file with locality_lb_policy = "WEIGHTED_MAGLEV" (X2): /status
// shows weights 1, 1, 4 applied and new connections split 1/6, 1/6, 4/6
// (S2); then back to MAGLEV: thirds again. Every kept-alive connection
// keeps its backend through both re-weightings (tracked flows stay, CT4;
// X2: a reload is hitless for flows whose backend stays), none fails, no
// new connection fails, and xlb counts two successful reloads.
func TestX2_ReloadReweights(t *testing.T) {
	t.Parallel()
	b := upBed(t, testbed.Options{Prefix: "e2erw", Failover: -1, Weights: []int{1, 1, 4}})
	web := netip.AddrPortFrom(testbed.VIP4, testbed.HTTPPort)
	config := func(policy string) string {
		return faultConfig(t, b, 1, 2, faultSvc{name: "web", port: web.Port(),
			primaries: []string{"b1", "b2", "b3"}, keys: fmt.Sprintf("locality_lb_policy = %q", policy)})
	}
	cfg := config("MAGLEV")
	p := startXLB(t, b, cfg)
	reported := map[string]uint32{"b1": 1, "b2": 1, "b3": 4}
	equal := map[string]uint32{"b1": 1, "b2": 1, "b3": 1}
	waitWeights(t, b, "MAGLEV: equal weights, 1, 1, 4 reported", false, equal, reported)
	thirds := map[string]float64{"b1": 1.0 / 3, "b2": 1.0 / 3, "b3": 1.0 / 3}
	checkSpread(t, "MAGLEV before the reloads", newConns(t, b, web, shareFlows), thirds)

	stop := make(chan struct{})
	var wg sync.WaitGroup
	stopTraffic := sync.OnceFunc(func() { close(stop); wg.Wait() })
	t.Cleanup(stopTraffic)

	// keep opens kept-alive connections until each backend has need of
	// them, marking them as opened in phase.
	type phased struct {
		*keptConn
		phase string
	}
	var kept []phased
	keep := func(phase string, need int) map[string]int {
		t.Helper()
		ks, per := keepAlive(t, b, web, phase, need, 100, &wg, stop)
		for _, k := range ks {
			kept = append(kept, phased{k, phase})
		}
		return per
	}
	// Under weights 1, 1, 4 at least half of b1's and b2's hashes go to b3:
	// with 4 connections on each, some of them all but certainly would move
	// were they not tracked.
	perMaglev := keep("MAGLEV", 4)
	fresh := &stream{}
	wg.Go(func() { fresh.run(b, web, stop) })
	time.Sleep(300 * time.Millisecond)

	// reload rewrites the running file with policy and sends SIGHUP; it
	// returns when xlb has counted reload number n as applied.
	reload := func(policy string, n float64) time.Time {
		t.Helper()
		text, err := os.ReadFile(config(policy))
		must(t, err)
		must(t, os.WriteFile(cfg, text, 0o644))
		must(t, p.cmd.Process.Signal(syscall.SIGHUP))
		waitMetric(t, b, "xlb_reload_success_total", n)
		return time.Now()
	}

	// To WEIGHTED_MAGLEV: the reported weights apply.
	weightedAt := reload("WEIGHTED_MAGLEV", 1)
	waitWeights(t, b, "WEIGHTED_MAGLEV: weights 1, 1, 4 applied", true, reported, reported)
	checkSpread(t, "WEIGHTED_MAGLEV after the first reload", newConns(t, b, web, shareFlows),
		map[string]float64{"b1": 1.0 / 6, "b2": 1.0 / 6, "b3": 4.0 / 6})
	// More kept-alive connections, selected with the weights: back under
	// equal weights at least half of b3's hashes go to b1 and b2, and b3
	// gets about 4 for each 1 of b1 and b2.
	perWeighted := keep("WEIGHTED_MAGLEV", 2)
	// Every connection kept since MAGLEV answers while weighted before the
	// reload back: on a loaded machine the burst of new connections above
	// can starve their loops for the whole phase, which would prove nothing
	// either way. Past the deadline the checks below say which one did not.
	answeredWeighted := func() bool {
		for _, k := range kept {
			if k.phase == "MAGLEV" && !k.answeredSince(weightedAt, 1) {
				return false
			}
		}
		return true
	}
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline) && !answeredWeighted(); {
		time.Sleep(50 * time.Millisecond)
	}

	// Back to MAGLEV: equal shares again.
	equalAt := reload("MAGLEV", 2)
	waitWeights(t, b, "MAGLEV again: equal weights", false, equal, reported)
	checkSpread(t, "MAGLEV after the second reload", newConns(t, b, web, shareFlows), thirds)
	// Let every kept-alive connection ask a few more times (or fail): a
	// fixed sleep could end before a slow machine's connections asked at all.
	// Past the deadline the checks below say which one did not.
	allAnswered := func() bool {
		for _, k := range kept {
			if !k.answeredSince(equalAt, 2) {
				return false
			}
		}
		return true
	}
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline) && !allAnswered(); {
		time.Sleep(50 * time.Millisecond)
	}
	stopTraffic()

	m := metrics(t, b)
	if ok, failed := metric(t, m, "xlb_reload_success_total"), metric(t, m, "xlb_reload_failure_total"); ok != 2 || failed != 0 {
		t.Errorf("reloads: %v ok, %v failed, want 2 ok, 0 failed", ok, failed)
	}
	for _, k := range kept {
		k.mu.Lock()
		if !k.failAt.IsZero() {
			t.Errorf("a kept-alive connection to %s opened under %s failed %v after the first reload: %v", k.backend, k.phase, k.failAt.Sub(weightedAt).Round(time.Millisecond), k.failErr)
		}
		if k.moved != "" {
			t.Errorf("a kept-alive connection to %s opened under %s was answered by %s", k.backend, k.phase, k.moved)
		}
		var weighted, after int
		if k.phase != "MAGLEV" {
			// Opened while weighted: its first answer (in keep, not in
			// k.ok) came while weighted.
			weighted = 1
		}
		for _, at := range k.ok {
			switch {
			case at.After(equalAt):
				after++
			case at.After(weightedAt):
				weighted++
			}
		}
		if weighted == 0 || after == 0 {
			t.Errorf("a kept-alive connection to %s opened under %s answered %d times while weighted, %d after the reload back, want some each time", k.backend, k.phase, weighted, after)
		}
		k.mu.Unlock()
	}
	all, failed := fresh.result()
	if len(failed) > 0 {
		t.Errorf("%d of %d new connections of the stream failed (first reload at 0):\n%s", len(failed), len(fresh.conns), strings.Join(fresh.failures(weightedAt), "\n"))
	}
	if n1, n2 := fresh.openedAfter(weightedAt), fresh.openedAfter(equalAt); n1 == n2 || n2 == 0 {
		t.Errorf("the stream opened %d new connections after the first reload, %d after the second: want some in each phase", n1, n2)
	}
	if all["b1"] == 0 || all["b2"] == 0 || all["b3"] == 0 {
		t.Errorf("the stream's new connections reached %v, want each of b1-b3", all)
	}
	t.Logf("stream of new connections %v; kept-alive per backend %v opened under MAGLEV, %v under WEIGHTED_MAGLEV; lost and retried: %s", all, perMaglev, perWeighted, lossSummary(t, b))
}

// answeredSince reports whether k has answered n times after at, or has
// failed.
func (k *keptConn) answeredSince(at time.Time, n int) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	c := 0
	for _, a := range k.ok {
		if a.After(at) {
			c++
		}
	}
	return c >= n || !k.failAt.IsZero()
}

// stream is a steady stream of new connections, one every 30 ms, each a
// request on a new connection.
type stream struct {
	mu    sync.Mutex
	conns []newConn
}

func (s *stream) run(b *testbed.Bed, dst netip.AddrPort, stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			return
		case <-time.After(30 * time.Millisecond):
		}
		at := time.Now()
		// 3 s allows the kernel one SYN retransmit (after 1 s), as in
		// TestReload: a connection fails only if its SYN is lost twice.
		r, err := testbed.HTTPGet(b.Clients[0].NS, dst, "/", 3*time.Second)
		if err == nil && r.Status != 200 {
			err = fmt.Errorf("status %d", r.Status)
		}
		s.mu.Lock()
		s.conns = append(s.conns, newConn{at, r.Backend, err})
		s.mu.Unlock()
	}
}

// result counts the answered connections by backend and lists the errors.
func (s *stream) result() (map[string]int, []error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	counts, errs := map[string]int{}, []error(nil)
	for _, c := range s.conns {
		if c.err != nil {
			errs = append(errs, c.err)
			continue
		}
		counts[c.backend]++
	}
	return counts, errs
}

// openedAfter counts the connections opened after t0.
func (s *stream) openedAfter(t0 time.Time) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, c := range s.conns {
		if c.at.After(t0) {
			n++
		}
	}
	return n
}

// failures describes each failed connection by when it was opened,
// relative to t0.
func (s *stream) failures(t0 time.Time) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, c := range s.conns {
		if c.err != nil {
			out = append(out, fmt.Sprintf("opened at %v: %v", c.at.Sub(t0).Round(time.Millisecond), c.err))
		}
	}
	return out
}

// waitWeights waits until /status shows the web service of faultConfig
// weighted (WEIGHTED_MAGLEV, no fallback) or not, every backend of want
// healthy and eligible with selection weight want[name] and reported
// weight reported[name] (W1).
func waitWeights(t *testing.T, b *testbed.Bed, what string, weighted bool, want, reported map[string]uint32) {
	t.Helper()
	var last string
	deadline := time.Now().Add(15 * time.Second)
	for {
		last = admin(t, b, "/status")
		var s status
		var w struct {
			Services []struct {
				Name     string   `json:"name"`
				Weighted bool     `json:"weighted"`
				Fallback []string `json:"weight_fallback"`
			} `json:"services"`
		}
		if err := json.Unmarshal([]byte(last), &s); err != nil {
			t.Fatalf("/status: %v\n%s", err, last)
		}
		if err := json.Unmarshal([]byte(last), &w); err != nil {
			t.Fatalf("/status: %v\n%s", err, last)
		}
		ok := false
		for _, svc := range w.Services {
			if svc.Name == "web" {
				ok = svc.Weighted == weighted && len(svc.Fallback) == 0
			}
		}
		for n, wt := range want {
			be := backendIn(s, "web", n)
			if be == nil || !be.Healthy || !be.Eligible || be.Weight != wt || be.ReportedWeight != reported[n] {
				ok = false
			}
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("/status: no %s within 15s:\n%s", what, last)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

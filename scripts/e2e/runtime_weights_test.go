package e2e

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"xlb/scripts/testbed"
)

// shareFlows is how many new connections a share check of the fault tests
// makes; checkSpread derives its tolerance from it.
const shareFlows = 300

// TestW1_WeightsChangeAtRuntime: a WEIGHTED_MAGLEV service over b1-b3, all
// reporting weight 1, while kept-alive connections to each ask every
// 100 ms; the backends change the weights they report:
//
//   - b3 reports 0: it stays healthy, leaves the eligible set (E2, E6) and
//     gets no new connection, while its kept-alive connections go on;
//   - b1 1, b2 4: new connections split 20 % / 80 % (S2, W1);
//   - b1's header goes missing: the whole service falls back to equal
//     weights, b3 included, and new connections split in thirds; the probe
//     says MISSING_WEIGHT (W1a); an invalid value (INVALID_WEIGHT) keeps
//     the fallback, a valid one ends it;
//   - all report 0: they share equally (W1b).
//
// No kept-alive connection ever fails or moves.
func TestW1_WeightsChangeAtRuntime(t *testing.T) {
	t.Parallel()
	b := upBed(t, testbed.Options{Prefix: "e2ewr", Failover: -1, Weights: []int{1, 1, 1}})
	web := netip.AddrPortFrom(testbed.VIP4, testbed.HTTPPort)
	p := startXLB(t, b, faultConfig(t, b, 1, 2, faultSvc{name: "web", port: web.Port(),
		primaries: []string{"b1", "b2", "b3"}, keys: `locality_lb_policy = "WEIGHTED_MAGLEV"`}))
	// weightsAre waits until xlb selects with the given weights (0: not
	// eligible) and every backend is healthy.
	weightsAre := func(what string, want map[string]uint32) {
		t.Helper()
		waitStatus(t, b, what, func(s status) bool {
			for n, w := range want {
				be := backendIn(s, "web", n)
				if be == nil || !be.Healthy || be.Weight != w || be.Eligible != (w > 0) {
					return false
				}
			}
			return true
		})
	}
	weightsAre("weights 1, 1, 1", map[string]uint32{"b1": 1, "b2": 1, "b3": 1})

	// Kept-alive connections, until each backend has two.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	stopTraffic := sync.OnceFunc(func() { close(stop); wg.Wait() })
	t.Cleanup(stopTraffic)
	kept, _ := keepAlive(t, b, web, "kept-alive", 2, 60, &wg, stop)

	// E2, E6: weight 0 takes b3 out of new connections, healthy.
	must(t, b.SetWeight("b3", "0"))
	zeroAt := time.Now()
	weightsAre("b3 weight 0, healthy and not eligible", map[string]uint32{"b1": 1, "b2": 1, "b3": 0})
	checkSpread(t, "b3 reports weight 0", newConns(t, b, web, shareFlows), map[string]float64{"b1": 0.5, "b2": 0.5, "b3": 0})

	// S2: weights 1 and 4.
	must(t, b.SetWeight("b2", "4"))
	weightsAre("weights 1, 4, 0", map[string]uint32{"b1": 1, "b2": 4, "b3": 0})
	checkSpread(t, "weights 1, 4, 0", newConns(t, b, web, shareFlows), map[string]float64{"b1": 0.2, "b2": 0.8, "b3": 0})

	// W1a: b1's header goes missing, the service falls back to equal
	// weights (b3's 0 included); /status says why and so does the log.
	must(t, b.SetWeight("b1", ""))
	weightsAre("equal weights after b1's header went missing", map[string]uint32{"b1": 1, "b2": 1, "b3": 1})
	checkWeightState(t, b, "b1", "MISSING_WEIGHT")
	m := metrics(t, b)
	for _, n := range []string{"b1", "b2", "b3"} {
		if w := metric(t, m, series("xlb_backend_weight", "web", n, b)); w != 1 {
			t.Errorf("fallback to equal weights: xlb_backend_weight of %s is %v, want 1", n, w)
		}
	}
	checkFallbackMetrics(t, b, "b1", "MISSING_WEIGHT")
	if !logHas(p, `"msg":"weight report"`, fmt.Sprintf(`"target":"hc/%s"`, b.Backend("b1").Addr4), `"state":"MISSING_WEIGHT"`) {
		t.Error("xlb's log has no weight report of b1 with state MISSING_WEIGHT")
	}
	checkSpread(t, "b1 reports no weight (fallback)", newConns(t, b, web, shareFlows), map[string]float64{"b1": 1.0 / 3, "b2": 1.0 / 3, "b3": 1.0 / 3})

	// An invalid value keeps the fallback; a valid one ends it.
	must(t, b.SetWeight("b1", "abc"))
	checkWeightState(t, b, "b1", "INVALID_WEIGHT")
	weightsAre("equal weights while b1's weight is invalid", map[string]uint32{"b1": 1, "b2": 1, "b3": 1})
	checkFallbackMetrics(t, b, "b1", "INVALID_WEIGHT")
	must(t, b.SetWeight("b1", "1"))
	weightsAre("weights 1, 4, 0 once b1 reports a valid weight again", map[string]uint32{"b1": 1, "b2": 4, "b3": 0})
	if v := metric(t, metrics(t, b), `xlb_service_weight_fallback{service="web"}`); v != 0 {
		t.Errorf("every weight valid again: xlb_service_weight_fallback = %v, want 0", v)
	}

	// W1b: every backend reports 0, all share equally.
	must(t, b.SetWeight("b1", "0"))
	must(t, b.SetWeight("b2", "0"))
	waitStatus(t, b, "all three eligible with weight 0", func(s status) bool {
		for _, n := range []string{"b1", "b2", "b3"} {
			if be := backendIn(s, "web", n); be == nil || be.ReportedWeight != 0 || !be.Eligible {
				return false
			}
		}
		return true
	})
	if c := newConns(t, b, web, 60); c["b1"] == 0 || c["b2"] == 0 || c["b3"] == 0 {
		t.Errorf("60 new connections with every weight 0: %v, want some on each of b1-b3", c)
	}

	stopTraffic()
	for _, k := range kept {
		k.mu.Lock()
		if !k.failAt.IsZero() {
			t.Errorf("a kept-alive connection to %s failed: %v", k.backend, k.failErr)
		}
		if k.moved != "" {
			t.Errorf("a kept-alive connection to %s was answered by %s", k.backend, k.moved)
		}
		if k.backend == "b3" {
			n := 0
			for _, at := range k.ok {
				if at.After(zeroAt) {
					n++
				}
			}
			if n == 0 {
				t.Error("a kept-alive connection to b3 answered nothing after b3 reported weight 0")
			}
		}
		k.mu.Unlock()
	}
}

// checkFallbackMetrics: /metrics says, within 5 s (the health checker's
// report reaches the control plane's next snapshot a moment after
// /status's health-check view), that the web service fell back to equal
// weights (W1a) and that backend name's weight state is state.
func checkFallbackMetrics(t *testing.T, b *testbed.Bed, name, state string) {
	t.Helper()
	s := strings.TrimSuffix(series("xlb_backend_weight_state", "web", name, b), "}")
	var problems []string
	for deadline := time.Now().Add(5 * time.Second); ; {
		m := metrics(t, b)
		problems = problems[:0]
		if v := metric(t, m, `xlb_service_weight_fallback{service="web"}`); v != 1 {
			problems = append(problems, fmt.Sprintf("xlb_service_weight_fallback = %v, want 1", v))
		}
		for _, st := range []string{"VALID", "MISSING_WEIGHT", "INVALID_WEIGHT", "UNAVAILABLE_WEIGHT"} {
			want := 0.0
			if st == state {
				want = 1
			}
			if v := metric(t, m, s+fmt.Sprintf(",state=%q}", st)); v != want {
				problems = append(problems, fmt.Sprintf("xlb_backend_weight_state{backend=%q,state=%q} = %v, want %v", name, st, v, want))
			}
		}
		if len(problems) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, p := range problems {
		t.Errorf("%s from %s: %s", state, name, p)
	}
}

// checkWeightState waits until the health check of backend name's address
// reports state (VALID, MISSING_WEIGHT, INVALID_WEIGHT, ...) in /status.
func checkWeightState(t *testing.T, b *testbed.Bed, name, state string) {
	t.Helper()
	addr := netip.AddrPortFrom(b.Backend(name).Addr4, testbed.HTTPPort).String()
	waitStatus(t, b, fmt.Sprintf("%s's health check reporting %s", name, state), func(s status) bool {
		return slices.ContainsFunc(s.Runtime.HealthChecks, func(hc statusCheck) bool {
			return hc.Address == addr && hc.WeightState == state
		})
	})
}

// logHas reports whether a line of xlb's log has every one of parts.
func logHas(p *xlbProc, parts ...string) bool {
	for line := range strings.Lines(p.log.String()) {
		if !slices.ContainsFunc(parts, func(part string) bool { return !strings.Contains(line, part) }) {
			return true
		}
	}
	return false
}

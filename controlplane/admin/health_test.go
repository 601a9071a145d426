package admin_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"xlb/controlplane"
	"xlb/controlplane/admin"
	"xlb/controlplane/cptest"
)

// TestHealthMetricsExported: probes observed are counted by check and
// result and land in the latency histogram's buckets.
func TestHealthMetricsExported(t *testing.T) {
	_, src := newRig(t)
	src.health.Observe("hc", true, 3*time.Millisecond)
	src.health.Observe("hc", true, 7*time.Millisecond)
	src.health.Observe("hc", false, 2*time.Second)
	s, fams := scrape(t, startServer(t, src))
	for k, want := range map[string]float64{
		`xlb_health_checks_total{check="hc",result="pass"}`: 2,
		`xlb_health_checks_total{check="hc",result="fail"}`: 1,
	} {
		if s[k] != want {
			t.Errorf("%s = %v, want %v", k, s[k], want)
		}
	}
	got := map[string]uint64{}
	var sum float64
	for _, m := range fams["xlb_health_check_duration_seconds"].GetMetric() {
		h := m.GetHistogram()
		got[key("", m.GetLabel())] = h.GetSampleCount()
		sum += h.GetSampleSum()
		if key("", m.GetLabel()) == `{check="hc",result="pass"}` {
			for _, b := range h.GetBucket() {
				if b.GetUpperBound() == .005 && b.GetCumulativeCount() != 1 {
					t.Errorf("pass probes <= 5ms: %d, want 1", b.GetCumulativeCount())
				}
			}
		}
	}
	if got[`{check="hc",result="pass"}`] != 2 || got[`{check="hc",result="fail"}`] != 1 {
		t.Errorf("histogram counts %v, want pass 2, fail 1", got)
	}
	if sum < 2.009 || sum > 2.011 {
		t.Errorf("histogram sum %v s, want 2.010", sum)
	}
}

// TestFailoverSwitchesExported: the control plane's switch counts are
// exported per service and direction, zeros included.
func TestFailoverSwitchesExported(t *testing.T) {
	r, src := newRig(t)
	r.Health("b1", false)
	r.Health("b2", false)
	r.Health("b1", true)
	s, _ := scrape(t, startServer(t, src))
	for k, want := range map[string]float64{
		`xlb_service_failover_switches_total{service="web",to="failover"}`: 1,
		`xlb_service_failover_switches_total{service="web",to="primary"}`:  1,
		`xlb_service_failover_switches_total{service="dns",to="failover"}`: 0,
	} {
		if v, ok := s[k]; !ok || v != want {
			t.Errorf("%s = %v (present %v), want %v", k, v, ok, want)
		}
	}
}

// TestW1a_WeightFallbackExported: a missing or invalid weight makes the
// service fall back to equal weights, and /metrics and /status say so and
// name the backend and the reason; a timed-out probe (UNAVAILABLE_WEIGHT)
// does not.
func TestW1a_WeightFallbackExported(t *testing.T) {
	r := cptest.New(t, cptest.Testdata(t, "weighted.toml")) // api: WEIGHTED_MAGLEV over w1..w3
	src := &rigSources{rig: r, workers: []admin.QueueStats{{Queue: 0, Stats: r.D.Stats()}}}
	base := startServer(t, src)
	for _, n := range []string{"w1", "w2", "w3"} {
		r.Health(n, true)
	}
	set := func(name string, w uint32, st controlplane.WeightState) {
		t.Helper()
		if err := r.CP.SetWeight(name, w, st, r.Now); err != nil {
			t.Fatal(err)
		}
	}
	set("w1", 1, controlplane.WeightValid)
	set("w2", 4, controlplane.WeightValid)
	set("w3", 2, controlplane.WeightUnavailable)

	state := func(be, st string) string {
		return fmt.Sprintf(`xlb_backend_weight_state{backend=%q,ip="10.1.0.%c",service="api",state=%q}`, be, be[1], st)
	}
	check := func(step string, want map[string]float64, fallback []string) {
		t.Helper()
		s, _ := scrape(t, base)
		for k, v := range want {
			if got, ok := s[k]; !ok || got != v {
				t.Errorf("%s: %s = %v (present %v), want %v", step, k, got, ok, v)
			}
		}
		rep := src.Status()
		if got := rep.Services[0].WeightFallback; !slices.Equal(got, fallback) {
			t.Errorf("%s: /status weight_fallback %q, want %q", step, got, fallback)
		}
	}
	check("valid and unavailable", map[string]float64{
		`xlb_service_weight_fallback{service="api"}`:                   0,
		state("w1", "VALID"):                                           1,
		state("w3", "UNAVAILABLE_WEIGHT"):                              1,
		state("w3", "VALID"):                                           0,
		`xlb_backend_weight{backend="w2",ip="10.1.0.2",service="api"}`: 4,
	}, nil)

	set("w2", 0, controlplane.WeightMissing)
	check("missing", map[string]float64{
		`xlb_service_weight_fallback{service="api"}`:                   1,
		state("w2", "MISSING_WEIGHT"):                                  1,
		state("w2", "VALID"):                                           0,
		`xlb_backend_weight{backend="w2",ip="10.1.0.2",service="api"}`: 1,
		`xlb_backend_weight{backend="w1",ip="10.1.0.1",service="api"}`: 1,
	}, []string{"w2: MISSING_WEIGHT"})

	set("w1", 0, controlplane.WeightInvalid)
	check("missing and invalid", map[string]float64{
		`xlb_service_weight_fallback{service="api"}`: 1,
		state("w1", "INVALID_WEIGHT"):                1,
	}, []string{"w1: INVALID_WEIGHT", "w2: MISSING_WEIGHT"})

	set("w1", 1, controlplane.WeightValid)
	set("w2", 4, controlplane.WeightValid)
	check("valid again", map[string]float64{
		`xlb_service_weight_fallback{service="api"}`:                   0,
		`xlb_backend_weight{backend="w2",ip="10.1.0.2",service="api"}`: 4,
	}, nil)
}

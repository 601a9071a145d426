package admin_test

import (
	"testing"
	"time"
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

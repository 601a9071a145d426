package appliance

import (
	"net/netip"
	"testing"

	"xlb/controlplane"
	"xlb/healthcheck"
)

// TestRunHealth_HoldRestored: a target whose backends a previous process
// left healthy stays healthy while its probes pass below the healthy
// threshold; a failed probe, or the checker's own healthy verdict, ends
// the hold; a target restored unhealthy is not held.
func TestRunHealth_HoldRestored(t *testing.T) {
	a, b := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2")
	feeds := map[string][]healthFeed{
		"hc/10.0.0.1": {{service: "web", ip: a}},
		"hc/10.0.0.2": {{service: "web", ip: b}},
	}
	st := &controlplane.State{Backends: []controlplane.BackendRecord{
		{Service: "web", IP: a, Healthy: true},
		{Service: "web", IP: b, Healthy: false},
	}}
	r := newFirstRound(nil)
	r.holdRestored(st, feeds)
	verdicts := func(rs []healthcheck.Result) []bool {
		var out []bool
		for _, x := range r.hold(rs) {
			out = append(out, x.Healthy)
		}
		return out
	}
	passing := []healthcheck.Result{{Key: "hc/10.0.0.1", Pass: true}, {Key: "hc/10.0.0.2", Pass: true}}
	if got := verdicts(passing); !got[0] || got[1] {
		t.Fatalf("passing below threshold: %v, want [true false] (held, not held)", got)
	}
	if passing[0].Healthy {
		t.Fatal("hold changed its argument")
	}
	if got := verdicts(passing); !got[0] {
		t.Fatalf("second passing probe: %v, want still held", got)
	}
	if got := verdicts([]healthcheck.Result{{Key: "hc/10.0.0.1", Pass: false}}); got[0] {
		t.Fatalf("failed probe: %v, want unhealthy", got)
	}
	if got := verdicts(passing); got[0] {
		t.Fatalf("after a failure: %v, want no hold any more", got)
	}

	r = newFirstRound(nil)
	r.holdRestored(st, feeds)
	verdicts([]healthcheck.Result{{Key: "hc/10.0.0.1", Pass: true, Healthy: true}})
	if got := verdicts(passing); got[0] {
		t.Fatalf("after the checker's healthy verdict: %v, want no hold", got)
	}
	var none *firstRound
	if got := none.hold(passing); &got[0] != &passing[0] {
		t.Fatal("nil round changed the results")
	}
}

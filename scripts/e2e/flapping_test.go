package e2e

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"xlb/scripts/testbed"
)

// TestE1S3_HealthFlapping: with healthy_threshold and unhealthy_threshold 3,
// a healthy b1 whose /healthz alternates fail, pass, fail, ... and an
// unhealthy b3 whose /healthz alternates pass, fail, pass, ... (each
// switched right after xlb's probe of it, so every probe sees the other
// answer than the one before) never reach a run of three: through six
// probes of each, /status keeps b1 healthy, b3 unhealthy and the eligible
// set {b1, b2} (E1), and new connections made meanwhile keep their spread
// over b1 and b2 (S3). Then three fails in a row do take b1 out and three
// passes bring b3 in, so the thresholds were what held them.
func TestE1S3_HealthFlapping(t *testing.T) {
	t.Parallel()
	const threshold, flaps = 3, 6
	b := upBed(t, testbed.Options{Prefix: "e2efl", Failover: -1})
	web := netip.AddrPortFrom(testbed.VIP4, testbed.HTTPPort)
	must(t, b.SetHealthy("b3", false))
	startXLB(t, b, faultConfig(t, b, threshold, threshold,
		faultSvc{name: "web", port: web.Port(), primaries: []string{"b1", "b2", "b3"}}))
	checkOf := func(s status, n string) statusCheck {
		addr := netip.AddrPortFrom(b.Backend(n).Addr4, testbed.HTTPPort).String()
		for _, hc := range s.Runtime.HealthChecks {
			if hc.Address == addr {
				return hc
			}
		}
		return statusCheck{}
	}
	steady := func(s status) bool {
		return healthyIn(s, "b1", true) && healthyIn(s, "b2", true) && healthyIn(s, "b3", false) &&
			slices.Equal(eligibleOf(s, "web"), []string{"b1", "b2"})
	}
	waitStatus(t, b, "b1, b2 healthy, b3 unhealthy after 3 probes", func(s status) bool {
		return steady(s) && checkOf(s, "b3").Probes >= threshold
	})

	// New connections while the health flaps, from the start.
	type spread struct {
		counts map[string]int
		err    error
	}
	during := make(chan spread, 1)
	go func() {
		c, err := runProbe(b, web, shareFlows)
		during <- spread{c, err}
	}()

	// Flap: after each probe of b1 or b3, turn its /healthz around.
	serving := map[string]bool{"b1": true, "b3": false}
	seen := map[string]uint64{}
	results := map[string][]string{} // "P"/"F" per probe seen, "?" for one missed
	var broken []string
	start := time.Now()
	for time.Since(start) < time.Duration(flaps+4)*checkInterval &&
		(len(results["b1"]) < flaps || len(results["b3"]) < flaps) {
		s := getStatus(t, b)
		if !steady(s) && len(broken) < 5 {
			broken = append(broken, fmt.Sprintf("at %v: b1 healthy %v, b3 healthy %v, eligible %v",
				time.Since(start).Round(time.Millisecond), healthyIn(s, "b1", true), healthyIn(s, "b3", true), eligibleOf(s, "web")))
		}
		for _, n := range []string{"b1", "b3"} {
			hc := checkOf(s, n)
			if seen[n] == 0 {
				seen[n] = hc.Probes // from the next probe on
				continue
			}
			if hc.Probes <= seen[n] || hc.Pass == nil {
				continue
			}
			for range hc.Probes - seen[n] - 1 {
				results[n] = append(results[n], "?")
			}
			results[n] = append(results[n], map[bool]string{true: "P", false: "F"}[*hc.Pass])
			seen[n] = hc.Probes
			serving[n] = !serving[n]
			must(t, b.SetHealthy(n, serving[n]))
		}
		time.Sleep(25 * time.Millisecond)
	}
	elapsed := time.Since(start)
	t.Logf("%v of flapping: b1's probes %s, b3's %s", elapsed.Round(10*time.Millisecond),
		strings.Join(results["b1"], ""), strings.Join(results["b3"], ""))
	// The stimulus: alternating answers, a miss (this process starved for
	// a whole interval) at most once in a row.
	for n, first := range map[string]string{"b1": "P", "b3": "F"} {
		seq := strings.Join(results[n], "")
		if len(results[n]) < flaps || !strings.HasPrefix(seq, first) || strings.Contains(seq, "??") ||
			strings.Contains(seq, "PP") || strings.Contains(seq, "FF") {
			t.Errorf("%s's probes saw %q: want %d alternating answers starting with %s (the test did not flap it as meant)", n, seq, flaps, first)
		}
	}
	if len(broken) > 0 {
		t.Errorf("the health state or eligible set changed while b1 and b3 flapped below the thresholds: %s", strings.Join(broken, "; "))
	}
	m := metrics(t, b)
	if v := metric(t, m, `xlb_service_eligible_backends{service="web"}`); v != 2 {
		t.Errorf("xlb_service_eligible_backends of web %v after the flapping, want 2", v)
	}
	d := <-during
	if d.err != nil {
		t.Errorf("new connections during the flapping: %v", d.err)
	} else {
		checkSpread(t, "new connections during the flapping", d.counts, map[string]float64{"b1": 0.5, "b2": 0.5, "b3": 0})
	}

	// Control: a run of three does change them.
	changed := time.Now()
	must(t, b.SetHealthy("b1", false))
	must(t, b.SetHealthy("b3", true))
	bound := threshold*checkInterval + 1500*time.Millisecond
	took := untilStatus(t, b, "b1 unhealthy and b3 healthy after three probes each", changed, 10*time.Second, func(s status) bool {
		return healthyIn(s, "b1", false) && healthyIn(s, "b3", true) && slices.Equal(eligibleOf(s, "web"), []string{"b2", "b3"})
	})
	t.Logf("steady fail and pass: b1 out and b3 in after %v (interval %v × threshold %d)", took.Round(10*time.Millisecond), checkInterval, threshold)
	if took > bound {
		t.Errorf("b1 out and b3 in %v after their /healthz changed for good, want within %v", took, bound)
	}
}

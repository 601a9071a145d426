package e2e

import (
	"errors"
	"net"
	"net/netip"
	"slices"
	"testing"
	"time"

	"xlb/scripts/testbed"
)

// TestE3M4F1_Failover: primaries b1-b3 and the failover backend b4, two
// services with failover_ratio 0.5 (F1) that differ in the other two
// options: "web" drops traffic when nothing is healthy and moves tracked
// connections at a switch (drop_traffic_if_unhealthy and
// disable_connection_drain_on_failover true), "keep" has both false (the
// defaults).
//
//   - b1 and b2 fail (1 of 3 primaries healthy, under the ratio): both
//     services switch to the failover side and new connections go to b4
//     (E3 rule 5); a connection to b3 of "keep" stays on b3, the next
//     request of one of "web" is treated as new (M4) and lands on b4, which
//     resets it; the switch is counted once per service.
//   - b1 and b2 recover: new connections return to the primaries; a "web"
//     connection that sent nothing while the side was failover still
//     reaches b3 (M4: switched and back with no packet in between); the
//     switch back is counted.
//   - every backend fails: "web"'s new connections get no answer at all
//     and its drops count as no-eligible-backend (E3, S6); "keep"'s go to
//     the unhealthy primaries, which serve them.
func TestE3M4F1_Failover(t *testing.T) {
	t.Parallel()
	b := upBed(t, testbed.Options{Prefix: "e2efo"})
	web := netip.AddrPortFrom(testbed.VIP4, testbed.HTTPPort)
	keep := netip.AddrPortFrom(testbed.VIP4, 8080)
	primaries, spare := []string{"b1", "b2", "b3"}, []string{"b4"}
	p := startXLB(t, b, faultConfig(t, b, 1, 2,
		faultSvc{name: "web", port: web.Port(), primaries: primaries, failover: spare,
			tables: "[backend_service.failover_policy]\nfailover_ratio = 0.5\ndrop_traffic_if_unhealthy = true\ndisable_connection_drain_on_failover = true"},
		faultSvc{name: "keep", port: keep.Port(), primaries: primaries, failover: spare,
			tables: "[backend_service.failover_policy]\nfailover_ratio = 0.5"}))
	waitStatus(t, b, "b1-b4 healthy", allHealthy)
	sides := func(want string) func(status) bool {
		return func(s status) bool { return sideOf(s, "web") == want && sideOf(s, "keep") == want }
	}
	if s := getStatus(t, b); !sides("primary")(s) || !slices.Equal(eligibleOf(s, "web"), primaries) {
		t.Fatalf("all healthy: sides %q/%q, web eligible %v; want primary, b1-b3", sideOf(s, "web"), sideOf(s, "keep"), eligibleOf(s, "web"))
	}
	switches := func(svc, to string) string {
		return `xlb_service_failover_switches_total{service="` + svc + `",to="` + to + `"}`
	}
	// The sides may have switched while the health checks came up one by
	// one (b4 and one primary healthy first is E3 rule 5): count from here.
	start := metrics(t, b)
	switched := func(m map[string]float64, svc, to string) float64 {
		return metric(t, m, switches(svc, to)) - metric(t, start, switches(svc, to))
	}

	keepConn := connTo(t, b, keep, "b3", true)
	webConn := connTo(t, b, web, "b3", true)
	webIdle := connTo(t, b, web, "b3", false)

	// Two of three primaries fail: 1/3 < 0.5.
	failed := time.Now()
	must(t, b.SetHealthy("b1", false))
	must(t, b.SetHealthy("b2", false))
	took := untilStatus(t, b, "both services on the failover side", failed, 10*time.Second, sides("failover"))
	t.Logf("b1, b2 failing: failover side after %v", took.Round(10*time.Millisecond))
	if s := getStatus(t, b); !slices.Equal(eligibleOf(s, "web"), spare) || !slices.Equal(eligibleOf(s, "keep"), spare) {
		t.Errorf("failover side: eligible web %v, keep %v; want b4 (%s)", eligibleOf(s, "web"), eligibleOf(s, "keep"), s.Services[0].Why)
	}
	for _, dst := range []netip.AddrPort{web, keep} {
		if c := newConns(t, b, dst, 60); !only(c, "b4") {
			t.Errorf("60 new connections to %s on the failover side: %v, want b4 only", dst, c)
		}
	}
	// M4 off ("keep"): the tracked connection stays on its primary.
	if got, err := askOn(keepConn); err != nil || got != "b3" {
		t.Errorf("disable_connection_drain_on_failover false: request on a connection to b3 after the switch: %q, %v; want b3's answer", got, err)
	}
	// M4 on ("web"): it is new on the failover side, b4 resets it.
	before := metrics(t, b)
	got, err := askOn(webConn)
	wantReset(t, "disable_connection_drain_on_failover true: request on a connection to b3 after the switch", got, err)
	after := metrics(t, b)
	if d := metric(t, after, series("xlb_backend_forwarded_packets_total", "web", "b3", b)) -
		metric(t, before, series("xlb_backend_forwarded_packets_total", "web", "b3", b)); d != 0 {
		t.Errorf("disable_connection_drain_on_failover true: %v packets still reached b3 after the switch", d)
	}
	if d := metric(t, after, series("xlb_backend_new_connections_total", "web", "b4", b)) -
		metric(t, before, series("xlb_backend_new_connections_total", "web", "b4", b)); d != 1 {
		t.Errorf("disable_connection_drain_on_failover true: b4's new connections grew by %v over the request, want 1 (the request, treated as new)", d)
	}
	for _, svc := range []string{"web", "keep"} {
		if v := switched(after, svc, "failover"); v != 1 {
			t.Errorf("%s grew by %v over the switch, want 1", switches(svc, "failover"), v)
		}
		if v := metric(t, after, `xlb_service_side{service="`+svc+`"}`); v != 1 {
			t.Errorf(`xlb_service_side{service=%q} = %v on the failover side, want 1`, svc, v)
		}
	}

	// The primaries recover.
	healed := time.Now()
	must(t, b.SetHealthy("b1", true))
	must(t, b.SetHealthy("b2", true))
	took = untilStatus(t, b, "both services back on the primary side", healed, 10*time.Second, sides("primary"))
	t.Logf("b1, b2 healthy again: primary side after %v", took.Round(10*time.Millisecond))
	if c := newConns(t, b, web, 60); !only(c, "b1", "b2", "b3") || len(c) < 2 {
		t.Errorf("60 new connections back on the primary side: %v, want b1-b3 only", c)
	}
	if got, err := askOn(keepConn); err != nil || got != "b3" {
		t.Errorf("disable_connection_drain_on_failover false: the connection to b3 after the switch back: %q, %v; want b3's answer", got, err)
	}
	if got, err := askOn(webIdle); err != nil || got != "b3" {
		t.Errorf("disable_connection_drain_on_failover true: a connection to b3 idle while the side was failover: %q, %v; want b3's answer (its entry survives a switch and back, M4)", got, err)
	}
	m := metrics(t, b)
	for _, svc := range []string{"web", "keep"} {
		if f, back := switched(m, svc, "failover"), switched(m, svc, "primary"); f != 1 || back != 1 {
			t.Errorf("%s: switches to failover %v, to primary %v over the failure and the recovery; want 1 and 1", svc, f, back)
		}
	}
	if !logHas(p, `"msg":"failover side switched"`, `"service":"web"`, `"to":"failover"`) {
		t.Error(`xlb's log has no "failover side switched" line for web`)
	}

	// Nothing healthy.
	for _, n := range []string{"b1", "b2", "b3", "b4"} {
		must(t, b.SetHealthy(n, false))
	}
	waitStatus(t, b, "every backend unhealthy, web's eligible set empty", func(s status) bool {
		for _, n := range []string{"b1", "b2", "b3", "b4"} {
			if !healthyIn(s, n, false) {
				return false
			}
		}
		return len(eligibleOf(s, "web")) == 0 && slices.Equal(eligibleOf(s, "keep"), primaries)
	})
	drops := `xlb_service_drop_packets_total{reason="no-eligible-backend",service="web"}`
	before = metrics(t, b)
	for i := range 2 {
		c, err := testbed.DialHTTP(b.Clients[0].NS, web, 1500*time.Millisecond)
		if err == nil {
			r, _ := c.Get("/", time.Second)
			c.Close()
			t.Errorf("drop_traffic_if_unhealthy true, nothing healthy: new connection %d answered by %q", i, r.Backend)
			continue
		}
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() {
			t.Errorf("drop_traffic_if_unhealthy true, nothing healthy: new connection %d: %v, want a timeout (no answer at all)", i, err)
		}
	}
	if d := metric(t, metrics(t, b), drops) - metric(t, before, drops); d < 2 {
		t.Errorf("%s grew by %v over two connection attempts, want 2 or more (their SYNs)", drops, d)
	}
	if c := newConns(t, b, keep, 30); !only(c, "b1", "b2", "b3") {
		t.Errorf("drop_traffic_if_unhealthy false, nothing healthy: 30 new connections %v, want the unhealthy primaries", c)
	}
}

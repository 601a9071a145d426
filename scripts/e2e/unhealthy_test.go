package e2e

import (
	"net/netip"
	"slices"
	"testing"
	"time"

	"xlb/scripts/testbed"
)

// TestE1M3P1_UnhealthyBackend: b1 of b1-b3 fails, twice, while clients
// hold connections to it through two services that differ only in
// connection_persistence_on_unhealthy_backends.
//
// First its /healthz answers 503 while it keeps serving (SIGUSR1): xlb
// marks it unhealthy within check interval × unhealthy_threshold, new
// connections avoid it (E1); a kept-alive connection of the
// DEFAULT_FOR_PROTOCOL service keeps working on b1 (P1: TCP persists); the
// next request of the NEVER_PERSIST service's connection is treated as new
// (M3) and goes to b2 or b3, whose kernel knows no such connection and
// resets it, so the client sees its connection reset, not an answer from
// b1; a NEVER_PERSIST connection that sent nothing until b1 was healthy
// again keeps b1 (M3: no packet in between).
//
// Then its server is killed: xlb marks it unhealthy within the same bound
// (the time measured is logged), new connections avoid it, and once
// restarted it takes new connections again.
func TestE1M3P1_UnhealthyBackend(t *testing.T) {
	t.Parallel()
	const unhealthyAfter = 2
	b := upBed(t, testbed.Options{Prefix: "e2eu", Failover: -1})
	web := netip.AddrPortFrom(testbed.VIP4, testbed.HTTPPort)
	never := netip.AddrPortFrom(testbed.VIP4, 8080)
	primaries := []string{"b1", "b2", "b3"}
	cfg := faultConfig(t, b, 1, unhealthyAfter,
		faultSvc{name: "web", port: web.Port(), primaries: primaries},
		faultSvc{name: "never", port: never.Port(), primaries: primaries,
			tables: "[backend_service.connection_tracking_policy]\nconnection_persistence_on_unhealthy_backends = \"NEVER_PERSIST\""})
	startXLB(t, b, cfg)
	waitStatus(t, b, "b1-b3 healthy", allHealthy)
	// The bound: the first failing probe comes within an interval of the
	// failure, the state changes with the unhealthy_threshold-th; slack for
	// the probe itself and a loaded machine.
	bound := unhealthyAfter*checkInterval + 1500*time.Millisecond
	b1Unhealthy := func(s status) bool {
		return healthyIn(s, "b1", false) && slices.Equal(eligibleOf(s, "web"), []string{"b2", "b3"}) &&
			slices.Equal(eligibleOf(s, "never"), []string{"b2", "b3"})
	}

	webConn := connTo(t, b, web, "b1", true)
	neverConn := connTo(t, b, never, "b1", true)
	neverIdle := connTo(t, b, never, "b1", false)

	// /healthz fails, the server serves on.
	sick := time.Now()
	must(t, b.SetHealthy("b1", false))
	took := untilStatus(t, b, "b1 unhealthy and out of both eligible sets", sick, 10*time.Second, b1Unhealthy)
	t.Logf("/healthz failing: b1 unhealthy in /status after %v (interval %v × unhealthy_threshold %d)", took.Round(10*time.Millisecond), checkInterval, unhealthyAfter)
	if took > bound {
		t.Errorf("b1 marked unhealthy %v after its /healthz failed, want within %v", took, bound)
	}

	// P1, DEFAULT_FOR_PROTOCOL: the TCP connection persists on b1.
	if got, err := askOn(webConn); err != nil || got != "b1" {
		t.Errorf("DEFAULT_FOR_PROTOCOL: request on a connection to b1 after it went unhealthy: %q, %v; want b1's answer", got, err)
	}
	// M3, NEVER_PERSIST: the next segment is a new connection's, on b2 or b3.
	before := metrics(t, b)
	got, err := askOn(neverConn)
	wantReset(t, "NEVER_PERSIST: request on a connection to b1 after it went unhealthy", got, err)
	after := metrics(t, b)
	fwdB1 := series("xlb_backend_forwarded_packets_total", "never", "b1", b)
	if d := metric(t, after, fwdB1) - metric(t, before, fwdB1); d != 0 {
		t.Errorf("NEVER_PERSIST: %s grew by %v: the request reached the unhealthy b1", fwdB1, d)
	}
	moved := 0.0
	for _, n := range []string{"b2", "b3"} {
		s := series("xlb_backend_new_connections_total", "never", n, b)
		moved += metric(t, after, s) - metric(t, before, s)
	}
	if moved != 1 {
		t.Errorf("NEVER_PERSIST: new connections on b2 and b3 grew by %v over the one request, want 1 (the request, treated as new)", moved)
	}

	// E1: new connections avoid b1.
	for _, dst := range []netip.AddrPort{web, never} {
		if c := newConns(t, b, dst, 60); !only(c, "b2", "b3") {
			t.Errorf("60 new connections to %s with b1 unhealthy: %v, want b2 and b3 only", dst, c)
		}
	}
	if got, err := askOn(webConn); err != nil || got != "b1" {
		t.Errorf("DEFAULT_FOR_PROTOCOL: a second request on the connection to b1: %q, %v; want b1's answer", got, err)
	}

	// Healthy again: the idle NEVER_PERSIST connection sent nothing while
	// b1 was unhealthy, so its entry survives (M3).
	must(t, b.SetHealthy("b1", true))
	waitStatus(t, b, "b1 healthy again", allHealthy)
	if got, err := askOn(neverIdle); err != nil || got != "b1" {
		t.Errorf("NEVER_PERSIST: a connection idle while b1 was unhealthy, asked once it was healthy again: %q, %v; want b1's answer", got, err)
	}

	// The server dies.
	killed := time.Now()
	must(t, b.StopServer("b1"))
	took = untilStatus(t, b, "b1 unhealthy after its server was killed", killed, 10*time.Second, b1Unhealthy)
	t.Logf("server killed: b1 unhealthy in /status after %v (interval %v × unhealthy_threshold %d)", took.Round(10*time.Millisecond), checkInterval, unhealthyAfter)
	if took > bound {
		t.Errorf("b1 marked unhealthy %v after its server was killed, want within %v", took, bound)
	}
	if c := newConns(t, b, web, 60); !only(c, "b2", "b3") {
		t.Errorf("60 new connections with b1's server killed: %v, want b2 and b3 only", c)
	}
	// Restarted, it takes new connections again.
	restarted := time.Now()
	must(t, b.StartServer("b1"))
	untilStatus(t, b, "b1 healthy after its restart", restarted, 10*time.Second, allHealthy)
	if c := newConns(t, b, web, 60); c["b1"] == 0 || !only(c, "b1", "b2", "b3") {
		t.Errorf("60 new connections with b1 restarted and healthy: %v, want some on b1", c)
	}
}

package e2e

import (
	"net/netip"
	"testing"
	"time"

	"xlb/scripts/testbed"
)

// TestKill9 kills xlb with SIGKILL, which runs none of its cleanup: the
// kernel must drop the XDP program with the process (bpf_link), leaving
// the interface to the kernel, whose own traffic keeps working and which
// drops VIP traffic (the bed's blackhole); a restarted xlb forwards again.
func TestKill9(t *testing.T) {
	t.Parallel()
	b := upBed(t, testbed.Options{Prefix: "e2ek"})
	listenHost(t, b)
	cfg := writeConfig(t, b)
	web := netip.AddrPortFrom(testbed.VIP4, testbed.HTTPPort)

	p := startXLB(t, b, cfg)
	waitStatus(t, b, "healthy backends", allHealthy)
	if n := len(probe(t, b, "tcp", web, 30)); n < 2 {
		t.Fatalf("30 connections reached %d backends before the kill", n)
	}
	p.kill9(t)

	deadline := time.Now().Add(2 * time.Second)
	for xdpAttached(t, b) {
		if time.Now().After(deadline) {
			t.Fatal("an XDP program is still attached to " + b.LB.Iface + " 2s after xlb died")
		}
		time.Sleep(20 * time.Millisecond)
	}
	hostTraffic(t, b)
	if r, err := testbed.HTTPGet(b.Clients[0].NS, web, "/", 500*time.Millisecond); err == nil {
		t.Fatalf("without xlb, HTTP to the VIP was answered by %s: the bed's blackhole is not what the client reached", r.Backend)
	}

	startXLB(t, b, cfg)
	waitStatus(t, b, "healthy backends after the restart", allHealthy)
	if !xdpAttached(t, b) {
		t.Fatal("restarted xlb serves, but no XDP program is attached")
	}
	checkShares(t, "after the restart", probe(t, b, "tcp", web, flows), thirds)
}

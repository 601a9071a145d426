package admin_test

import (
	"testing"

	"xlb/controlplane/admin"
	"xlb/controlplane/bgp"
)

// TestSummary: the one-line status names the interface and mode, the
// services and those on their failover side, healthy of current backends,
// draining ones (removed included), conntrack occupancy in whole percent,
// reloads with a failed last one, and BGP sessions and announced VIPs.
func TestSummary(t *testing.T) {
	r := &admin.Report{
		Runtime:   &admin.Runtime{Interface: "eth1", XDPMode: "native", Queues: make([]admin.QueueRuntime, 4)},
		Conntrack: &admin.ConntrackReport{Occupancy: 0.129},
		Services: []admin.ServiceReport{
			{Name: "web", Side: "failover", Backends: []admin.BackendReport{{Healthy: false}, {Healthy: false}, {Healthy: true},
				{Healthy: true, Removed: true, Draining: true}}},
			{Name: "dns", Side: "primary", Backends: []admin.BackendReport{{Healthy: true}}},
		},
		Orphans:    []admin.BackendReport{{Removed: true, Draining: true}},
		Reloads:    &admin.ReloadReport{Success: 2, Failure: 1},
		LastReload: &admin.LastReload{OK: false},
		BGP: &admin.BGPReport{Status: bgp.Status{
			Neighbors: []bgp.NeighborStatus{{Up: true}, {Up: false}},
			VIPs:      []bgp.VIPStatus{{Announced: true}},
		}, NodeDrained: true},
	}
	want := "eth1 native XDP, 4 queues; 2 services (1 on failover); 2/4 backends healthy; 2 draining; conntrack 12%; " +
		"reloads 2 ok, 1 failed (last FAILED); bgp 1/2 up, 1/1 VIPs announced, node drained"
	if got := admin.Summary(r); got != want {
		t.Errorf("got  %q\nwant %q", got, want)
	}
	if got := admin.Summary(&admin.Report{}); got != "0 services; 0/0 backends healthy" {
		t.Errorf("empty report: %q", got)
	}
}

package admin_test

import (
	"strings"
	"testing"
	"time"

	"xlb/controlplane/admin"
	"xlb/controlplane/bgp"
)

// TestSummary: the one-line status names the interface and mode, the
// services and those on their failover side, healthy of current backends,
// draining ones (removed included), conntrack occupancy in whole percent,
// reloads with a failed last one, BGP sessions and announced VIPs, and
// flow-sync peers up and a pull under way.
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
		FlowSync: &admin.FlowSyncReport{Peers: []admin.FlowSyncPeer{{Up: true}, {}}, Pull: &admin.FlowSyncPull{}},
	}
	want := "eth1 native XDP, 4 queues; 2 services (1 on failover); 2/4 backends healthy; 2 draining; conntrack 12%; " +
		"reloads 2 ok, 1 failed (last FAILED); bgp 1/2 up, 1/1 VIPs announced, node drained; " +
		"flow sync 1/2 peers up, pulling the table"
	if got := admin.Summary(r); got != want {
		t.Errorf("got  %q\nwant %q", got, want)
	}
	if got := admin.Summary(&admin.Report{}); got != "0 services; 0/0 backends healthy" {
		t.Errorf("empty report: %q", got)
	}
}

// TestWriteTablesFlowSync: `xlb status` shows each flow-sync peer, up or
// down, when it was last heard, its lag and the records each way, and how
// the table pull at start went.
func TestWriteTablesFlowSync(t *testing.T) {
	heard := time.Now().Add(-1500 * time.Millisecond).UnixMilli()
	r := &admin.Report{FlowSync: &admin.FlowSyncReport{Listen: "10.0.0.5:7300",
		Peers: []admin.FlowSyncPeer{
			{Address: "10.0.0.6:7300", Up: true, LastHeardMs: heard, LagMs: 0.4, RecordsIn: 120, RecordsOut: 340},
			{Address: "10.0.0.7:7300"},
		},
		Pull: &admin.FlowSyncPull{Done: true, Peer: "10.0.0.6:7300", Records: 1000, Stored: 990, TookMs: 12}}}
	var b strings.Builder
	if err := admin.WriteTables(&b, r); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"flow sync: listening on 10.0.0.5:7300, table pulled from 10.0.0.6:7300: 1000 records, 990 stored in 12 ms",
		"PEER", "LAST HEARD",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("status tables lack %q:\n%s", want, out)
		}
	}
	var up, down string
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) > 0 && f[0] == "10.0.0.6:7300" {
			up = l
		}
		if len(f) > 0 && f[0] == "10.0.0.7:7300" {
			down = l
		}
	}
	if f := strings.Fields(up); len(f) < 8 || f[1] != "up" || !strings.HasSuffix(f[2], "s") || f[3] != "ago" || f[4] != "0.4" || f[6] != "120" || f[7] != "340" {
		t.Errorf("up peer's row: %q", up)
	}
	if f := strings.Fields(down); len(f) < 6 || f[1] != "down" || f[2] != "never" || f[3] != "-" {
		t.Errorf("never heard peer's row: %q", down)
	}
}

// TestWriteTablesLastReloadErrors: a failed last reload is counted in
// words a reader expects: "1 error", "2 errors".
func TestWriteTablesLastReloadErrors(t *testing.T) {
	for n, want := range map[int]string{1: "FAILED (1 error) at", 2: "FAILED (2 errors) at"} {
		var b strings.Builder
		r := &admin.Report{LastReload: &admin.LastReload{At: "2026-12-02T00:00:00Z", Errors: make([]string, n)}}
		if err := admin.WriteTables(&b, r); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(b.String(), want) {
			t.Errorf("%d errors: %q, want %q", n, b.String(), want)
		}
	}
}

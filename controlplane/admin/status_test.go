package admin_test

import (
	"slices"
	"strings"
	"testing"

	"xlb/controlplane/admin"
	"xlb/dataplane"
)

// TestStatus reads /status after traffic through two workers: services
// with side, eligible set and why, backends with health, weight, removal
// and forwarded counts, conntrack occupancy, per-queue counters and the
// run-time information, under the JSON names documented on Report.
func TestStatus(t *testing.T) {
	r, src := newRig(t)
	q0, q3, _ := traffic(t, r, src)
	base := startServer(t, src)
	rep, raw := status(t, base)

	if rep.Generation != r.CP.Snapshot().Gen || rep.Generation == 0 {
		t.Errorf("generation %d, want %d", rep.Generation, r.CP.Snapshot().Gen)
	}
	if rt := rep.Runtime; rt == nil || rt.Interface != "xa0" || rt.XDPMode != "native" || len(rt.Queues) != 1 || rt.Queues[0].BindMode != "copy" {
		t.Errorf("runtime %+v", rep.Runtime)
	}
	ct := rep.Conntrack
	if ct == nil || ct.Entries != 10 || ct.Inserts != 10 || ct.Capacity != r.Conntrack().Capacity() ||
		ct.Occupancy != 10/float64(ct.Capacity) {
		t.Errorf("conntrack %+v", ct)
	}
	wantQ := []admin.QueueReport{
		{Queue: 0, RX: 13, TX: 11, Pass: 1},
		{Queue: 3, RX: 4, TX: 3},
	}
	wantQ[0].Drops[dataplane.ReasonNoRule], wantQ[1].Drops[dataplane.ReasonNoRule] = 1, 1
	if !slices.Equal(rep.Queues, wantQ) {
		t.Errorf("queues %+v, want %+v", rep.Queues, wantQ)
	}

	if len(rep.Services) != 2 {
		t.Fatalf("%d services, want 2", len(rep.Services))
	}
	web, dns := rep.Services[0], rep.Services[1]
	if web.Name != "web" || web.Side != "primary" || !slices.Equal(web.Eligible, []string{"b1", "b2"}) || web.Why == "" ||
		web.ForwardedPackets != 11 || web.NewConnections != 10 {
		t.Errorf("web %+v", web)
	}
	var names []string
	for _, b := range web.Backends {
		names = append(names, b.Name)
		want := admin.BackendReport{Name: b.Name, IP: b.IP, Group: "pool-a", Healthy: true, Weight: 1, ReportedWeight: 1000,
			Eligible: true, Ready: true, ForwardedPackets: uint64(q0.backend[b.Name]), ForwardedBytes: uint64(q0.bytes[b.Name]),
			NewConnections: b.NewConnections}
		if b.Name == "f1" {
			want.Group, want.Failover, want.Eligible = "spare", true, false
		}
		if b != want {
			t.Errorf("backend %+v, want %+v", b, want)
		}
	}
	if !slices.Equal(names, []string{"b1", "b2", "f1"}) {
		t.Errorf("web backends %v, want b1 b2 f1 (configuration order)", names)
	}
	if dns.Name != "dns" || len(dns.Backends) != 1 || dns.Backends[0].Name != "10.0.4.1" ||
		dns.Backends[0].ForwardedPackets != uint64(q3.backend["10.0.4.1"]) || dns.ForwardedPackets != 3 {
		t.Errorf("dns %+v", dns)
	}

	// The JSON names themselves (what `xlb status` and scripts read).
	svc := raw["services"].([]any)[0].(map[string]any)
	be := svc["backends"].([]any)[0].(map[string]any)
	q := raw["queues"].([]any)[0].(map[string]any)
	for obj, keys := range map[string][]string{
		"top":     keys(raw),
		"service": keys(svc),
		"backend": keys(be),
		"queue":   keys(q),
		"drops":   keys(q["drops"].(map[string]any)),
	} {
		want := map[string][]string{
			"top":     {"conntrack", "generation", "now_ms", "queues", "reloads", "runtime", "services"},
			"service": {"backends", "drops", "eligible", "fingerprint", "forwarded_bytes", "forwarded_packets", "id", "name", "new_connections", "side", "weighted", "why"},
			"backend": {"draining", "eligible", "failover", "forwarded_bytes", "forwarded_packets", "group", "healthy", "ip", "name",
				"new_connections", "ready", "removed", "reported_weight", "weight"},
			"queue": {"conntrack_evictions", "conntrack_not_recorded", "drops", "pass_packets", "queue", "quic_cid", "rx_packets", "too_big_icmp_sent", "tx_packets"},
			"drops": {"no-rule"},
		}[obj]
		if !slices.Equal(keys, want) {
			t.Errorf("%s JSON fields %v, want %v", obj, keys, want)
		}
	}
}

func keys(m map[string]any) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// TestStatusDrainAndFailover: a backend removed by a reload is listed
// after the current ones, removed and draining with its deadline; the
// failover side and its reason show once the primaries are down.
func TestStatusDrainAndFailover(t *testing.T) {
	r, src := newRig(t)
	base := startServer(t, src)
	r.At(10).Reload(strings.Replace(rigToml, `, { name = "b2", ip = "10.0.1.2" }`, "", 1))
	r.Health("b1", false)
	rep, raw := status(t, base)
	web := rep.Services[0]
	if web.Side != "failover" || !slices.Equal(web.Eligible, []string{"f1"}) {
		t.Errorf("web side %q eligible %v, want failover [f1]", web.Side, web.Eligible)
	}
	if web.Why != r.CP.Snapshot().Services[0].EligibleWhy || web.Why == "" {
		t.Errorf("why %q, want the snapshot's %q", web.Why, r.CP.Snapshot().Services[0].EligibleWhy)
	}
	var names []string
	for _, b := range web.Backends {
		names = append(names, b.Name)
	}
	if !slices.Equal(names, []string{"b1", "f1", "b2"}) {
		t.Fatalf("backends %v, want b1 f1 (current) then b2 (removed)", names)
	}
	b1, b2 := web.Backends[0], web.Backends[2]
	if b1.Healthy || b1.Eligible || b1.Removed {
		t.Errorf("b1 %+v, want unhealthy, not eligible, not removed", b1)
	}
	if !b2.Removed || !b2.Draining || b2.DrainUntilMs != 40000 || b2.Eligible {
		t.Errorf("b2 %+v, want removed, draining until 40000 ms", b2)
	}
	if rep.NowMs != 10000 {
		t.Errorf("now_ms %d, want 10000", rep.NowMs)
	}
	rb2 := raw["services"].([]any)[0].(map[string]any)["backends"].([]any)[2].(map[string]any)
	if rb2["drain_until_ms"] != float64(40000) {
		t.Errorf("JSON drain_until_ms %v", rb2["drain_until_ms"])
	}
}

// TestStatusEmpty: before the first snapshot, with no table and no
// workers, /status is still valid JSON with empty lists.
func TestStatusEmpty(t *testing.T) {
	rep, raw := status(t, startServer(t, &fakeSources{}))
	if rep.Generation != 0 || rep.Conntrack != nil || len(rep.Queues) != 0 || len(rep.Services) != 0 {
		t.Errorf("report %+v", rep)
	}
	if q, ok := raw["queues"].([]any); !ok || len(q) != 0 {
		t.Errorf("queues %v, want []", raw["queues"])
	}
	if s, ok := raw["services"].([]any); !ok || len(s) != 0 {
		t.Errorf("services %v, want []", raw["services"])
	}
}

// TestDropsJSON: drops are written by reason word, zeros left out, and
// read back; an unknown reason is skipped.
func TestDropsJSON(t *testing.T) {
	var d admin.Drops
	d[dataplane.ReasonNoRule], d[dataplane.ReasonNoEligibleBackend] = 5, 1
	b, err := d.MarshalJSON()
	if err != nil || string(b) != `{"no-eligible-backend":1,"no-rule":5}` {
		t.Fatalf("%s %v", b, err)
	}
	var back admin.Drops
	if err := back.UnmarshalJSON([]byte(`{"no-eligible-backend":1,"no-rule":5,"from-the-future":9}`)); err != nil || back != d {
		t.Errorf("read back %v %v, want %v", back, err, d)
	}
	if err := back.UnmarshalJSON([]byte(`[1]`)); err == nil {
		t.Error("an array read as drops")
	}
}

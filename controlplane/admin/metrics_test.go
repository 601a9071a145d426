package admin_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"xlb/controlplane/admin"
	"xlb/controlplane/cptest"
	"xlb/dataplane"
	"xlb/dataplane/craft"
)

// traffic sends, through two workers of one engine (queues 0 and 3):
// queue 0: ten web SYNs from ten clients, one ACK of the first flow, one
// TCP frame to a port no rule has (no-rule), one frame to a non-VIP (pass);
// queue 3: three DNS queries from three clients and one UDP frame to a
// port no rule has. It returns the tallies of queue 0 and queue 3 and of
// the SYNs (the new connections).
func traffic(t *testing.T, r *cptest.Rig, src *rigSources) (q0, q3, fresh sent) {
	t.Helper()
	dc3 := r.M.Engine().NewDecider()
	src.workers = append(src.workers, admin.QueueStats{Queue: 3, Stats: dc3.Stats()})

	var syns []craft.Packet
	for i := range 10 {
		syns = append(syns, cptest.TCP(fmt.Sprintf("100.64.0.%d", i+1), vip, 40000, 80, "S"))
	}
	process(t, r, r.D, &q0, syns...)
	// Every SYN opens a connection; the ACK after it does not.
	fresh.backend = clone(q0.backend)
	process(t, r, r.D, &q0,
		cptest.TCP("100.64.0.1", vip, 40000, 80, "A"),
		cptest.TCP("100.64.0.1", vip, 40000, 81, "S"),
		cptest.TCP("100.64.0.1", "198.51.100.1", 40000, 80, "S"))

	var dns []craft.Packet
	for i := range 3 {
		dns = append(dns, cptest.UDP(fmt.Sprintf("100.64.1.%d", i+1), vip, 5353, 53))
	}
	// UDP without affinity is not tracked (T1, CT3): no new connections.
	process(t, r, dc3, &q3, append(dns, cptest.UDP("100.64.1.1", vip, 5353, 54))...)
	return q0, q3, fresh
}

func clone(m map[string]int) map[string]int {
	c := make(map[string]int, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}

// TestMetrics scrapes /metrics over a real listener after real frames went
// through two workers and checks every xlb_ sample: per-queue counters with
// their queue labels, conntrack, per-service and per-backend counters and
// gauges, summed over the workers.
func TestMetrics(t *testing.T) {
	r, src := newRig(t)
	q0, q3, fresh := traffic(t, r, src)
	// Sanity of the traffic itself, so the expectations below mean what
	// they say.
	if q0.forward != 11 || q0.pass != 1 || q0.drops["no-rule"] != 1 || q3.forward != 3 || q3.drops["no-rule"] != 1 {
		t.Fatalf("verdicts: queue 0 %+v, queue 3 %+v", q0, q3)
	}
	if q0.backend["b1"] == 0 || q0.backend["b2"] == 0 {
		t.Fatalf("web flows all went to one backend (%v); pick other clients", q0.backend)
	}
	base := startServer(t, src)
	got, _ := scrape(t, base)

	want := map[string]float64{
		`xlb_queue_rx_packets_total{queue="0"}`:             13,
		`xlb_queue_tx_packets_total{queue="0"}`:             11,
		`xlb_queue_pass_packets_total{queue="0"}`:           1,
		`xlb_queue_conntrack_evictions_total{queue="0"}`:    0,
		`xlb_queue_conntrack_not_recorded_total{queue="0"}`: 0,
		`xlb_queue_icmp_too_big_sent_total{queue="0"}`:      0,
		`xlb_queue_rx_packets_total{queue="3"}`:             4,
		`xlb_queue_tx_packets_total{queue="3"}`:             3,
		`xlb_queue_pass_packets_total{queue="3"}`:           0,
		`xlb_queue_conntrack_evictions_total{queue="3"}`:    0,
		`xlb_queue_conntrack_not_recorded_total{queue="3"}`: 0,
		`xlb_queue_icmp_too_big_sent_total{queue="3"}`:      0,

		`xlb_conntrack_entries{}`:       10,
		`xlb_conntrack_capacity{}`:      float64(r.Conntrack().Capacity()),
		`xlb_conntrack_inserts_total{}`: 10,
		// The ACK after 100.64.0.1's SYN promotes its half-open entry.
		`xlb_conntrack_updates_total{}`:                            1,
		`xlb_conntrack_evictions_total{}`:                          0,
		`xlb_conntrack_evicted_entries_total{state="half_open"}`:   0,
		`xlb_conntrack_evicted_entries_total{state="established"}`: 0,
		`xlb_conntrack_spills_total{}`:                             0,
		`xlb_conntrack_moves_total{}`:                              0,
		`xlb_conntrack_refused_total{}`:                            0,
		`xlb_conntrack_reclaimed_total{}`:                          0,
		`xlb_conntrack_deletes_total{}`:                            0,
		`xlb_conntrack_faults_total{}`:                             0,
		`xlb_snapshot_generation{}`:                                float64(r.CP.Snapshot().Gen),

		`xlb_service_forwarded_packets_total{service="web"}`:               11,
		`xlb_service_forwarded_bytes_total{service="web"}`:                 float64(q0.bytes["b1"] + q0.bytes["b2"]),
		`xlb_service_new_connections_total{service="web"}`:                 10,
		`xlb_service_side{service="web"}`:                                  0,
		`xlb_service_eligible_backends{service="web"}`:                     2,
		`xlb_service_backends{service="web"}`:                              3,
		`xlb_service_forwarded_packets_total{service="dns"}`:               3,
		`xlb_service_forwarded_bytes_total{service="dns"}`:                 float64(q3.bytes["10.0.4.1"]),
		`xlb_service_new_connections_total{service="dns"}`:                 0,
		`xlb_service_side{service="dns"}`:                                  0,
		`xlb_service_eligible_backends{service="dns"}`:                     1,
		`xlb_service_backends{service="dns"}`:                              1,
		`xlb_reload_success_total{}`:                                       0,
		`xlb_service_failover_switches_total{service="web",to="failover"}`: 0,
		`xlb_service_failover_switches_total{service="web",to="primary"}`:  0,
		`xlb_service_failover_switches_total{service="dns",to="failover"}`: 0,
		`xlb_service_failover_switches_total{service="dns",to="primary"}`:  0,
		`xlb_reload_failure_total{}`:                                       0,

		// The appliance's socket and XDP program counters, as the rig's
		// runtime gives them.
		`xlb_afxdp_drop_packets_total{queue="0",reason="rx_ring_full"}`:     7,
		`xlb_afxdp_drop_packets_total{queue="0",reason="rx_dropped"}`:       3,
		`xlb_afxdp_drop_packets_total{queue="0",reason="rx_invalid_descs"}`: 0,
		`xlb_afxdp_drop_packets_total{queue="0",reason="tx_invalid_descs"}`: 1,
		`xlb_afxdp_drop_packets_total{queue="0",reason="tx_ring_full"}`:     2,
		`xlb_afxdp_fill_ring_empty_total{queue="0"}`:                        5,
		`xlb_xdp_frames_total{verdict="redirected"}`:                        20,
		`xlb_xdp_frames_total{verdict="passed_no_socket"}`:                  4,
		`xlb_xdp_frames_total{verdict="passed_not_vip"}`:                    9,
		`xlb_xdp_frames_total{verdict="passed_ndp"}`:                        1,
		`xlb_xdp_frames_total{verdict="passed_short"}`:                      2,
		`xlb_xdp_frames_total{verdict="passed_malformed_vip"}`:              6,
		`xlb_xdp_frames_total{verdict="passed_vlan_offload"}`:               3,
		`xlb_xdp_retagged_frames_total{}`:                                   5,
	}
	// No service has QUIC-LB: every counter is there, at zero.
	for _, q := range []string{"0", "3"} {
		want[`xlb_quic_cid_routed_total{queue="`+q+`"}`] = 0
		for _, reason := range []string{"not_quic", "client_chosen", "unroutable", "unknown_config", "too_short", "unknown_server_id", "backend_unavailable"} {
			want[`xlb_quic_cid_fallback_total{queue="`+q+`",reason="`+reason+`"}`] = 0
		}
	}
	for r := dataplane.Reason(1); int(r) < dataplane.NumReasons; r++ {
		reason := r.String()
		want[fmt.Sprintf(`xlb_queue_drop_packets_total{queue="0",reason=%q}`, reason)] = float64(q0.drops[reason])
		want[fmt.Sprintf(`xlb_queue_drop_packets_total{queue="3",reason=%q}`, reason)] = float64(q3.drops[reason])
		// A frame no rule matches belongs to no service.
		want[fmt.Sprintf(`xlb_service_drop_packets_total{reason=%q,service="web"}`, reason)] = 0
		want[fmt.Sprintf(`xlb_service_drop_packets_total{reason=%q,service="dns"}`, reason)] = 0
	}
	for _, b := range []struct {
		svc, name, ip string
		eligible      float64
		q             *sent
	}{
		{"web", "b1", "10.0.1.1", 1, &q0},
		{"web", "b2", "10.0.1.2", 1, &q0},
		{"web", "f1", "10.0.3.1", 0, &q0},
		{"dns", "10.0.4.1", "10.0.4.1", 1, &q3},
	} {
		l := fmt.Sprintf(`{backend=%q,ip=%q,service=%q}`, b.name, b.ip, b.svc)
		want["xlb_backend_forwarded_packets_total"+l] = float64(b.q.backend[b.name])
		want["xlb_backend_forwarded_bytes_total"+l] = float64(b.q.bytes[b.name])
		want["xlb_backend_new_connections_total"+l] = float64(fresh.backend[b.name])
		want["xlb_backend_healthy"+l] = 1
		want["xlb_backend_weight"+l] = 1
		want["xlb_backend_eligible"+l] = b.eligible
		want["xlb_backend_ready"+l] = 1
		want["xlb_backend_removed"+l] = 0
		want["xlb_backend_draining"+l] = 0
	}
	// The interface's MTU, the most frame_size holds, changes above it.
	want["xlb_interface_mtu_bytes{}"] = 1500
	want["xlb_interface_max_mtu_bytes{}"] = 3566
	want["xlb_interface_mtu_too_large_total{}"] = 1
	expect(t, got, want)
	for k := range got {
		if _, ok := want[k]; !ok && strings.HasPrefix(k, "xlb_") {
			t.Errorf("unexpected sample %s = %v", k, got[k])
		}
	}

	// The per-queue family exactly as Prometheus reads it, help included.
	exp := `
# HELP xlb_queue_tx_packets_total Frames forwarded to a backend (rewritten and put on the TX ring).
# TYPE xlb_queue_tx_packets_total counter
xlb_queue_tx_packets_total{queue="0"} 11
xlb_queue_tx_packets_total{queue="3"} 3
`
	if err := testutil.ScrapeAndCompare(base+"/metrics", strings.NewReader(exp), "xlb_queue_tx_packets_total"); err != nil {
		t.Error(err)
	}
}

// TestMetricsRemovedAndFailover: after a reload removes b2 (30 s of
// draining) and b1 turns unhealthy, web is on its failover side, b2 is
// removed and draining until the deadline, and no longer once it passed.
func TestMetricsRemovedAndFailover(t *testing.T) {
	r, src := newRig(t)
	base := startServer(t, src)
	r.At(10).Reload(strings.Replace(rigToml, `, { name = "b2", ip = "10.0.1.2" }`, "", 1))
	r.Health("b1", false)
	got, _ := scrape(t, base)
	b1 := `{backend="b1",ip="10.0.1.1",service="web"}`
	b2 := `{backend="b2",ip="10.0.1.2",service="web"}`
	f1 := `{backend="f1",ip="10.0.3.1",service="web"}`
	expect(t, got, map[string]float64{
		`xlb_service_side{service="web"}`:                                  1,
		`xlb_service_failover_switches_total{service="web",to="failover"}`: 1,
		`xlb_service_eligible_backends{service="web"}`:                     1,
		`xlb_service_backends{service="web"}`:                              2,
		"xlb_backend_healthy" + b1:                                         0,
		"xlb_backend_eligible" + b1:                                        0,
		"xlb_backend_eligible" + f1:                                        1,
		"xlb_backend_removed" + b1:                                         0,
		"xlb_backend_removed" + b2:                                         1,
		"xlb_backend_draining" + b2:                                        1,
		"xlb_backend_eligible" + b2:                                        0,
	})
	// 39.999 s: still draining; 40 s: the drain is over, b2 is gone once
	// the control plane publishes.
	r.At(39.999)
	got, _ = scrape(t, base)
	expect(t, got, map[string]float64{"xlb_backend_draining" + b2: 1})
	r.At(40)
	got, _ = scrape(t, base)
	expect(t, got, map[string]float64{"xlb_backend_draining" + b2: 0, "xlb_backend_removed" + b2: 1})
	r.CP.Publish(r.Now)
	if got, _ := scrape(t, base); hasKey(got, "xlb_backend_removed"+b2) {
		t.Error("b2 still exported after its drain ended and a snapshot was published")
	}
}

func hasKey(m map[string]float64, k string) bool { _, ok := m[k]; return ok }

// expect checks that every sample of want is present with its value.
func expect(t *testing.T, got, want map[string]float64) {
	t.Helper()
	for k, v := range want {
		g, ok := got[k]
		if !ok {
			t.Errorf("missing %s", k)
		} else if g != v {
			t.Errorf("%s = %v, want %v", k, g, v)
		}
	}
}

// TestMetricsEmpty: before the first snapshot, with no table and no
// workers, the scrape works and exports only the generation (0).
func TestMetricsEmpty(t *testing.T) {
	base := startServer(t, &fakeSources{})
	got, _ := scrape(t, base)
	for k, v := range got {
		if strings.HasPrefix(k, "xlb_") && k != "xlb_snapshot_generation{}" {
			t.Errorf("unexpected %s = %v", k, v)
		}
	}
	if v, ok := got["xlb_snapshot_generation{}"]; !ok || v != 0 {
		t.Errorf("xlb_snapshot_generation = %v (present %v), want 0", v, ok)
	}
}

// TestMetricsQueueLabels: workers are labelled with the queue numbers the
// caller gave, two workers of one queue are summed, and a nil Stats is
// skipped.
func TestMetricsQueueLabels(t *testing.T) {
	r, src := newRig(t)
	dc2 := r.M.Engine().NewDecider()
	src.workers = []admin.QueueStats{{Queue: 7, Stats: r.D.Stats()}, {Queue: 7, Stats: dc2.Stats()}, {Queue: 2, Stats: nil}}
	var s sent
	process(t, r, r.D, &s, cptest.TCP("100.64.0.1", vip, 40000, 80, "S"))
	process(t, r, dc2, &s, cptest.TCP("100.64.0.2", vip, 40000, 80, "S"), cptest.TCP("100.64.0.3", vip, 40000, 80, "S"))
	got, _ := scrape(t, startServer(t, src))
	var queues []string
	for k := range got {
		if strings.HasPrefix(k, "xlb_queue_rx_packets_total{") {
			queues = append(queues, k)
		}
	}
	if len(queues) != 1 || got[`xlb_queue_rx_packets_total{queue="7"}`] != 3 {
		t.Errorf("queue series %v, rx of queue 7 = %v; want only queue 7 with 3", queues, got[`xlb_queue_rx_packets_total{queue="7"}`])
	}
	if v := got[`xlb_service_forwarded_packets_total{service="web"}`]; v != 3 {
		t.Errorf("web forwarded = %v, want 3 (summed over workers)", v)
	}
}

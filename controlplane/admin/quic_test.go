package admin_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"testing"

	"xlb/controlplane/admin"
	"xlb/controlplane/cptest"
	"xlb/dataplane"
	"xlb/dataplane/craft"
)

// TestMetrics_QUICCID: QUIC packets of a service with QUIC-LB, sent
// through a real worker, are counted by what routing by connection ID made
// of them: routed, and fallbacks by reason (every reason exported, zeros
// too), in /metrics and in /status's queue JSON (zeros left out).
func TestMetrics_QUICCID(t *testing.T) {
	r := cptest.New(t, cptest.QUICText(t, 14))
	src := &rigSources{rig: r, workers: []admin.QueueStats{{Queue: 0, Stats: r.D.Stats()}}, reloads: &admin.ReloadReport{}}
	plain, enc := cptest.QUICConfigs(t, 14)
	var ps []craft.Packet
	add := func(payload []byte) {
		p := cptest.UDP(fmt.Sprintf("198.51.100.%d", len(ps)+1), "203.0.113.10", 5000, 443)
		p.Payload = payload
		ps = append(ps, p)
	}
	add(cptest.QUICShort(cptest.QUICCID(t, plain, "0001", 1)))
	add(cptest.QUICShort(cptest.QUICCID(t, enc, "0002", 2)))
	add(cptest.QUICLong(2, cptest.QUICCID(t, enc, "0003", 3)))
	add(cptest.QUICLong(0, cptest.QUICCID(t, plain, "0001", 4)))
	add(cptest.QUICLong(0, cptest.QUICCID(t, plain, "0002", 5)))
	add(cptest.QUICShort(cptest.QUICCID(t, plain, "0009", 6)))
	var tally sent
	process(t, r, r.D, &tally, ps...)
	if tally.forward != len(ps) {
		t.Fatalf("forwarded %d of %d", tally.forward, len(ps))
	}

	base := startServer(t, src)
	got, _ := scrape(t, base)
	want := map[string]float64{`xlb_quic_cid_routed_total{queue="0"}`: 3}
	for _, o := range []dataplane.CIDOutcome{dataplane.CIDNotQUIC, dataplane.CIDClientChosen, dataplane.CIDUnroutable,
		dataplane.CIDUnknownConfig, dataplane.CIDShort, dataplane.CIDUnknownServerID, dataplane.CIDBackendUnavailable} {
		want[fmt.Sprintf(`xlb_quic_cid_fallback_total{queue="0",reason=%q}`, o)] = 0
	}
	want[`xlb_quic_cid_fallback_total{queue="0",reason="client_chosen"}`] = 2
	want[`xlb_quic_cid_fallback_total{queue="0",reason="unknown_server_id"}`] = 1
	for k, v := range want {
		if g, ok := got[k]; !ok || g != v {
			t.Errorf("%s = %v (present %v), want %v", k, g, ok, v)
		}
	}

	var rep struct {
		Queues []struct {
			QUIC json.RawMessage `json:"quic_cid"`
		} `json:"queues"`
	}
	if err := json.Unmarshal(get(t, base+"/status", 200), &rep); err != nil {
		t.Fatal(err)
	}
	var compact bytes.Buffer
	if len(rep.Queues) != 1 || json.Compact(&compact, rep.Queues[0].QUIC) != nil ||
		compact.String() != `{"routed":3,"fallback":{"client_chosen":2,"unknown_server_id":1}}` {
		t.Fatalf("status queues %s", rep.Queues)
	}
	var back admin.QUICCounts
	if err := json.Unmarshal(rep.Queues[0].QUIC, &back); err != nil || back.Routed() != 3 ||
		back[dataplane.CIDClientChosen] != 2 || back[dataplane.CIDUnknownServerID] != 1 {
		t.Fatalf("read back %v: %v", back, err)
	}
}

package dataplane_test

import (
	"net/netip"
	"testing"

	"xlb/conntrack"
	"xlb/controlplane/cptest"
	"xlb/dataplane"
	"xlb/dataplane/craft"
	"xlb/dataplane/packet"
)

// Engine-level proofs of what a decider hands the flow-sync goroutine
// ([flow_sync]): a record exactly when an entry becomes established and
// this instance's own.

// syncRig is a rig whose decider pushes to a ring, and that ring.
func syncRig(tb testing.TB, svc specSvc, rules ...specRule) (*cptest.Rig, *dataplane.SyncRing) {
	tb.Helper()
	parts := []string{svc.String()}
	for _, r := range rules {
		parts = append(parts, r.String())
	}
	r := cptest.New(tb, specFile(parts...))
	eng := r.M.Engine()
	if eng.SyncRings() != nil {
		tb.Fatal("rings before EnableFlowSync")
	}
	eng.EnableFlowSync(64)
	r.D = eng.NewDecider()
	rings := eng.SyncRings()
	if len(rings) != 1 {
		tb.Fatalf("%d rings after one decider, want 1", len(rings))
	}
	r.Now = 1000
	return r, rings[0]
}

// drain pops everything r holds.
func drain(r *dataplane.SyncRing) []dataplane.SyncRecord {
	var out []dataplane.SyncRecord
	buf := make([]dataplane.SyncRecord, 16)
	for {
		n := r.Pop(buf)
		if n == 0 {
			return out
		}
		out = append(out, buf[:n]...)
	}
}

// wantRecord checks that ring holds exactly one record, of res's flow,
// backend and side at now.
func wantRecord(tb testing.TB, ring *dataplane.SyncRing, what string, res *cptest.Result, now int64) {
	tb.Helper()
	recs := drain(ring)
	if len(recs) != 1 {
		tb.Fatalf("%s: %d records, want 1: %+v", what, len(recs), recs)
	}
	want := dataplane.SyncRecord{Key: res.TrackKey, Backend: res.Backend.Ref, Side: res.Side, Now: now}
	if recs[0] != want {
		tb.Fatalf("%s: record %+v, want %+v", what, recs[0], want)
	}
}

func wantNoRecord(tb testing.TB, ring *dataplane.SyncRing, what string) {
	tb.Helper()
	if recs := drain(ring); len(recs) != 0 {
		tb.Fatalf("%s: %d records, want none: %+v", what, len(recs), recs)
	}
}

var syncWeb = specSvc{Name: "web", Protocol: "TCP", Primary: specAddrs("10.1.0.0", 8)}

var syncWebRule = specRule{Name: "web", VIP: specVIP4, Proto: "TCP", Ports: `ports = ["80"]`, Service: "web"}

// TestFlowSync_ConfirmPushesOnce: a connection's SYN pushes nothing (its
// entry is half-open); the ACK that confirms it pushes one record (key,
// backend, side, the decider's clock); later packets push nothing.
func TestFlowSync_ConfirmPushesOnce(t *testing.T) {
	r, ring := syncRig(t, syncWeb, syncWebRule)
	c := cptest.TCP(specClient4, specVIP4, 40000, 80, "S")
	syn := r.Send(c)
	specForward(t, syn, "SYN")
	wantNoRecord(t, ring, "SYN")
	r.Now += 10
	ack := r.Send(with(c, "A"))
	if ack.Track != dataplane.TrackHit || ack.Backend != syn.Backend {
		t.Fatalf("ACK: track %v backend %v, want a hit on the SYN's", ack.Track, ack.Backend.Name)
	}
	wantRecord(t, ring, "confirming ACK", ack, r.Now)
	for _, f := range []string{"A", "PA", "FA", "R"} {
		r.Now += 10
		specForward(t, r.Send(with(c, f)), f)
		wantNoRecord(t, ring, "established "+f)
	}
	if ring.Pushed() != 1 || ring.Drops() != 0 {
		t.Fatalf("pushed %d drops %d, want 1 and 0", ring.Pushed(), ring.Drops())
	}
}

// with returns p with other TCP flags.
func with(p craft.Packet, flags string) craft.Packet {
	p.Flags = flags
	return p
}

// TestFlowSync_FloodPushesNothing: SYNs of new connections, mid-flow
// packets of flows the table never saw (CT4: recorded on probation) and
// resets on those entries make no record: a flood costs no sync traffic.
func TestFlowSync_FloodPushesNothing(t *testing.T) {
	r, ring := syncRig(t, syncWeb, syncWebRule)
	for i := range 2000 {
		src := specAddr("100.64.0.0", 1+i/100).String()
		specForward(t, r.Send(cptest.TCP(src, specVIP4, uint16(1024+i%100), 80, "S")), "SYN")
		specForward(t, r.Send(cptest.TCP(src, specVIP4, uint16(2024+i%100), 80, "A")), "unknown ACK")
		specForward(t, r.Send(cptest.TCP(src, specVIP4, uint16(1024+i%100), 80, "R")), "RST on the SYN's entry")
		specForward(t, r.Send(cptest.TCP(src, specVIP4, uint16(1024+i%100), 80, "S")), "SYN again")
	}
	wantNoRecord(t, ring, "flood")
	if ring.Drops() != 0 {
		t.Fatalf("%d drops", ring.Drops())
	}
}

// makePeer rewrites res's entry as one a peer's record stored (Peer).
func makePeer(tb testing.TB, r *cptest.Rig, res *cptest.Result) {
	tb.Helper()
	ct := r.Conntrack()
	e, ok := ct.Lookup(&res.TrackKey, r.Now)
	if !ok {
		tb.Fatal("no entry to make a peer's")
	}
	e.Peer = true
	ct.Upsert(&res.TrackKey, e.Value, r.Now)
}

func lookupEntry(tb testing.TB, r *cptest.Rig, k *conntrack.Key) conntrack.Entry {
	tb.Helper()
	e, ok := r.Conntrack().Lookup(k, r.Now)
	if !ok {
		tb.Fatalf("no entry for %v", k)
	}
	return e
}

// TestFlowSync_PeerHitClaims: a packet of a flow whose entry a peer sent
// (Peer) makes it this instance's: the entry is rewritten without Peer,
// on the same backend and side with the service's timeout, and one
// record is pushed. A reset, or an ICMP error quoting the flow, claims
// nothing.
func TestFlowSync_PeerHitClaims(t *testing.T) {
	r, ring := syncRig(t, syncWeb, syncWebRule)
	c := cptest.TCP(specClient4, specVIP4, 40000, 80, "S")
	specForward(t, r.Send(c), "SYN")
	est := r.Send(with(c, "A"))
	drain(ring)
	makePeer(t, r, est)

	r.Now += 10
	rst := r.Send(with(c, "R"))
	if rst.Track != dataplane.TrackHit {
		t.Fatalf("RST: track %v, want hit", rst.Track)
	}
	// The VIP's reply to the client, quoted by a router's ICMP error.
	icmp := craft.Packet{Src: netip.MustParseAddr("192.0.2.99"), Dst: netip.MustParseAddr(specVIP4), Proto: packet.ProtoICMP,
		ICMPType: 3, ICMPCode: 4, Inner: &craft.Packet{Src: netip.MustParseAddr(specVIP4), Dst: netip.MustParseAddr(specClient4),
			Proto: packet.ProtoTCP, SrcPort: 80, DstPort: 40000, Flags: "A"}}
	if res := r.Send(icmp); !res.ICMPSteered || res.Track != dataplane.TrackHit {
		t.Fatalf("ICMP error: steered %v track %v, want a steered hit", res.ICMPSteered, res.Track)
	}
	wantNoRecord(t, ring, "RST and ICMP error on a peer's entry")
	if e := lookupEntry(t, r, &est.TrackKey); !e.Peer {
		t.Fatal("a reset or an ICMP error claimed a peer's entry")
	}

	r.Now += 10
	ack := r.Send(with(c, "A"))
	if ack.Track != dataplane.TrackHit || ack.Backend != est.Backend {
		t.Fatalf("ACK: track %v backend %s, want a hit on %s", ack.Track, ack.Backend.Name, est.Backend.Name)
	}
	wantRecord(t, ring, "ACK on a peer's entry", ack, r.Now)
	e := lookupEntry(t, r, &est.TrackKey)
	if e.Peer || e.HalfOpen || e.Backend != uint32(est.Backend.Ref) || e.IdleSec != est.Service.IdleSec || e.LastUse != r.Now {
		t.Fatalf("entry after the hit %+v, want own, established, backend %d, idle %d, used at %d",
			e, est.Backend.Ref, est.Service.IdleSec, r.Now)
	}
	r.Now += 10
	specForward(t, r.Send(with(c, "A")), "next ACK")
	wantNoRecord(t, ring, "next ACK")
}

// TestFlowSync_SessionSYNClaimsPeer: with session affinity a SYN looks its
// session's entry up (CT2). One that a peer sent becomes this instance's
// (the session's new connection is served here) and is pushed; a SYN on
// the session's own entry pushes nothing.
func TestFlowSync_SessionSYNClaimsPeer(t *testing.T) {
	svc := specSvc{Name: "sess", Protocol: "TCP", Affinity: "CLIENT_IP", Mode: "PER_SESSION", Primary: specAddrs("10.1.0.0", 8)}
	r, ring := syncRig(t, svc, specRule{Name: "sess", VIP: specVIP4, Proto: "TCP", Ports: `ports = ["80"]`, Service: "sess"})
	c := cptest.TCP(specClient4, specVIP4, 40000, 80, "S")
	specForward(t, r.Send(c), "SYN")
	est := r.Send(with(c, "A"))
	if est.TrackKey.Kind != conntrack.Kind2T {
		t.Fatalf("session key %v, want 2T", est.TrackKey)
	}
	wantRecord(t, ring, "session confirmed", est, r.Now)
	r.Now += 10
	if res := r.Send(cptest.TCP(specClient4, specVIP4, 40001, 80, "S")); res.Track != dataplane.TrackHit {
		t.Fatalf("second connection's SYN: track %v, want hit", res.Track)
	}
	wantNoRecord(t, ring, "SYN on an own session")

	makePeer(t, r, est)
	r.Now += 10
	syn := r.Send(cptest.TCP(specClient4, specVIP4, 40002, 80, "S"))
	if syn.Track != dataplane.TrackHit || syn.Backend != est.Backend {
		t.Fatalf("SYN on a peer's session: track %v backend %s, want a hit on %s", syn.Track, syn.Backend.Name, est.Backend.Name)
	}
	wantRecord(t, ring, "SYN on a peer's session", syn, r.Now)
	if e := lookupEntry(t, r, &est.TrackKey); e.Peer || e.HalfOpen {
		t.Fatalf("session entry after the SYN %+v, want own and established", e)
	}
}

// TestFlowSync_ReplacedEstablishedPushes: an established flow whose
// backend went unhealthy (P1: NEVER_PERSIST) is re-selected and its entry
// replaced, established: the new backend is pushed. A new connection's
// SYN that replaces an entry stays half-open and pushes nothing.
func TestFlowSync_ReplacedEstablishedPushes(t *testing.T) {
	svc := syncWeb
	svc.Extra = []string{"  [backend_service.connection_tracking_policy]",
		`  connection_persistence_on_unhealthy_backends = "NEVER_PERSIST"`}
	r, ring := syncRig(t, svc, syncWebRule)
	c := cptest.TCP(specClient4, specVIP4, 40000, 80, "S")
	specForward(t, r.Send(c), "SYN")
	est := r.Send(with(c, "A"))
	drain(ring)

	r.Health(est.Backend.IP.String(), false)
	r.Now += 10
	moved := r.Send(with(c, "A"))
	if moved.Track != dataplane.TrackReplaced || moved.Invalid != "unhealthy" || moved.Backend == est.Backend {
		t.Fatalf("ACK after the backend failed: track %v (%q) on %s, want replaced away from %s",
			moved.Track, moved.Invalid, moved.BackendName(), est.Backend.Name)
	}
	wantRecord(t, ring, "replaced established", moved, r.Now)
	if e := lookupEntry(t, r, &est.TrackKey); e.HalfOpen || e.Backend != uint32(moved.Backend.Ref) {
		t.Fatalf("entry %+v, want established on %d", e, moved.Backend.Ref)
	}

	r.Health(moved.Backend.IP.String(), false)
	r.Now += 10
	if res := r.Send(c); res.Track != dataplane.TrackNew {
		t.Fatalf("SYN: track %v, want new", res.Track)
	}
	wantNoRecord(t, ring, "SYN replacing an entry")
}

// TestFlowSync_Off: a decider made before EnableFlowSync, or after
// EnableFlowSync(0), has no ring and the engine lists none for it.
func TestFlowSync_Off(t *testing.T) {
	r := cptest.New(t, specFile(syncWeb.String(), syncWebRule.String()))
	r.Now = 1000
	c := cptest.TCP(specClient4, specVIP4, 40000, 80, "S")
	specForward(t, r.Send(c), "SYN")
	specForward(t, r.Send(with(c, "A")), "ACK")
	eng := r.M.Engine()
	if eng.SyncRings() != nil {
		t.Fatal("rings without flow sync")
	}
	eng.EnableFlowSync(16)
	specForward(t, r.Send(with(c, "A")), "ACK after EnableFlowSync, old decider")
	if n := len(eng.SyncRings()); n != 0 {
		t.Fatalf("%d rings, none made since", n)
	}
	eng.NewDecider()
	eng.NewDecider()
	if rings := eng.SyncRings(); len(rings) != 2 || rings[0] == rings[1] || rings[0].Len() != 16 {
		t.Fatalf("rings %v, want two of 16", rings)
	}
	eng.EnableFlowSync(0)
	eng.NewDecider()
	if n := len(eng.SyncRings()); n != 2 {
		t.Fatalf("%d rings after EnableFlowSync(0) and a decider, want the 2 made before", n)
	}
}

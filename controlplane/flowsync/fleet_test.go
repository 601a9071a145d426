package flowsync_test

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"

	"xlb/config"
	"xlb/conntrack"
	"xlb/controlplane"
	"xlb/controlplane/cptest"
	"xlb/controlplane/flowsync"
	"xlb/dataplane"
)

// fleetTOML is one TCP service behind a VIP; backends are its endpoints.
func fleetTOML(endpoints ...string) string {
	var eps []string
	for _, e := range endpoints {
		eps = append(eps, fmt.Sprintf("{ name = %q, ip = %q }", e, "10.0.1."+strings.TrimPrefix(e, "b")))
	}
	return `
[[health_check]]
name = "hc"
type = "TCP"
port = 80

[[backend_service]]
name = "web"
protocol = "TCP"
health_checks = ["hc"]

  [[backend_service.backend]]
  group = "pool"
  endpoints = [ ` + strings.Join(eps, ", ") + ` ]

[[forwarding_rule]]
name = "web-tcp"
ip_address = "203.0.113.10"
ip_protocol = "TCP"
ports = ["80"]
backend_service = "web"
`
}

// instance is one fleet member in the test: a rig (control plane and a
// decider with flow sync on) and its syncer on 127.0.0.1.
type instance struct {
	rig *cptest.Rig
	fs  *flowsync.Syncer
}

const fleetNow = 5_000_000 // ms; every instance's clock, fixed for the test

func newInstance(t *testing.T, text string) *instance {
	t.Helper()
	r := cptest.New(t, text)
	r.Now = fleetNow
	eng := r.M.Engine()
	eng.EnableFlowSync(1024)
	r.D = eng.NewDecider()
	c := &config.FlowSync{Listen: netip.MustParseAddrPort("127.0.0.1:0"), Peers: []netip.AddrPort{netip.MustParseAddrPort("127.0.0.1:9")},
		Keys: [][32]byte{{7, 7, 7}}, MaxRecordsPerSec: 100000, PullTimeout: 5 * time.Second, PullOnStart: true}
	adopt := func(bs []flowsync.DrainingBackend) { // as the appliance does
		in := make([]controlplane.DrainingBackend, len(bs))
		for i, b := range bs {
			in[i] = controlplane.DrainingBackend(b)
		}
		r.CP.AdoptDraining(in, fleetNow)
	}
	fs, err := flowsync.New(flowsync.Options{Config: c, Engine: eng, Now: func() int64 { return fleetNow }, Log: zap.NewNop(),
		AdoptDraining: adopt})
	if err != nil {
		t.Fatal(err)
	}
	return &instance{rig: r, fs: fs}
}

// peer makes each instance's peers all the others, and runs their syncers
// until the test ends.
func peer(t *testing.T, ins ...*instance) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	for _, a := range ins {
		var ps []netip.AddrPort
		for _, b := range ins {
			if b != a {
				ps = append(ps, b.fs.Status().Listen)
			}
		}
		a.fs.Reconfigure(&config.FlowSync{Listen: a.fs.Status().Listen, Peers: ps, Keys: [][32]byte{{7, 7, 7}},
			MaxRecordsPerSec: 100000, PullTimeout: 5 * time.Second})
		wg.Go(func() { a.fs.Run(ctx) })
	}
}

// waitEntry waits, bounded, until in's table has a live entry for k.
func waitEntry(t *testing.T, in *instance, k *conntrack.Key) conntrack.Entry {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if e, ok := in.rig.Conntrack().Lookup(k, fleetNow); ok {
			return e
		}
	}
	t.Fatalf("no entry for %v reached the peer within 10 s", k)
	return conntrack.Entry{}
}

// TestFleetSync_CombinedEvent is the combined event in miniature, on real
// engines and control planes: a connection confirmed on instance A is
// shared with B; then a backend is added fleet-wide (Maglev now chooses
// another backend for that connection) and the flow moves to B, which
// has never seen a packet of it: B sends it to A's backend, not to
// Maglev's new choice, and from then on owns the entry (not a peer's
// any more) and tells the others. B lists the backends in another order,
// so its local references differ: records name backends by fleet ID.
func TestFleetSync_CombinedEvent(t *testing.T) {
	before, after := fleetTOML("b1", "b2", "b3"), fleetTOML("b1", "b2", "b3", "b4")
	a := newInstance(t, before)
	b := newInstance(t, fleetTOML("b3", "b1", "b2"))
	peer(t, a, b)
	fresh := cptest.New(t, after) // decides as an instance with no entries would, after the change
	fresh.Now = fleetNow

	// A client port whose backend changes with b4.
	var port uint16
	var first string
	for p := uint16(40000); p < 41000; p++ {
		syn := a.rig.Send(cptest.TCP("198.51.100.7", "203.0.113.10", p, 80, "S"))
		if fresh.Send(cptest.TCP("198.51.100.7", "203.0.113.10", p, 80, "A")).BackendName() != syn.BackendName() {
			port, first = p, syn.BackendName()
			break
		}
	}
	if port == 0 {
		t.Fatal("no client port of 1000 changes backend when b4 is added")
	}
	ack := a.rig.Send(cptest.TCP("198.51.100.7", "203.0.113.10", port, 80, "A"))
	if ack.BackendName() != first || ack.Track != dataplane.TrackHit {
		t.Fatalf("A: the handshake's ACK went to %s (%v), its SYN to %s", ack.BackendName(), ack.Track, first)
	}
	key := ack.TrackKey
	bKey := key
	if e := waitEntry(t, b, &bKey); !e.Peer || e.HalfOpen {
		t.Errorf("B's entry from A's record: %+v, want an established peer entry", e)
	}

	a.rig.Reload(after)
	b.rig.Reload(fleetTOML("b3", "b1", "b4", "b2"))
	moved := b.rig.Send(cptest.TCP("198.51.100.7", "203.0.113.10", port, 80, "A"))
	if moved.BackendName() != first {
		t.Fatalf("the moved flow went to %s on B, want %s (A's; Maglev alone now says %s)", moved.BackendName(), first,
			fresh.Send(cptest.TCP("198.51.100.7", "203.0.113.10", port, 80, "A")).BackendName())
	}
	if e, ok := b.rig.Conntrack().Lookup(&bKey, fleetNow); !ok || e.Peer {
		t.Errorf("B's entry after the flow's packet: %+v (found %v), want B's own", e, ok)
	}
	// B tells the others it owns the flow: A's entry is refreshed, not
	// replaced (same backend).
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if st := a.fs.Status(); len(st.Peers) == 1 && st.Peers[0].RecordsIn > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("A never heard B's record: %+v", a.fs.Status())
		}
	}
	if e, ok := a.rig.Conntrack().Lookup(&key, fleetNow); !ok || e.Peer || a.rig.CP.Snapshot().Backend(dataplane.BackendRef(e.Backend)).Name != first {
		t.Errorf("A's entry after B's record: %+v (found %v), want A's own, on %s", e, ok, first)
	}
}

// TestFleetSync_PullThenForward: an instance that starts with an empty
// table pulls the peers' flows, and a flow of a peer's decides on the
// peer's backend there too, after a backend was added.
func TestFleetSync_PullThenForward(t *testing.T) {
	before, after := fleetTOML("b1", "b2", "b3"), fleetTOML("b1", "b2", "b3", "b4")
	a := newInstance(t, before)
	fresh := cptest.New(t, after)
	fresh.Now = fleetNow
	want := map[uint16]string{}
	for p := uint16(40000); p < 40400; p++ {
		a.rig.Send(cptest.TCP("198.51.100.8", "203.0.113.10", p, 80, "S"))
		r := a.rig.Send(cptest.TCP("198.51.100.8", "203.0.113.10", p, 80, "A"))
		want[p] = r.BackendName()
	}
	a.rig.Reload(after)
	// A sent these records long before j existed: they are not in A's
	// rings any more, so j has only the pull to learn them from.
	for _, r := range a.rig.M.Engine().SyncRings() {
		for buf := make([]dataplane.SyncRecord, 64); r.Pop(buf) > 0; {
		}
	}
	j := newInstance(t, fleetTOML("b4", "b3", "b2", "b1"))
	peer(t, a, j)
	res := j.fs.Pull(t.Context())
	if res.Err != nil || res.Records != len(want) || res.Stored != len(want) {
		t.Fatalf("pull: %+v, want %d records stored", res, len(want))
	}
	changed := 0
	for p, be := range want {
		if fresh.Send(cptest.TCP("198.51.100.8", "203.0.113.10", p, 80, "A")).BackendName() != be {
			changed++
		}
		if got := j.rig.Send(cptest.TCP("198.51.100.8", "203.0.113.10", p, 80, "A")).BackendName(); got != be {
			t.Errorf("port %d: the joining instance sent it to %s, want %s", p, got, be)
		}
	}
	if changed == 0 {
		t.Error("adding b4 changed no flow's Maglev choice: the test proves nothing")
	}
	t.Logf("%d flows pulled in %v; %d of them would have changed backend without", res.Records, res.Took, changed)
}

// TestFleetSync_PullDrainingBackend: a backend removed fleet-wide with
// connection draining still carries its flows on A; J joins with a
// configuration that no longer has it and pulls: J adopts it as draining
// (never selected), so its flows resolve and J forwards them to it.
func TestFleetSync_PullDrainingBackend(t *testing.T) {
	draining := func(text string) string {
		return strings.Replace(text, `health_checks = ["hc"]`, "health_checks = [\"hc\"]\nconnection_draining_timeout_sec = 600", 1)
	}
	a := newInstance(t, draining(fleetTOML("b1", "b2", "b3")))
	onB2 := map[uint16]bool{}
	for p := uint16(40000); p < 40300; p++ {
		a.rig.Send(cptest.TCP("198.51.100.9", "203.0.113.10", p, 80, "S"))
		if a.rig.Send(cptest.TCP("198.51.100.9", "203.0.113.10", p, 80, "A")).BackendName() == "b2" {
			onB2[p] = true
		}
	}
	if len(onB2) == 0 {
		t.Fatal("no flow on b2: the test proves nothing")
	}
	a.rig.Reload(draining(fleetTOML("b1", "b3")))
	for _, r := range a.rig.M.Engine().SyncRings() { // j learns them by the pull only
		for buf := make([]dataplane.SyncRecord, 64); r.Pop(buf) > 0; {
		}
	}
	j := newInstance(t, draining(fleetTOML("b3", "b1")))
	peer(t, a, j)
	res := j.fs.Pull(t.Context())
	if res.Err != nil || res.Records != 300 || res.Stored != 300 {
		t.Fatalf("pull: %+v, want 300 records stored (b2's %d among them)", res, len(onB2))
	}
	bs := j.rig.CP.Snapshot().BackendByName("b2")
	if len(bs) != 1 || !bs[0].Removed || bs[0].DrainUntil != fleetNow+600_000 {
		t.Fatalf("b2 on J: %+v, want one, removed, draining until %d", bs, fleetNow+600_000)
	}
	for p := uint16(40000); p < 40300; p++ {
		got := j.rig.Send(cptest.TCP("198.51.100.9", "203.0.113.10", p, 80, "A"))
		if onB2[p] && (got.Verdict != dataplane.VerdictForward || got.BackendName() != "b2") {
			t.Errorf("port %d: J decided %v to %q (invalid %q), want forward to b2", p, got.Verdict, got.BackendName(), got.Invalid)
		}
		if !onB2[p] && got.BackendName() == "b2" {
			t.Errorf("port %d: J sent a flow of another backend to b2", p)
		}
	}
	// New connections never go to it.
	for p := uint16(50000); p < 50300; p++ {
		if got := j.rig.Send(cptest.TCP("198.51.100.9", "203.0.113.10", p, 80, "S")).BackendName(); got == "b2" {
			t.Fatalf("a new connection went to the draining b2")
		}
	}
}

package dataplane_test

import (
	"net/netip"
	"strings"
	"testing"

	"xlb/conntrack"
	"xlb/controlplane/cptest"
	"xlb/dataplane"
	"xlb/dataplane/craft"
	"xlb/dataplane/packet"
)

// statsFrames are frames of every verdict: new, established, untracked,
// encapsulated, steered, dropped for several reasons, passed.
func statsFrames(tb testing.TB) [][]byte {
	tb.Helper()
	c4, c6 := netip.MustParseAddr("100.64.0.1"), netip.MustParseAddr("2001:db8:c::1")
	var ps []craft.Packet
	for i := range 8 {
		src := netip.AddrFrom4([4]byte{100, 64, 1, byte(i)})
		for _, vip := range []netip.Addr{benchVIPWeb4, benchVIPIPIP, benchVIPGUE4, benchVIPGUE6} {
			ps = append(ps, craft.Packet{Src: src, Dst: vip, Proto: packet.ProtoTCP, SrcPort: 40000, DstPort: 80, Flags: "S"},
				craft.Packet{Src: src, Dst: vip, Proto: packet.ProtoTCP, SrcPort: 40000, DstPort: 80, Flags: "A"})
		}
		ps = append(ps, craft.Packet{Src: src, Dst: benchVIPWeb4, Proto: packet.ProtoUDP, SrcPort: 40000, DstPort: 53})
	}
	ps = append(ps,
		craft.Packet{Src: c6, Dst: benchVIPWeb6, Proto: packet.ProtoTCP, SrcPort: 40000, DstPort: 80, Flags: "S"},
		craft.Packet{Src: c6, Dst: benchVIPWeb6, Proto: packet.ProtoTCP, SrcPort: 40000, DstPort: 80, Flags: "A"},
		craft.Packet{Src: c4, Dst: benchVIPWeb4, Proto: packet.ProtoESP},
		craft.Packet{Src: c4, Dst: benchVIPWeb4, Proto: packet.ProtoESP},
		craft.Packet{Src: c4, Dst: benchVIPIPIP, Proto: packet.ProtoTCP, SrcPort: 40000, DstPort: 81},                 // no rule
		craft.Packet{Src: netip.MustParseAddr("198.18.0.1"), Dst: benchVIPAllow, Proto: packet.ProtoTCP, DstPort: 80}, // source not allowed
		craft.Packet{Src: c4, Dst: benchNotVIP, Proto: packet.ProtoTCP, SrcPort: 40000, DstPort: 22},                  // pass
	)
	var frames [][]byte
	for i := range ps {
		f, err := craft.Build(&ps[i])
		if err != nil {
			tb.Fatal(err)
		}
		frames = append(frames, f)
	}
	return append(frames, frames[0][:40]) // malformed VIP frame
}

// statsWant are counters computed from decisions.
type statsWant struct {
	pass, forward uint64
	drops         [dataplane.NumReasons]uint64
	svcForward    map[uint16][3]uint64 // forward, bytes, new connections
	svcDrops      map[uint16][dataplane.NumReasons]uint64
	beForward     map[dataplane.BackendRef][3]uint64
}

func (w *statsWant) add(d *dataplane.Decision, length int) {
	isNew := uint64(0)
	if d.Track == dataplane.TrackNew || d.Track == dataplane.TrackReplaced {
		isNew = 1
	}
	switch d.Verdict {
	case dataplane.VerdictPass:
		w.pass++
	case dataplane.VerdictDrop:
		w.drops[d.Reason]++
		if d.Service != nil {
			c := w.svcDrops[d.Service.ID]
			c[d.Reason]++
			w.svcDrops[d.Service.ID] = c
		}
	case dataplane.VerdictForward:
		w.forward++
		c := w.svcForward[d.Service.ID]
		w.svcForward[d.Service.ID] = [3]uint64{c[0] + 1, c[1] + uint64(length), c[2] + isNew}
		b := w.beForward[d.Backend.Ref]
		w.beForward[d.Backend.Ref] = [3]uint64{b[0] + 1, b[1] + uint64(length), b[2] + isNew}
	}
}

func (w *statsWant) check(tb testing.TB, what string, s *dataplane.Stats) {
	tb.Helper()
	if s.Pass.Load() != w.pass || s.Forward.Load() != w.forward {
		tb.Errorf("%s: pass %d forward %d, want %d %d", what, s.Pass.Load(), s.Forward.Load(), w.pass, w.forward)
	}
	for r := range w.drops {
		if got := s.Drops[r].Load(); got != w.drops[r] {
			tb.Errorf("%s: drops %q %d, want %d", what, dataplane.Reason(r), got, w.drops[r])
		}
	}
	for id, c := range w.svcForward {
		sc := s.Service(id)
		if got := [3]uint64{sc.Forward.Load(), sc.ForwardBytes.Load(), sc.NewConnections.Load()}; got != c {
			tb.Errorf("%s: service %d forward/bytes/new %v, want %v", what, id, got, c)
		}
	}
	for id, c := range w.svcDrops {
		sc := s.Service(id)
		for r := range c {
			if got := sc.Drops[r].Load(); got != c[r] {
				tb.Errorf("%s: service %d drops %q %d, want %d", what, id, dataplane.Reason(r), got, c[r])
			}
		}
	}
	for ref, c := range w.beForward {
		bc := s.Backend(ref)
		if bc == nil {
			tb.Errorf("%s: no counters for backend %#x", what, uint32(ref))
			continue
		}
		if got := [3]uint64{bc.Forward.Load(), bc.ForwardBytes.Load(), bc.NewConnections.Load()}; got != c {
			tb.Errorf("%s: backend %#x forward/bytes/new %v, want %v", what, uint32(ref), got, c)
		}
	}
}

// TestStats_BatchCountsEqualFrameCounts: counters that a batch of Process
// leaves are those of its frames' decisions one by one, per verdict, drop
// reason, service and backend; and Decide's counters are up to date when it
// returns.
func TestStats_BatchCountsEqualFrameCounts(t *testing.T) {
	frames := statsFrames(t)
	want := &statsWant{svcForward: map[uint16][3]uint64{}, svcDrops: map[uint16][dataplane.NumReasons]uint64{},
		beForward: map[dataplane.BackendRef][3]uint64{}}

	// One frame at a time, on one engine.
	engA, _ := benchEngine(t, conntrack.MinCapacity)
	dcA := engA.NewDecider()
	for _, f := range frames {
		buf := make([]byte, dataplane.Headroom+len(f)+dataplane.Headroom)
		copy(buf[dataplane.Headroom:], f)
		fr := dataplane.Frame{Buf: buf, Off: dataplane.Headroom, Len: len(f)}
		d := dcA.Decide(&fr, benchClock())
		want.add(&d, fr.Len) // bytes as sent, encapsulation included
		// Decide's counters are current when it returns.
		if got := dcA.Stats().Pass.Load() + dcA.Stats().Forward.Load(); got != want.pass+want.forward {
			t.Fatalf("after Decide: pass+forward %d, want %d", got, want.pass+want.forward)
		}
	}
	if want.pass == 0 || want.forward == 0 || want.drops[dataplane.ReasonMalformed] == 0 ||
		want.drops[dataplane.ReasonNoRule] == 0 || want.drops[dataplane.ReasonSourceNotAllowed] == 0 {
		t.Fatalf("frames do not cover every verdict: %+v", want)
	}
	want.check(t, "Decide", dcA.Stats())

	// The same frames as batches of up to 64, on a twin engine: the same
	// decisions (same configuration, fresh table), counted per batch.
	engB, _ := benchEngine(t, conntrack.MinCapacity)
	dcB := engB.NewDecider()
	for start := 0; start < len(frames); start += benchBatch {
		var batch []dataplane.Frame
		for _, f := range frames[start:min(start+benchBatch, len(frames))] {
			buf := make([]byte, dataplane.Headroom+len(f)+dataplane.Headroom)
			copy(buf[dataplane.Headroom:], f)
			batch = append(batch, dataplane.Frame{Buf: buf, Off: dataplane.Headroom, Len: len(f)})
		}
		dcB.Process(batch, benchClock())
	}
	want.check(t, "Process", dcB.Stats())
}

// TestStats_SlotReuseStartsFromZero: when a backend's slot passes to a new
// backend (M5 removal, then an addition), the new backend's counters start
// at zero and the old backend's are no longer reported.
func TestStats_SlotReuseStartsFromZero(t *testing.T) {
	// One TCP service on 203.0.113.10:80; eps are its endpoints.
	tmpl := cptest.Testdata(t, "stats_slot_reuse.toml")
	cfg := func(eps string) string { return strings.Replace(tmpl, "[ENDPOINTS]", "["+eps+"]", 1) }
	r := cptest.New(t, cfg(`{ name = "a", ip = "10.0.0.1" }`))
	send := func(n int) *cptest.Result {
		var res *cptest.Result
		for i := range n {
			res = r.Send(cptest.TCP("100.64.0.1", "203.0.113.10", uint16(40000+i), 80, "S"))
		}
		return res
	}
	a := send(3).Backend
	if bc := r.D.Stats().Backend(a.Ref); bc == nil || bc.Forward.Load() != 3 || bc.NewConnections.Load() != 3 {
		t.Fatalf("backend a: counters %+v, want 3 forwarded, 3 new", bc)
	}
	// Remove a (draining 0: its slot is free at once), then add b.
	r.At(1).Reload(cfg(`{ name = "p", ip = "10.0.0.2" }`))
	r.At(2).Reload(cfg(`{ name = "b", ip = "10.0.0.3" }`))
	b := send(2).Backend
	if b.Name != "b" || b.Ref.Slot() != a.Ref.Slot() || b.Ref == a.Ref {
		t.Fatalf("precondition: b (%s, ref %#x) should take a's slot with a new generation (a: %#x)", b.Name, uint32(b.Ref), uint32(a.Ref))
	}
	if bc := r.D.Stats().Backend(b.Ref); bc == nil || bc.Forward.Load() != 2 || bc.NewConnections.Load() != 2 {
		t.Fatalf("backend b: counters %+v, want 2 forwarded, 2 new (a's 3 not carried over)", bc)
	}
	if bc := r.D.Stats().Backend(a.Ref); bc != nil {
		t.Fatalf("backend a: still has counters %+v after its slot changed hands", bc)
	}
}

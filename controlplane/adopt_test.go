package controlplane_test

import (
	"net/netip"
	"testing"
	"time"

	"xlb/conntrack"
	"xlb/controlplane"
	"xlb/controlplane/cptest"
	"xlb/dataplane"
	"xlb/dataplane/craft"
)

// TestAdoptDraining: a joiner whose configuration lacks a backend its peer
// drains adopts it as draining; the flows the peer hands over (merged as
// peer entries naming it) keep going to it until the drain ends, then
// start anew; a reload that configures it again takes the adopted slot
// over, its flows kept.
func TestAdoptDraining(t *testing.T) {
	base := svc{drainingSec: 5, groups: []group{{name: "a", backends: []string{"b1", "b2"}}, {name: "b", backends: []string{"b3"}}}}
	without := base
	without.groups = []group{{name: "a", backends: []string{"b1"}}, {name: "b", backends: []string{"b3"}}}
	b2 := controlplane.DrainingBackend{Service: "web", Name: "b2", IP: netip.MustParseAddr(addrOf(t, "b2")),
		Group: "a", DrainLeft: 5 * time.Second}

	// join: J adopts b2 and takes over what the peer (a rig that had b2)
	// tracked, as a flow sync pull would.
	join := func(t *testing.T) (*cptest.Rig, []craft.Packet, []string) {
		peer := base.rig(t)
		conns, was := m5Conns(peer, 21, 300)
		r := without.rig(t).At(10)
		skipped := []controlplane.DrainingBackend{
			{Service: "web", Name: "b1", IP: netip.MustParseAddr(addrOf(t, "b1")), Group: "a", DrainLeft: time.Second},
			{Service: "gone", Name: "x", IP: netip.MustParseAddr("10.9.9.9"), DrainLeft: time.Second},
		}
		if n := r.CP.AdoptDraining(append(skipped, b2, b2), r.Now); n != 1 {
			t.Fatalf("adopted %d, want 1 (b2 once; b1 is configured, service gone is not)", n)
		}
		b := backendNamed(r, "b2")
		if !b.Removed || b.DrainUntil != r.Now+5000 || b.FleetID != dataplane.FleetID("web", b2.IP) {
			t.Fatalf("adopted b2: removed %v drain until %d fleet ID %x, want removed until %d, %x",
				b.Removed, b.DrainUntil, b.FleetID, r.Now+5000, dataplane.FleetID("web", b2.IP))
		}
		if got := eligible(r, "web"); len(got) != 2 || got[0] != "b1" || got[1] != "b3" {
			t.Fatalf("eligible %v, want [b1 b3]: an adopted backend is never selected", got)
		}
		handOver(t, peer, r)
		return r, conns, was
	}

	t.Run("flows go on, then end with the drain", func(t *testing.T) {
		r, conns, was := join(t)
		r.Now += 1000
		n := 0
		for i, c := range conns {
			if was[i] != "b2" {
				continue
			}
			n++
			if res := r.Send(with(c, "A")); res.Verdict != dataplane.VerdictForward || res.BackendName() != "b2" {
				t.Errorf("mid-flow packet of a flow on b2: %v to %q (invalid %q), want forward to b2",
					res.Verdict, res.BackendName(), res.Invalid)
			}
		}
		if n == 0 {
			t.Fatal("no flow was on b2; the test proves nothing")
		}
		r.Now += 5000 // the drain is over
		r.CP.Publish(r.Now)
		if bs := r.CP.Snapshot().BackendByName("b2"); len(bs) != 0 {
			t.Fatalf("b2 still in the snapshot after its drain ended")
		}
		checkRestarted(t, r, conns, was, "b2")
	})

	t.Run("a reload that adds it back takes it over", func(t *testing.T) {
		r, conns, was := join(t)
		ref := backendNamed(r, "b2").Ref
		r.Now += 1000
		r.Reload(base.text(t))
		b := backendNamed(r, "b2")
		if b.Removed || b.Ref != ref {
			t.Fatalf("b2 after the reload: removed %v ref %v, want current with the adopted ref %v", b.Removed, b.Ref, ref)
		}
		r.Now += 10_000 // past the adopted drain: it no longer drains
		for i, c := range conns {
			if was[i] == "b2" {
				expect(t, "flow of b2, configured again", r.Send(with(c, "A")), dataplane.TrackHit, "b2", "")
			}
		}
	})
}

// handOver merges from's established entries into to's table as peer
// entries, translated by service name and backend address (what flow
// sync's fleet IDs do).
func handOver(t *testing.T, from, to *cptest.Rig) {
	t.Helper()
	fs, ts := from.CP.Snapshot(), to.CP.Snapshot()
	tbl := to.Conntrack()
	n := 0
	from.Conntrack().RangeBuckets(0, from.Conntrack().Buckets(), from.Now, func(k conntrack.Key, e conntrack.Entry) bool {
		b := fs.Backend(dataplane.BackendRef(e.Backend))
		if b == nil {
			return true
		}
		var local *dataplane.Backend
		for _, lb := range ts.Backends {
			if lb != nil && lb.FleetID == b.FleetID {
				local = lb
			}
		}
		if local == nil {
			t.Fatalf("backend %s of the peer unknown here", b.Name)
		}
		k.Service = local.Service
		v := conntrack.Value{Backend: uint32(local.Ref), Side: e.Side, IdleSec: ts.Service(local.Service).IdleSec, Peer: true}
		if r := tbl.Merge(&k, v, to.Now, to.Now); r != conntrack.MergeStored {
			t.Fatalf("merge: %v", r)
		}
		n++
		return true
	})
	if n == 0 {
		t.Fatal("nothing handed over")
	}
}

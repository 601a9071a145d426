package controlplane_test

import (
	"testing"

	"xlb/controlplane/cptest"
	"xlb/dataplane"
	"xlb/dataplane/craft"
)

// TestM5_EntriesStayRemovedAfterDrainEnds: once a removed backend's draining
// is over its entries are gone (M5), even when no packet arrived in between
// and the backend comes back — by Undrain or by a reload that re-adds it.
// Its flows then start anew (track "replaced"), never silently resumed.
func TestM5_EntriesStayRemovedAfterDrainEnds(t *testing.T) {
	base := svc{groups: []group{{name: "a", backends: []string{"b1", "b2"}}, {name: "b", backends: []string{"b3"}}}}
	without := svc{groups: []group{{name: "a", backends: []string{"b1"}}, {name: "b", backends: []string{"b3"}}}}
	for _, draining := range []int{0, 5} {
		base.drainingSec, without.drainingSec = draining, draining
		t.Run("undrain", func(t *testing.T) {
			r := base.rig(t)
			conns, was := m5Conns(r, 11, 300)
			r.At(10)
			if _, err := r.CP.Drain("b2", r.Now); err != nil {
				t.Fatal(err)
			}
			r.Now = int64(10_000 + draining*1000) // draining over, no packet meanwhile
			if _, err := r.CP.Undrain("b2", r.Now); err != nil {
				t.Fatal(err)
			}
			checkRestarted(t, r, conns, was, "b2")
		})
		t.Run("re-added by reload", func(t *testing.T) {
			r := base.rig(t)
			conns, was := m5Conns(r, 12, 300)
			r.At(10)
			r.Reload(without.text(t))
			r.Now = int64(10_000 + draining*1000)
			r.Reload(base.text(t))
			checkRestarted(t, r, conns, was, "b2")
		})
	}
}

// checkRestarted: flows of gone start anew (replaced, invalid "removed"),
// every other flow keeps its backend.
func checkRestarted(t *testing.T, r *cptest.Rig, conns []craft.Packet, was []string, gone string) {
	t.Helper()
	n := 0
	for i, c := range conns {
		res := r.Send(with(c, "A"))
		if was[i] != gone {
			expect(t, "flow of another backend", res, dataplane.TrackHit, was[i], "")
			continue
		}
		n++
		if res.Verdict != dataplane.VerdictForward || res.Track != dataplane.TrackReplaced || res.Invalid != "removed" {
			t.Errorf("flow of %s after its drain ended: %v %v (invalid %q), want forward replaced (removed)",
				gone, res.Verdict, res.Track, res.Invalid)
		}
	}
	if n == 0 {
		t.Fatalf("no flow was on %s; the test proves nothing", gone)
	}
}

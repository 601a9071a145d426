package controlplane_test

import (
	"testing"

	"xlb/controlplane/cptest"
	"xlb/dataplane"
)

// TestFailoverSwitchesCounted: a switch to failover and the return to
// primary are each counted once; republishing without a side change
// (a health change on the failover side, a reload) counts nothing.
func TestFailoverSwitchesCounted(t *testing.T) {
	r := cptest.New(t, groupsText(t, 2, 2))
	want := func(step string, toFailover, toPrimary uint64, side dataplane.Side) {
		t.Helper()
		if got := r.CP.FailoverSwitches()["web"]; got != [2]uint64{toFailover, toPrimary} {
			t.Errorf("%s: switches %v, want [%d %d]", step, got, toFailover, toPrimary)
		}
		if got := service(r, "web").Side; got != side {
			t.Errorf("%s: side %v, want %v", step, got, side)
		}
	}
	want("start", 0, 0, dataplane.SidePrimary)
	r.Health("p1", false)
	r.Health("p2", false)
	want("primaries down", 1, 0, dataplane.SideFailover)
	r.Health("f1", false) // a new snapshot, same side
	r.Health("f1", true)
	want("failover flap", 1, 0, dataplane.SideFailover)
	r.Health("p1", true)
	r.Health("p2", true)
	want("primaries back", 1, 1, dataplane.SidePrimary)
	r.Reload(groupsText(t, 2, 2))
	r.Health("p2", true)
	want("republished", 1, 1, dataplane.SidePrimary)
}

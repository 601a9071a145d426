package controlplane_test

import (
	"net/netip"
	"strings"
	"testing"

	"xlb/controlplane"
	"xlb/controlplane/cptest"
	"xlb/dataplane"
)

// fleetIDs maps each backend of cp's snapshot, by service name and IP, to
// its fleet ID and its local ref.
func fleetIDs(t *testing.T, cp *controlplane.ControlPlane) map[string]*dataplane.Backend {
	t.Helper()
	snap := cp.Snapshot()
	out := map[string]*dataplane.Backend{}
	for _, b := range snap.Backends {
		if b == nil {
			continue
		}
		s := snap.Service(b.Service)
		if s == nil {
			t.Fatalf("backend %s names service %d, not in the snapshot", b.Name, b.Service)
		}
		out[s.Name+" "+b.IP.String()] = b
	}
	return out
}

// TestFleetID_SameAcrossInstancesAndReloads ([flow_sync]): two control
// planes of the same configuration give each backend the same fleet ID,
// FleetID(service name, IP), although their local refs differ: one was
// built from the final configuration, the other from an older one that a
// reload then changed (a backend inserted before the others, slots taken
// in another order). The same address in two services is two backends.
func TestFleetID_SameAcrossInstancesAndReloads(t *testing.T) {
	web := svc{name: "web", groups: primaries("b1", "b2", "b3")}
	// api's n2 has b2's address (names are unique, addresses need not be).
	sameIP := func(text string) string {
		return strings.Replace(text, `ip = "`+addrOf(t, "n2")+`"`, `ip = "`+addrOf(t, "b2")+`"`, 1)
	}
	api := svc{name: "api", vip: "203.0.113.11", groups: primaries("n2", "n4")}
	final := sameIP(configText(t, web, api))

	a, err := controlplane.New(cptest.Config(t, final), dataplane.NewEngine(nil), controlplane.Options{InitialHealthy: true}, 0)
	if err != nil {
		t.Fatal(err)
	}
	older := sameIP(configText(t, svc{name: "api", vip: "203.0.113.11", groups: primaries("n4")},
		svc{name: "web", groups: primaries("b3", "b2")}))
	b, err := controlplane.New(cptest.Config(t, older), dataplane.NewEngine(nil), controlplane.Options{InitialHealthy: true}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Apply(cptest.Config(t, final), 1); err != nil {
		t.Fatal(err)
	}

	ia, ib := fleetIDs(t, a), fleetIDs(t, b)
	if len(ia) != 5 || len(ib) != 5 {
		t.Fatalf("%d and %d backends, want 5 each", len(ia), len(ib))
	}
	refsDiffer := false
	for name, ba := range ia {
		bb := ib[name]
		if bb == nil {
			t.Fatalf("backend %s missing from the reloaded control plane", name)
		}
		svcName := a.Snapshot().Service(ba.Service).Name
		if want := dataplane.FleetID(svcName, ba.IP); ba.FleetID != want || bb.FleetID != want {
			t.Errorf("%s: fleet IDs %#x and %#x, want FleetID(%q, %v) = %#x", name, ba.FleetID, bb.FleetID, svcName, ba.IP, want)
		}
		refsDiffer = refsDiffer || ba.Ref != bb.Ref
	}
	if !refsDiffer {
		t.Fatal("every local ref is the same in both: the test shows nothing about the translation")
	}
	b2 := netip.MustParseAddr(addrOf(t, "b2"))
	if ia["web "+b2.String()].FleetID == ia["api "+b2.String()].FleetID {
		t.Error("one address in two services has one fleet ID")
	}
}

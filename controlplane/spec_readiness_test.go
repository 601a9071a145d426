package controlplane_test

import (
	"slices"
	"sync/atomic"
	"testing"

	"xlb/config"
	"xlb/conntrack"
	"xlb/controlplane"
	"xlb/controlplane/cptest"
	"xlb/controlplane/sim"
	"xlb/dataplane"
)

// TestE1S5_UnresolvedBackendStaysEligible: a healthy backend whose MAC is
// not known yet (a backend a reload just added, before the resolver has
// it) is in the eligible set all the same, with the same table and
// fingerprint as on an instance that knows every MAC: eligibility follows
// health and weights only (E1), so instances with the same health build
// the same tables (S5). A new connection Maglev gives it is dropped with
// the reason backend-not-ready (what the drop counters count); once the
// MAC is known the same client's SYN goes to it.
func TestE1S5_UnresolvedBackendStaysEligible(t *testing.T) {
	s := svc{groups: primaries("b1", "b2", "b3")}
	known := s.rig(t) // every MAC known

	var b2Known atomic.Bool
	cfg := cptest.Config(t, s.text(t))
	ct, err := conntrack.New(cfg.Dataplane.ConntrackCapacity)
	if err != nil {
		t.Fatal(err)
	}
	eng := dataplane.NewEngine(ct)
	cp, err := controlplane.New(cfg, eng, controlplane.Options{
		Local: sim.SimLocal(), InitialHealthy: true, InitialWeight: 1000,
		Resolve: func(ep config.Endpoint, _ config.ForwardingMethod) ([6]byte, bool) {
			if ep.Name == "b2" && !b2Known.Load() {
				return [6]byte{}, false
			}
			return controlplane.SyntheticMAC(ep.IP), true
		},
	}, 0)
	if err != nil {
		t.Fatal(err)
	}
	unresolved := &cptest.Rig{TB: t, CP: cp, D: eng.NewDecider()}

	if got, want := eligible(unresolved, "web"), eligible(known, "web"); !slices.Equal(got, want) || len(got) != 3 {
		t.Fatalf("eligible without b2's MAC: %v, want %v (all three)", got, want)
	}
	if got, want := service(unresolved, "web").Fingerprint, service(known, "web").Fingerprint; got != want {
		t.Errorf("fingerprint without b2's MAC %s, with it %s: want the same table", got, want)
	}
	if backendNamed(unresolved, "b2").MACKnown {
		t.Fatal("b2's MAC is known: the test's resolver was not asked")
	}
	syn := findClient(known, 1, "b2")
	res := unresolved.Send(syn)
	if res.BackendName() != "b2" || res.Verdict != dataplane.VerdictDrop || res.Reason != dataplane.ReasonBackendNotReady {
		t.Errorf("SYN for b2 without its MAC: backend %q verdict %v reason %v, want b2 dropped backend-not-ready",
			res.BackendName(), res.Verdict, res.Reason)
	}
	b2Known.Store(true)
	cp.Publish(unresolved.Now) // what the resolver's OnChange does
	if res := unresolved.Send(syn); res.BackendName() != "b2" || res.Verdict != dataplane.VerdictForward {
		t.Errorf("SYN for b2 once its MAC is known: backend %q verdict %v reason %v, want forwarded to b2",
			res.BackendName(), res.Verdict, res.Reason)
	}
}

package controlplane_test

import (
	"errors"
	"net/netip"
	"testing"

	"xlb/controlplane"
	"xlb/controlplane/cptest"
	"xlb/dataplane"
)

// backendIn returns the snapshot's backend of service at ip.
func backendIn(t *testing.T, cp *controlplane.ControlPlane, service, ip string) *dataplane.Backend {
	t.Helper()
	s := cp.Snapshot()
	for _, svc := range s.Services {
		if svc == nil || svc.Name != service {
			continue
		}
		for _, ref := range svc.Members {
			if b := s.Backend(ref); b != nil && b.IP == netip.MustParseAddr(ip) {
				return b
			}
		}
	}
	t.Fatalf("no backend %s in service %s", ip, service)
	return nil
}

// TestApplyReports_ScopedToTheService: a report for an address two services
// share changes only the service it names; a batch publishes one snapshot,
// and none when it changes nothing; a report naming nothing is an
// ErrUnknownBackend and the rest still apply; weight reports follow W1a.
func TestApplyReports_ScopedToTheService(t *testing.T) {
	cfg := cptest.Config(t, cptest.Testdata(t, "report.toml"))
	cp, err := controlplane.New(cfg, dataplane.NewEngine(nil), controlplane.Options{InitialWeight: 0}, 0)
	if err != nil {
		t.Fatal(err)
	}
	ip1 := netip.MustParseAddr("10.0.0.1")
	gen := cp.Snapshot().Gen
	err = cp.ApplyReports([]controlplane.Report{
		{Service: "a", IP: ip1, HasHealth: true, Healthy: true, HasWeight: true, Weight: 7, WeightState: controlplane.WeightValid},
		{Service: "a", IP: netip.MustParseAddr("10.0.0.2"), HasHealth: true, Healthy: true, HasWeight: true, Weight: 3, WeightState: controlplane.WeightValid},
		{Service: "b", IP: netip.MustParseAddr("10.0.0.2"), HasHealth: true, Healthy: true}, // not in b
	}, 1)
	if !errors.Is(err, controlplane.ErrUnknownBackend) {
		t.Fatalf("a report for 10.0.0.2 in b: %v, want ErrUnknownBackend", err)
	}
	if g := cp.Snapshot().Gen; g != gen+1 {
		t.Errorf("a batch published %d snapshots, want 1", g-gen)
	}
	if a := backendIn(t, cp, "a", "10.0.0.1"); !a.Healthy || a.ReportedWeight != 7 {
		t.Errorf("a's 10.0.0.1: healthy %v weight %d, want the report (healthy, 7)", a.Healthy, a.ReportedWeight)
	}
	if b := backendIn(t, cp, "b", "10.0.0.1"); b.Healthy || b.ReportedWeight != 0 {
		t.Errorf("b's 10.0.0.1: healthy %v weight %d: a report for service a changed it", b.Healthy, b.ReportedWeight)
	}

	// W1a through reports: MISSING puts a on equal weights; a later
	// UNAVAILABLE does not end that; VALID does.
	steps := []struct {
		state    controlplane.WeightState
		fallback bool
	}{
		{controlplane.WeightMissing, true},
		{controlplane.WeightUnavailable, true},
		{controlplane.WeightValid, false},
		{controlplane.WeightUnavailable, false},
	}
	for i, s := range steps {
		if err := cp.ApplyReports([]controlplane.Report{{Service: "a", IP: ip1, HasWeight: true, Weight: 7, WeightState: s.state}}, int64(2+i)); err != nil {
			t.Fatal(err)
		}
		for _, svc := range cp.Snapshot().Services {
			if svc != nil && svc.Name == "a" && svc.WeightFallback != s.fallback {
				t.Errorf("step %d (%v): weight fallback %v, want %v", i, s.state, svc.WeightFallback, s.fallback)
			}
		}
	}
	// Reports that change nothing publish nothing.
	gen = cp.Snapshot().Gen
	same := []controlplane.Report{
		{Service: "a", IP: ip1},
		{Service: "a", IP: ip1, HasHealth: true, Healthy: true, HasWeight: true, Weight: 7, WeightState: controlplane.WeightUnavailable},
	}
	if err := cp.ApplyReports(same, 9); err != nil || cp.Snapshot().Gen != gen {
		t.Errorf("reports that change nothing: %v, generation %d -> %d, want no publish", err, gen, cp.Snapshot().Gen)
	}
}

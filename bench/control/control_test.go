package control

import (
	"context"
	"net/netip"
	"sync"
	"testing"
	"time"

	"xlb/config"
	"xlb/controlplane"
	"xlb/controlplane/appliance"
	"xlb/healthcheck"
)

func TestGen(t *testing.T) {
	g := Gen{VIPs: 300, TableSize: 1021, CheckIntervalSec: 7}
	cfg, err := config.Parse("gen.toml", g.Config())
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Services) != 300 || len(cfg.Rules) != 600 || g.TotalBackends() != 1200 {
		t.Fatalf("%d services, %d rules, %d backends", len(cfg.Services), len(cfg.Rules), g.TotalBackends())
	}
	if s := cfg.Summary(); s != "600 rules on 300 VIPs, 300 services, 1200 backends (1200 primary, 0 failover), 1 health check" {
		t.Errorf("summary %q", s)
	}
	seen := map[netip.Addr]bool{}
	for i, s := range cfg.Services {
		if s.MaglevTableSize != 1021 || len(s.Groups[0].Endpoints) != 4 {
			t.Fatalf("service %d: %+v", i, s)
		}
		for j, ep := range s.Groups[0].Endpoints {
			if ep.IP != g.Backend(i, j) || seen[ep.IP] {
				t.Fatalf("service %d endpoint %d: %v", i, j, ep.IP)
			}
			seen[ep.IP] = true
		}
	}
	if r := cfg.Rules[599]; r.VIP != g.VIP(299) || r.Ports[0].First != 443 || cfg.Services[r.Service].Name != "svc299" {
		t.Errorf("last rule %+v", r)
	}
	if cfg.HealthChecks[0].CheckInterval != 7*time.Second {
		t.Errorf("interval %v", cfg.HealthChecks[0].CheckInterval)
	}
	c := g
	c.Changed = 3
	if c.Backend(2, 3) == g.Backend(2, 3) || c.Backend(3, 3) != g.Backend(3, 3) || c.Backend(2, 2) != g.Backend(2, 2) {
		t.Errorf("Changed: %v %v %v", c.Backend(2, 3), c.Backend(3, 3), c.Backend(2, 2))
	}
}

// TestReloadSteps: a reload of a generated configuration that replaces one
// backend of 1 % of the services keeps every other backend and its
// health, through the (service, address) index of the control plane, and
// hands the checker exactly the new targets.
func TestReloadSteps(t *testing.T) {
	g := Gen{VIPs: 1000, TableSize: 1021}
	cfg, err := config.Parse("gen.toml", g.Config())
	if err != nil {
		t.Fatal(err)
	}
	cp, err := controlplane.New(cfg, nil, controlplane.Options{InitialWeight: 1}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := cp.ApplyReports([]controlplane.Report{{Service: "svc500", IP: g.Backend(500, 1), HasHealth: true, Healthy: true}}, 0); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	hc := healthcheck.New(nil, healthcheck.Options{Probe: func(context.Context, healthcheck.Target) bool { return false }})
	var wg sync.WaitGroup
	wg.Go(func() { _ = hc.Run(ctx) })
	defer wg.Wait()
	defer cancel()
	if err := hc.Set(appliance.HealthTargets(cfg)); err != nil {
		t.Fatal(err)
	}
	vips := &vipSet{}
	steps := appliance.NewReloadSteps(cfg, vips, hc, cp, func() int64 { return 1 })
	changed := g
	changed.Changed, changed.MovedVIPs = 10, 10
	if err := steps.Reload(func() (*config.Config, error) { return config.Parse("gen.toml", changed.Config()) }); err != nil {
		t.Fatal(err)
	}
	if len(vips.m) != 1000 {
		t.Errorf("%d VIPs in the map", len(vips.m))
	}
	for _, i := range []int{0, 9, 10, 999} {
		if _, in := vips.m[changed.VIP(i)]; !in {
			t.Errorf("VIP %d (%v) is not in the map", i, changed.VIP(i))
		}
	}
	if _, in := vips.m[g.VIP(0)]; in || changed.VIP(0) == g.VIP(0) || changed.VIP(10) != g.VIP(10) {
		t.Errorf("VIP 0 did not move: %v, %v", g.VIP(0), changed.VIP(0))
	}
	snap := cp.Snapshot()
	var live, removed int
	for _, b := range snap.Backends {
		switch {
		case b == nil:
		case b.Removed:
			removed++
		default:
			live++
		}
	}
	// No draining timeout: the replaced backends are gone at once (M5).
	if live != 4000 || removed != 0 {
		t.Errorf("%d live backends, %d removed; want 4000 and 0", live, removed)
	}
	for i := range 10 {
		if len(snap.BackendByName(g.Backend(i, 3).String())) != 0 || len(snap.BackendByName(changed.Backend(i, 3).String())) != 1 {
			t.Errorf("service %d: the replaced backend is still there, or its replacement is not", i)
		}
	}
	kept := snap.BackendByName(g.Backend(500, 1).String())
	if len(kept) != 1 || !kept[0].Healthy || kept[0].Removed {
		t.Errorf("kept backend %+v", kept)
	}
	if n := len(hc.Status()); n != 4000 {
		t.Errorf("checker has %d targets", n)
	}
	// The reports of a replaced backend no longer reach anyone.
	if err := cp.ApplyReports([]controlplane.Report{{Service: "svc0", IP: g.Backend(0, 3), HasHealth: true}}, 2); err == nil {
		t.Error("report for a removed backend applied")
	}
}

package appliance

import (
	"net/netip"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"xlb/config"
	"xlb/controlplane"
	"xlb/controlplane/admin"
	"xlb/healthcheck"
)

// ReloadSteps is the reload of a running appliance (X2) without the
// appliance: the steps SIGHUP takes, in the same order and by the same
// code (load and validate, VIP map, health-check targets, control plane,
// stale VIPs), on a VIP map, a checker and a control plane of the caller's,
// with no neighbour resolver and no BGP. `lbbench control` measures
// reloads with it, without root.
type ReloadSteps struct{ r *reloader }

// NewReloadSteps returns the reload steps from cur, the running
// configuration, on vips (the XDP program's VIP map or a stand-in), hc and
// cp; now is the control plane's clock (ms).
func NewReloadSteps(cur *config.Config,
	vips interface{ SetVIPs([]netip.Addr) error },
	hc interface {
		Set([]healthcheck.Target) error
	},
	cp interface {
		Apply(cfg *config.Config, now int64) (controlplane.Diff, error)
	},
	now func() int64) *ReloadSteps {
	_, feeds := healthTargets(cur)
	r := &reloader{vips: vips, neigh: noNeighbours{}, hc: hc, cp: cp,
		feeds: new(atomic.Pointer[map[string][]healthFeed]), now: now, log: zap.NewNop(), cur: cur,
		// The end of a removed rule's drain is no step of the reload: no
		// timer outlives it.
		schedule: func(time.Duration, func()) func() { return func() {} }}
	r.feeds.Store(&feeds)
	return &ReloadSteps{r: r}
}

// Reload applies the configuration load returns, as SIGHUP does; an error
// leaves everything as it was.
func (s *ReloadSteps) Reload(load func() (*config.Config, error)) error {
	return s.r.reload("", load)
}

// ReloadNow is the admin socket's reload (POST /reload, /reload-dry-run)
// of the running configuration's file, by the same code as the
// appliance's: the file asked for must be the running one, it is read
// once it stops changing, one without rules is refused unless allowed;
// it returns what the reload changed or, with req.DryRun, would change.
func (s *ReloadSteps) ReloadNow(req admin.ReloadRequest) ([]string, error) {
	return s.r.reloadNow(req)
}

// HealthTargets are the health-check targets of cfg, one per check and
// backend address, as the appliance probes them.
func HealthTargets(cfg *config.Config) []healthcheck.Target {
	t, _ := healthTargets(cfg)
	return t
}

type noNeighbours struct{}

func (noNeighbours) Want(...*config.Config) {}

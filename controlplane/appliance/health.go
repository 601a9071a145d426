package appliance

import (
	"net/netip"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"xlb/config"
	"xlb/controlplane"
	"xlb/controlplane/admin"
	"xlb/healthcheck"
)

// healthFeed is a backend a health-check target speaks for.
type healthFeed struct {
	service string
	ip      netip.Addr
}

// healthTargets returns one target per health check and backend address
// of cfg, and for each target's key the backends it speaks for. Services
// that probe the same address with the same check share one probe (an
// unnamed endpoint in several services, a backend serving TCP and UDP):
// the backend sees one prober, and the services one verdict. The key, the
// check's name and the address, stays the same across reloads.
func healthTargets(cfg *config.Config) ([]healthcheck.Target, map[string][]healthFeed) {
	n := 0
	for _, s := range cfg.Services {
		for _, g := range s.Groups {
			n += len(g.Endpoints)
		}
	}
	targets := make([]healthcheck.Target, 0, n)
	at := make(map[string]int, n) // key -> index in targets
	feeds := make(map[string][]healthFeed, n)
	// A target's feeds start as one element of flat: one allocation for
	// all instead of one per target (a shared target's grow apart).
	flat := make([]healthFeed, n)
	var buf []byte
	for _, s := range cfg.Services {
		if s.HealthCheck < 0 || s.HealthCheck >= len(cfg.HealthChecks) {
			continue // a validated config has none such
		}
		ck := cfg.HealthChecks[s.HealthCheck]
		for _, g := range s.Groups {
			for _, ep := range g.Endpoints {
				buf = ep.IP.AppendTo(append(append(buf[:0], ck.Name...), '/'))
				f := healthFeed{service: s.Name, ip: ep.IP}
				weighted := s.Locality == config.LocalityWeightedMaglev
				if i, ok := at[string(buf)]; ok {
					key := targets[i].Key
					feeds[key] = append(feeds[key], f)
					targets[i].Weighted = targets[i].Weighted || weighted
					continue
				}
				key := string(buf)
				at[key] = len(targets)
				targets = append(targets, healthcheck.Target{Key: key, Addr: ep.IP, Check: ck, Weighted: weighted})
				flat[0] = f
				feeds[key], flat = flat[:1:1], flat[1:]
			}
		}
	}
	return targets, feeds
}

// healthReports turns a batch of results into the control plane's
// reports: every result, for every backend its target speaks for (the
// control plane publishes only what changed).
func healthReports(rs []healthcheck.Result, feeds map[string][]healthFeed) []controlplane.Report {
	var out []controlplane.Report
	for _, r := range rs {
		state, hasWeight := weightState(r.WeightState)
		for _, f := range feeds[r.Key] {
			out = append(out, controlplane.Report{
				Service: f.service, IP: f.ip,
				HasHealth: true, Healthy: r.Healthy,
				HasWeight: hasWeight, Weight: r.Weight, WeightState: state,
			})
		}
	}
	return out
}

// weightState converts a checker's weight state; a check that reports no
// weight (TCP) gives none.
func weightState(s healthcheck.WeightState) (controlplane.WeightState, bool) {
	switch s {
	case healthcheck.WeightValid:
		return controlplane.WeightValid, true
	case healthcheck.WeightMissing:
		return controlplane.WeightMissing, true
	case healthcheck.WeightInvalid:
		return controlplane.WeightInvalid, true
	case healthcheck.WeightUnavailable:
		return controlplane.WeightUnavailable, true
	}
	return 0, false
}

// reportApplier is the part of the control plane that health results
// change.
type reportApplier interface {
	ApplyReports(rs []controlplane.Report, now int64) error
}

// healthApplier returns the checker's Notify: each batch of results is
// recorded in hm (nil: not recorded) and applied to cp as one change, on
// the data plane's clock, through the feeds of the running configuration
// (a reload replaces them); then round (nil: none) hears of it.
func healthApplier(cp reportApplier, feeds func() map[string][]healthFeed, now func() int64, hm *admin.HealthMetrics, round *firstRound, log *zap.Logger) func([]healthcheck.Result) {
	return func(rs []healthcheck.Result) {
		if hm != nil {
			for _, r := range rs {
				hm.Observe(checkName(r.Key), r.Pass, r.Latency)
			}
		}
		if err := cp.ApplyReports(healthReports(round.hold(rs), feeds()), now()); err != nil {
			log.Warn("health results for unknown backends", zap.Error(err))
		}
		round.results(rs)
	}
}

// checkName is the check's name in a target key (healthTargets: the name,
// "/", the address; an address has no "/").
func checkName(key string) string {
	if i := strings.LastIndexByte(key, '/'); i >= 0 {
		return key[:i]
	}
	return key
}

// firstRound tells when every target the appliance started with has its
// first result, applied: from then on the eligible sets rest on health
// checks rather than on the initial state (what a route announcement
// waits for).
type firstRound struct {
	mu      sync.Mutex
	pending map[string]bool
	done    chan struct{}
	// held are the targets whose backends a previous process left healthy
	// (state_dir): they stay healthy while their probes pass, until the
	// checker's thresholds call them healthy too, so that a restart does
	// not take them out of service for the healthy_threshold's probes.
	// A failed probe ends the hold at once.
	held map[string]bool
}

func newFirstRound(targets []healthcheck.Target) *firstRound {
	r := &firstRound{pending: map[string]bool{}, done: make(chan struct{})}
	for _, t := range targets {
		r.pending[t.Key] = true
	}
	if len(r.pending) == 0 {
		close(r.done)
	}
	return r
}

// results crosses off the targets of rs; nil r does nothing.
func (r *firstRound) results(rs []healthcheck.Result) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.pending == nil {
		return // closed already
	}
	for _, res := range rs {
		delete(r.pending, res.Key)
	}
	if len(r.pending) == 0 {
		r.pending = nil
		close(r.done)
	}
}

// hold returns rs with the verdict of held targets whose probe passed
// kept healthy, and ends the hold of those whose probe failed or whom the
// checker calls healthy. rs itself is not changed; nil r returns rs.
func (r *firstRound) hold(rs []healthcheck.Result) []healthcheck.Result {
	if r == nil {
		return rs
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.held) == 0 {
		return rs
	}
	out, copied := rs, false
	for i, res := range rs {
		if !r.held[res.Key] {
			continue
		}
		if res.Healthy || !res.Pass {
			delete(r.held, res.Key)
			continue
		}
		if !copied {
			out, copied = append([]healthcheck.Result(nil), rs...), true
		}
		out[i].Healthy = true
	}
	return out
}

// holdRestored holds the targets all of whose backends st restored
// healthy (see firstRound.held); nil st holds none.
func (r *firstRound) holdRestored(st *controlplane.State, feeds map[string][]healthFeed) {
	if st == nil {
		return
	}
	healthy := map[healthFeed]bool{}
	for _, b := range st.Backends {
		if b.Healthy && !b.Drained {
			healthy[healthFeed{service: b.Service, ip: b.IP}] = true
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.held = map[string]bool{}
	for key, fs := range feeds {
		all := len(fs) > 0
		for _, f := range fs {
			all = all && healthy[f]
		}
		if all {
			r.held[key] = true
		}
	}
}

// healthStatus reports every target of a checker's status, with the
// services each speaks for.
func healthStatus(st []healthcheck.Status, feeds map[string][]healthFeed) []admin.HealthCheckStatus {
	out := make([]admin.HealthCheckStatus, len(st))
	for i, s := range st {
		hi := admin.HealthCheckStatus{
			Target: s.Key, Check: s.Check.Name, Type: s.Check.Type.String(),
			Address:  netip.AddrPortFrom(s.Addr, uint16(s.Check.Port)).String(),
			Services: []string{}, Healthy: s.Healthy, Probes: s.Probes,
		}
		for _, f := range feeds[s.Key] {
			hi.Services = append(hi.Services, f.service)
		}
		if s.Probes > 0 {
			l := s.Last
			ms := float64(l.Latency) / float64(time.Millisecond)
			hi.Pass, hi.Reason, hi.LatencyMs, hi.At = &l.Pass, l.Reason, &ms, l.Time.UTC().Format(time.RFC3339Nano)
			if l.WeightState != healthcheck.WeightNone {
				hi.Weight, hi.WeightState = &l.Weight, l.WeightState.String()
			}
		}
		out[i] = hi
	}
	return out
}

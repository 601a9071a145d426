package appliance

import (
	"context"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"xlb/config"
	"xlb/controlplane/bgp"
	"xlb/dataplane"
)

// ReasonHealthNotChecked: not every backend has a first health verdict, so
// this instance's eligible sets (and Maglev tables) may still differ from
// its peers'; it does not join the fleet with that partial view.
const ReasonHealthNotChecked = "health not checked yet"

// ReasonTableNotPulled: [flow_sync] pull_on_start, and this instance is
// still fetching the tracked flows from a peer; announcing now would
// bring it flows it knows nothing of (until pull_timeout_sec).
const ReasonTableNotPulled = "flow table not pulled yet"

// announceTick bounds how long a change of eligible sets takes to reach
// the routes: the announcer compares its wish with the speaker's at least
// this often (the speaker sends nothing when they agree).
const announceTick = 100 * time.Millisecond

// drainSettle is how long a node drain (and a SIGTERM) keeps the routes
// with the GRACEFUL_SHUTDOWN community before withdrawing them: the time a
// router takes to act on the community. Never more than
// graceful_shutdown_sec.
const drainSettle = time.Second

// announceState is what decides whether VIPs are announced, apart from
// their eligible sets.
type announceState struct {
	attached bool // XDP attached, every worker running
	checked  bool // every backend has a first health verdict
	pulled   bool // the flow table pulled from a peer, or no pull to wait for
	drained  bool // xlb drain --node
	// gshut: announce with the GRACEFUL_SHUTDOWN community (the first
	// drainSettle of a node drain).
	gshut  bool
	always bool // [bgp] announce = "always"
	// nextHop4 and nextHop6 are the interface's addresses.
	nextHop4, nextHop6 netip.Addr
}

// wantVIPs is the announcement rule (docs/config.md, [bgp]): each VIP of
// the configuration is announced while the data plane forwards it, every
// backend has a health verdict, the node is not drained, and (unless
// announce = "always") a service behind it has a healthy backend in its
// eligible set (E1–E4); otherwise it is withdrawn, with the first reason
// that holds. eligible says that of a VIP (eligibleVIPs).
func wantVIPs(vips []netip.Addr, st announceState, eligible func(netip.Addr) bool) map[netip.Addr]bgp.VIP {
	want := make(map[netip.Addr]bgp.VIP, len(vips))
	for _, vip := range vips {
		nh := st.nextHop4
		if vip.Is6() {
			nh = st.nextHop6
		}
		v := bgp.VIP{NextHop: nh}
		switch {
		case !st.attached:
			v.Reason = bgp.ReasonNotAttached
		case !st.checked:
			v.Reason = ReasonHealthNotChecked
		case !st.pulled:
			v.Reason = ReasonTableNotPulled
		case st.drained && !st.gshut:
			v.Reason = bgp.ReasonNodeDrained
		case !st.always && !eligible(vip):
			v.Reason = bgp.ReasonNoEligible
		default:
			v.Announce, v.GracefulShutdown = true, st.drained && st.gshut
		}
		want[vip] = v
	}
	return want
}

// eligibleVIPs says, for snap, which VIPs have at least one rule whose
// service has a healthy backend in its eligible set. An empty set (E3/E4
// with drop_traffic_if_unhealthy) does not count, nor does the set of
// unhealthy backends that E1–E4 fall back to when none passes its check:
// an instance that can only send new flows to failing backends leaves the
// VIP to the routers' other paths ("when-healthy").
func eligibleVIPs(snap *dataplane.Snapshot) func(netip.Addr) bool {
	return func(vip netip.Addr) bool {
		if snap == nil {
			return false
		}
		a := dataplane.Addr16(vip)
		vr := snap.LookupVIP(&a)
		if vr == nil {
			return false
		}
		for i := range vr.Rules {
			svc := snap.Service(vr.Rules[i].Service)
			if svc == nil {
				continue
			}
			for _, ref := range svc.Eligible {
				if be := snap.Backend(ref); be != nil && be.Healthy {
					return true
				}
			}
		}
		return false
	}
}

// announceDraining adds to want the VIPs that a reload removed and whose
// rules still drain (M5): their tracked flows reach this instance only
// while the route stays, so it stays, with the GRACEFUL_SHUTDOWN community
// (routers prefer any instance that still has the VIP), on the same
// conditions as any VIP but the eligible set (a draining rule takes no new
// connections). Once the drain ends the VIP leaves the snapshot and its
// route is withdrawn.
func announceDraining(want map[netip.Addr]bgp.VIP, snap *dataplane.Snapshot, st announceState) {
	if snap == nil {
		return
	}
	st.always = true
	for _, vr := range snap.Rules {
		if _, ok := want[vr.VIP]; ok || len(vr.Rules) > 0 || len(vr.Draining) == 0 {
			continue
		}
		v := wantVIPs([]netip.Addr{vr.VIP}, st, nil)[vr.VIP]
		if v.Announce {
			v.GracefulShutdown = true
		}
		want[vr.VIP] = v
	}
}

// speaker is what the announcer drives (a *bgp.Speaker).
type speaker interface {
	SetVIPs(map[netip.Addr]bgp.VIP) error
	SetNeighbors([]bgp.Neighbor) error
	GracefulShutdown(ctx context.Context, settle time.Duration) error
	Status() bgp.Status
}

// announcer keeps the speaker's routes in step with what this instance can
// forward: it applies wantVIPs every announceTick and at once when kicked
// (a node drain, a reload). It runs from Ready until the appliance starts
// shutting down.
type announcer struct {
	sp  speaker
	log *zap.Logger
	// snapshot is the control plane's current one.
	snapshot func() *dataplane.Snapshot
	// checked is closed once every backend has a first health verdict.
	checked <-chan struct{}
	// pulled is closed once the flow table pull ended ([flow_sync]
	// pull_on_start); nil: nothing to wait for.
	pulled <-chan struct{}

	mu      sync.Mutex
	cfg     *config.Config
	st      announceState
	drainAt time.Time // when the node drain began
	stopped bool      // shutting down: nothing is announced again
	lastErr string
	// last is what the latest successful apply decided from: while the
	// snapshot, the configuration and the state stay the same, a tick has
	// nothing to compute (with 20,000 VIPs that is most of its cost).
	last struct {
		snap *dataplane.Snapshot
		cfg  *config.Config
		st   announceState
		ok   bool
	}
	kick     chan struct{}
	nodeDown atomic.Bool // for Status
}

func newAnnouncer(sp speaker, cfg *config.Config, snapshot func() *dataplane.Snapshot, checked <-chan struct{},
	nh4, nh6 netip.Addr, log *zap.Logger) *announcer {
	return &announcer{sp: sp, log: log, snapshot: snapshot, checked: checked, cfg: cfg,
		st:   announceState{nextHop4: nh4, nextHop6: nh6, always: cfg.BGP.Announce == config.AnnounceAlways, pulled: true},
		kick: make(chan struct{}, 1)}
}

// waitPull makes the announcer hold the VIPs back until pulled is closed.
// Called before run.
func (a *announcer) waitPull(pulled <-chan struct{}) {
	a.mu.Lock()
	a.pulled, a.st.pulled = pulled, false
	a.mu.Unlock()
}

// run applies the rule until ctx ends; attached is set first, since run
// starts once the data plane forwards.
func (a *announcer) run(ctx context.Context) {
	a.mu.Lock()
	a.st.attached = true
	a.mu.Unlock()
	t := time.NewTicker(announceTick)
	defer t.Stop()
	for {
		a.apply()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-a.kick:
		}
	}
}

// apply computes the wish and hands it to the speaker.
func (a *announcer) apply() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.stopped {
		return
	}
	if !a.st.checked {
		select {
		case <-a.checked:
			a.st.checked = true
			a.log.Info("every backend has a health verdict: VIPs may be announced")
		default:
		}
	}
	if !a.st.pulled {
		select {
		case <-a.pulled:
			a.st.pulled = true
		default:
		}
	}
	st := a.st
	st.gshut = st.drained && !a.drainAt.IsZero() && time.Since(a.drainAt) < a.settle()
	snap := a.snapshot()
	if a.last.ok && a.last.snap == snap && a.last.cfg == a.cfg && a.last.st == st {
		return
	}
	want := wantVIPs(configVIPs(a.cfg), st, eligibleVIPs(snap))
	announceDraining(want, snap, st)
	err := a.sp.SetVIPs(want)
	a.logErr(err)
	a.last.snap, a.last.cfg, a.last.st, a.last.ok = snap, a.cfg, st, err == nil
}

// logErr logs a failure of the speaker once per distinct message.
func (a *announcer) logErr(err error) {
	msg := ""
	if err != nil {
		msg = err.Error()
	}
	if msg != a.lastErr {
		if err != nil {
			a.log.Error("announcing the VIPs", zap.Error(err))
		} else {
			a.log.Info("announcing the VIPs works again")
		}
		a.lastErr = msg
	}
}

// settle is how long routes keep the GRACEFUL_SHUTDOWN community before a
// withdrawal: drainSettle, within graceful_shutdown_sec (0: none).
func (a *announcer) settle() time.Duration {
	return min(drainSettle, a.cfg.BGP.GracefulShutdown)
}

func (a *announcer) poke() {
	select {
	case a.kick <- struct{}{}:
	default:
	}
}

// setDrained withdraws every VIP (after the GRACEFUL_SHUTDOWN community
// for a moment) while the instance keeps forwarding, or announces them
// again. It reports whether anything changed.
func (a *announcer) setDrained(drained bool) bool {
	a.mu.Lock()
	changed := a.st.drained != drained
	a.st.drained = drained
	if changed {
		a.drainAt = time.Time{}
		if drained {
			a.drainAt = time.Now()
		}
	}
	a.mu.Unlock()
	a.nodeDown.Store(drained)
	if changed {
		// No line here: the admin socket logs the request (its audit
		// line, action drain-node or undrain-node), once.
		a.poke()
		if drained {
			// Withdraw once the community has had its moment.
			time.AfterFunc(a.settle(), a.poke)
		}
	}
	return changed
}

// reload takes a new configuration (the VIPs, announce, neighbors).
func (a *announcer) reload(cfg *config.Config) error {
	a.mu.Lock()
	a.cfg = cfg
	a.st.always = cfg.BGP.Announce == config.AnnounceAlways
	a.mu.Unlock()
	err := a.sp.SetNeighbors(bgp.Neighbors(cfg.BGP))
	a.apply() // at once: the reload removes stale VIPs from the program next
	return err
}

// shutdown withdraws every VIP for good, first thing on SIGTERM: with
// graceful_shutdown_sec > 0 after announcing them with the
// GRACEFUL_SHUTDOWN community for settle; with 0 at once. The data plane
// keeps forwarding meanwhile; the caller waits the rest of
// graceful_shutdown_sec before the teardown.
func (a *announcer) shutdown(ctx context.Context) {
	a.mu.Lock()
	a.stopped = true
	cfg := a.cfg
	a.mu.Unlock()
	if cfg.BGP.GracefulShutdown > 0 {
		if err := a.sp.GracefulShutdown(ctx, a.settle()); err != nil {
			a.log.Error("bgp graceful shutdown", zap.Error(err))
		}
		return
	}
	want := map[netip.Addr]bgp.VIP{}
	for _, vip := range configVIPs(cfg) {
		want[vip] = bgp.VIP{Reason: bgp.ReasonShuttingDown}
	}
	if err := a.sp.SetVIPs(want); err != nil {
		a.log.Error("withdrawing the VIPs", zap.Error(err))
	}
}

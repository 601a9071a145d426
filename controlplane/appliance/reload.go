package appliance

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"xlb/config"
	"xlb/controlplane"
	"xlb/controlplane/admin"
	"xlb/healthcheck"
)

// ErrRestart marks a reload that changes what only a restart can apply:
// a [dataplane] or [admin] setting.
var ErrRestart = errors.New("restart required")

// What a reload changes, each behind the one method it needs, so that a
// test drives a reload with fakes and without root.
type (
	// vipSetter is the XDP program's VIP map.
	vipSetter interface{ SetVIPs([]netip.Addr) error }
	// neighbourWants is the resolver: the backends whose MACs to keep,
	// those of every configuration given.
	neighbourWants interface{ Want(cfgs ...*config.Config) }
	// healthTargetSetter is the checker: the targets to probe.
	healthTargetSetter interface {
		Set([]healthcheck.Target) error
	}
	// configApplier is the control plane.
	configApplier interface {
		Apply(cfg *config.Config, now int64) (controlplane.Diff, error)
	}
	// fleetReloader is the announcer: neighbors, VIPs, announce policy.
	fleetReloader interface {
		reload(cfg *config.Config) error
	}
	// flowReloader is the flow-sync goroutine: peers, keys, rate bound.
	flowReloader interface {
		Reconfigure(c *config.FlowSync)
	}
	// vipLister is the control plane's list of the VIPs its rules still
	// use, draining ones included (M5), and when the next drain ends. A
	// control plane without it has only the configuration's VIPs.
	vipLister interface {
		VIPs(now int64) (vips []netip.Addr, drainEnd int64)
	}
	// drainLister is the control plane's list of the backends it still
	// drains (removed by a reload or an operator, M5), as a configuration
	// of their own (nil: none), and when the first of those drains ends.
	drainLister interface {
		Draining(now int64) (cfg *config.Config, drainEnd int64)
	}
)

// reloader applies a new configuration (X2) and keeps the count and the
// outcome of every attempt.
type reloader struct {
	vips  vipSetter
	neigh neighbourWants
	hc    healthTargetSetter
	cp    configApplier
	feeds *atomic.Pointer[map[string][]healthFeed]
	fleet fleetReloader // nil without [bgp]
	flows flowReloader  // nil without [flow_sync]
	now   func() int64
	log   *zap.Logger
	// settle is how the file is read when it is reloaded: only once it
	// stops changing (the zero value: config.LoadSettled's defaults).
	settle config.Settle

	// schedule runs f after d (time.AfterFunc when nil) and returns what
	// cancels it: the end of a drain, when a removed rule's VIP may leave
	// the XDP map and a removed backend the resolver. Tests run it
	// themselves.
	schedule func(d time.Duration, f func()) (cancel func())
	// begin and end bracket every reload applied, not dry runs (nil:
	// nothing to tell): Appliance.OnReload.
	begin, end func()
	bracket    sync.Mutex // held from begin to end

	mu  sync.Mutex
	cur *config.Config
	// draining is what the resolver was last given of the backends the
	// control plane drains (drainLister): a tracked flow is still sent to
	// a removed backend while it drains (M5), so the resolver keeps its
	// MAC until then, through any number of reloads.
	draining []string
	ok, fail uint64
	last     *admin.LastReload
	// inMap is what the XDP program's VIP map holds (nil: the running
	// configuration's VIPs); cancelReap cancels the scheduled reap.
	inMap      []netip.Addr
	cancelReap func()
	stopped    bool
}

// ReloadOptions are what an operator may ask of one reload.
type ReloadOptions struct {
	// AllowEmpty applies a configuration without any forwarding rule
	// while the running one has some (every VIP would stop at once); a
	// reload refuses it otherwise (ErrEmpty).
	AllowEmpty bool
	// Path is the file the operator means (`xlb reload -c FILE`), ""
	// for the running one. Any other file is refused (*OtherFileError)
	// before anything is read: a reload reloads the file xlb runs.
	Path string
	// DryRun loads and checks the file as a reload would, and computes
	// what it would change against the running configuration, applying
	// nothing: neither counted nor in last_reload.
	DryRun bool
}

// OtherFileError is a reload asked for a file other than the one xlb
// runs (os.SameFile of the two, stat'ed by xlb): only that one reloads.
type OtherFileError struct {
	Running, Asked string
}

func (e *OtherFileError) Error() string {
	return fmt.Sprintf("xlb runs %s; reload -c reloads only that file (asked: %s): write the changes into %s, or start xlb run with -c %s",
		e.Running, e.Asked, e.Running, e.Asked)
}

// sameFile is nil when asked is the running file (the same file, by
// whatever path or link), else why not.
func sameFile(running, asked string) error {
	if abs, err := filepath.Abs(running); err == nil {
		running = abs
	}
	ai, err := os.Stat(asked)
	if err != nil {
		return fmt.Errorf("xlb runs %s; reload -c %s: %w", running, asked, err)
	}
	ri, err := os.Stat(running)
	if err != nil {
		return fmt.Errorf("the running file %s: %w", running, err)
	}
	if !os.SameFile(ri, ai) {
		return &OtherFileError{Running: running, Asked: asked}
	}
	return nil
}

// ErrEmpty marks a reload refused because the new configuration has no
// forwarding rule while the running one has: most likely a truncated or
// half-written file, which would stop every VIP at once.
var ErrEmpty = errors.New("the configuration has no forwarding rule and would stop every VIP (apply it with xlb reload --allow-empty)")

// reloadFile reloads the file the running configuration came from.
func (r *reloader) reloadFile(opts ReloadOptions) error {
	_, err := r.reloadFileChanges(opts)
	return err
}

// reloadFileChanges is reloadFile, returning what the reload changed (or,
// with opts.DryRun, would change).
func (r *reloader) reloadFileChanges(opts ReloadOptions) (config.Changes, error) {
	r.mu.Lock()
	path := r.cur.Path
	r.mu.Unlock()
	if opts.Path != "" {
		if err := sameFile(path, opts.Path); err != nil {
			return nil, err
		}
	}
	load := func() (*config.Config, error) {
		cfg, err := config.LoadSettled(path, r.settle)
		if err != nil {
			return nil, err
		}
		return cfg, r.checkEmpty(cfg, opts)
	}
	if opts.DryRun {
		return r.dryRun(load)
	}
	return r.reloadChanges(path, load)
}

// checkEmpty refuses cfg without rules unless opts allow it or nothing
// runs now either; r.mu is held (load runs under it).
func (r *reloader) checkEmpty(cfg *config.Config, opts ReloadOptions) error {
	if len(cfg.Rules) > 0 || len(r.cur.Rules) == 0 {
		return nil
	}
	if opts.AllowEmpty {
		if opts.DryRun {
			return nil
		}
		r.log.Warn("reload removes every forwarding rule, as asked (--allow-empty)",
			zap.String("file", cfg.Path), zap.Int("rules_before", len(r.cur.Rules)))
		return nil
	}
	return fmt.Errorf("%s: %w", cfg.Path, ErrEmpty)
}

// reload takes the configuration from load (an error counts as a failed
// reload), then applies it: VIPs added to the XDP program's map first (so
// traffic for them is steered once the control plane has them),
// neighbours and health checks of the new backends, the control plane as
// one atomic step (kept backends keep their refs and flows, removed ones
// drain per M5), then the VIPs that left. Any error leaves the running
// configuration as it was.
func (r *reloader) reload(file string, load func() (*config.Config, error)) error {
	_, err := r.reloadChanges(file, load)
	return err
}

// reloadChanges is reload, returning what it changed.
func (r *reloader) reloadChanges(file string, load func() (*config.Config, error)) (config.Changes, error) {
	// Outside r.mu (end reads the status, which takes it), under a lock
	// of its own so that two reloads' brackets do not interleave.
	r.bracket.Lock()
	defer r.bracket.Unlock()
	if r.begin != nil {
		r.begin()
	}
	if r.end != nil {
		defer r.end()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	changes, err := r.apply(load)
	if err != nil {
		r.fail++
		var errs []string
		for _, e := range flatten(err) {
			errs = append(errs, e.Error())
			r.log.Error("reload rejected: the running configuration stays", zap.String("file", file), zap.Error(e))
		}
		r.last = &admin.LastReload{At: time.Now().UTC().Format(time.RFC3339Nano), Errors: errs}
	}
	return changes, err
}

// dryRun loads and checks the configuration as reload does and returns
// what applying it would change; it applies nothing, and counts nothing.
func (r *reloader) dryRun(load func() (*config.Config, error)) (config.Changes, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	cfg, err := r.prepare(load)
	if err != nil {
		return nil, err
	}
	return config.Diff(r.cur, cfg), nil
}

// prepare loads the configuration and checks it can be applied over the
// running one; r.mu is held.
func (r *reloader) prepare(load func() (*config.Config, error)) (*config.Config, error) {
	cfg, err := load()
	if err != nil {
		return nil, err
	}
	if err := cfg.ValidateForRun(); err != nil {
		return nil, err
	}
	if err := restartNeeded(r.cur, cfg); err != nil {
		return nil, err
	}
	return cfg, nil
}

func (r *reloader) apply(load func() (*config.Config, error)) (config.Changes, error) {
	cfg, err := r.prepare(load)
	if err != nil {
		return nil, err
	}
	oldVIPs, newVIPs := r.mapped(), configVIPs(cfg)
	if err := r.vips.SetVIPs(union(oldVIPs, newVIPs)); err != nil {
		return nil, fmt.Errorf("setting the VIPs: %w", err)
	}
	// The backends this reload removes stay followed, with those earlier
	// reloads removed whose drains go on: they drain on their MACs (M5),
	// and one that comes back while it drains is selected again at once,
	// healthy as it was; were the resolver to forget them, their frames
	// would be dropped (backend-not-ready) until it had resolved them
	// again.
	// Those this reload removes are the running file's until the control
	// plane drains them.
	dr, _ := r.drainingNow(r.now())
	r.neigh.Want(cfg, dr, r.cur)
	targets, feeds := healthTargets(cfg)
	if err := r.hc.Set(targets); err != nil {
		r.neigh.Want(r.followed()...)
		_ = r.vips.SetVIPs(oldVIPs)
		return nil, err
	}
	// At is just before the control plane's clock is read: drains of
	// removed backends end timeout after At, never before.
	at, now := time.Now(), r.now()
	d, err := r.cp.Apply(cfg, now)
	if err != nil {
		// Put everything back as it was.
		oldTargets, _ := healthTargets(r.cur)
		_ = r.hc.Set(oldTargets)
		r.neigh.Want(r.followed()...)
		_ = r.vips.SetVIPs(oldVIPs)
		return nil, fmt.Errorf("control plane: %w", err)
	}
	// What the resolver now follows, between reloads: cfg's backends and
	// the control plane's draining ones, this reload's removals among
	// them.
	dr, _ = r.drainingNow(now)
	r.draining = endpointsOf(dr)
	// Results of the new targets count from here on (until now they were
	// dropped; the checker reports every probe, so none is lost for good).
	r.feeds.Store(&feeds)
	if r.fleet != nil {
		// Routes follow: new VIPs are announced once their services have
		// eligible backends, removed ones withdrawn before they leave the
		// XDP program's map below. Neighbors are validated already; a
		// session GoBGP refuses is logged and shown in status.
		if err := r.fleet.reload(cfg); err != nil {
			r.log.Error("bgp neighbors", zap.Error(err))
		}
	}
	if r.flows != nil && cfg.FlowSync != nil {
		// Peers, keys and the rate bound; the backends' fleet IDs come
		// with the snapshot just published.
		r.flows.Reconfigure(cfg.FlowSync)
	}
	// VIPs whose removed rules drain stay until the drain ends (M5).
	keep, drainEnd := newVIPs, int64(0)
	if l, ok := r.cp.(vipLister); ok {
		keep, drainEnd = l.VIPs(r.now())
	}
	if err := r.vips.SetVIPs(keep); err != nil {
		// The union stays: stale VIPs go to workers that find no rule.
		r.log.Warn("removing stale VIPs", zap.Error(err))
		r.inMap = union(oldVIPs, newVIPs)
	} else {
		r.inMap = keep
	}
	changes := config.Diff(r.cur, cfg)
	r.cur = cfg
	r.scheduleReap(r.nextEnd(now, drainEnd))
	r.ok++
	r.last = &admin.LastReload{At: at.UTC().Format(time.RFC3339Nano), OK: true,
		ServicesAdded: d.ServicesAdded, ServicesRemoved: d.ServicesRemoved,
		BackendsAdded: d.BackendsAdded, BackendsRemoved: d.BackendsRemoved, BackendsKept: d.BackendsKept,
		Changes: changes.Lines()}
	r.log.Info("configuration reloaded", zap.String("file", cfg.Path),
		zap.Strings("services_added", d.ServicesAdded), zap.Strings("services_removed", d.ServicesRemoved),
		zap.Strings("backends_added", d.BackendsAdded), zap.Strings("backends_removed", d.BackendsRemoved),
		zap.Int("backends_kept", d.BackendsKept), zap.Int("vips", len(newVIPs)),
		zap.Int("vips_draining", len(keep)-len(newVIPs)), zap.Strings("changes", changes.Lines()))
	r.warnRemoved(cfg.Path, changes)
	return changes, nil
}

// warnRemoved logs each forwarding rule and backend service the reload
// removed, one warning each: traffic that stops (a rule's VIP and ports,
// a service's backends), after its drain (M5).
func (r *reloader) warnRemoved(file string, changes config.Changes) {
	for _, c := range changes {
		if c.Op != config.Removed {
			continue
		}
		switch c.Kind {
		case config.KindRule:
			r.log.Warn("reload removed a forwarding rule: it drains (M5)",
				zap.String("rule", c.Name), zap.String("was", c.Detail), zap.String("file", file))
		case config.KindService:
			r.log.Warn("reload removed a backend service: its backends drain",
				zap.String("service", c.Name), zap.String("was", c.Detail), zap.String("file", file))
		}
	}
}

// mapped is what the XDP program's VIP map holds; r.mu is held.
func (r *reloader) mapped() []netip.Addr {
	if r.inMap != nil {
		return r.inMap
	}
	return configVIPs(r.cur)
}

// scheduleReap (re)schedules reap for drainEnd, the control plane's time
// (ms) the next drain ends; 0: none drains. r.mu is held.
func (r *reloader) scheduleReap(drainEnd int64) {
	if r.cancelReap != nil {
		r.cancelReap()
		r.cancelReap = nil
	}
	if drainEnd == 0 || r.stopped {
		return
	}
	d := time.Duration(max(drainEnd-r.now(), 0)) * time.Millisecond
	if r.schedule != nil {
		r.cancelReap = r.schedule(d, r.reap)
		return
	}
	t := time.AfterFunc(d, r.reap)
	r.cancelReap = func() { t.Stop() }
}

// reap has the resolver forget the removed backends whose drains have
// ended, takes the VIPs whose removed rules have drained out of the XDP
// program's map, and schedules itself for the next drain's end.
func (r *reloader) reap() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopped {
		return
	}
	now := r.now()
	if dr, _ := r.drainingNow(now); !slices.Equal(endpointsOf(dr), r.draining) {
		r.draining = endpointsOf(dr)
		r.neigh.Want(r.cur, dr)
	}
	var drainEnd int64
	if l, ok := r.cp.(vipLister); ok {
		var vips []netip.Addr
		vips, drainEnd = l.VIPs(now)
		if old := r.mapped(); !slices.Equal(vips, old) {
			if err := r.vips.SetVIPs(vips); err != nil {
				r.log.Warn("removing VIPs whose drain ended", zap.Error(err))
			} else {
				r.inMap = vips
				r.log.Info("VIPs whose drain ended removed", zap.Int("vips_before", len(old)), zap.Int("vips", len(vips)))
			}
		}
	}
	r.scheduleReap(r.nextEnd(now, drainEnd))
}

// drainingNow is the control plane's drainLister answer (nil, 0 without
// one).
func (r *reloader) drainingNow(now int64) (*config.Config, int64) {
	if l, ok := r.cp.(drainLister); ok {
		return l.Draining(now)
	}
	return nil, 0
}

// endpointsOf lists the addresses of cfg's endpoints (none for nil), to
// tell whether what the resolver follows changed.
func endpointsOf(cfg *config.Config) []string {
	if cfg == nil {
		return nil
	}
	var out []string
	for _, s := range cfg.Services {
		for _, g := range s.Groups {
			for _, ep := range g.Endpoints {
				out = append(out, s.Name+"/"+ep.IP.String())
			}
		}
	}
	return out
}

// followed is what the resolver follows between reloads: the running
// configuration's backends and the draining ones; r.mu is held.
func (r *reloader) followed() []*config.Config {
	dr, _ := r.drainingNow(r.now())
	return []*config.Config{r.cur, dr}
}

// nextEnd is the earlier of drainEnd (the next removed rule's, 0: none)
// and the next end of a backend's drain; r.mu is held.
func (r *reloader) nextEnd(now, drainEnd int64) int64 {
	if _, end := r.drainingNow(now); end != 0 && (drainEnd == 0 || end < drainEnd) {
		return end
	}
	return drainEnd
}

// stop cancels the scheduled reap for good (the appliance stops).
func (r *reloader) stop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stopped = true
	r.scheduleReap(0)
}

// report is what /metrics and /status show.
func (r *reloader) report() *admin.ReloadReport {
	r.mu.Lock()
	defer r.mu.Unlock()
	return &admin.ReloadReport{Success: r.ok, Failure: r.fail, Last: r.last}
}

// restartNeeded names every [dataplane] and [admin] setting that differs:
// sockets, queues, rings, the conntrack table and the listener are made
// once, at start; and those of [bgp] and [flow_sync] that only a restart
// applies (the speaker's identity, the sync sockets).
func restartNeeded(old, cfg *config.Config) error {
	a, b := &old.Dataplane, &cfg.Dataplane
	var errs []error
	diff := func(field string, same bool) {
		if !same {
			errs = append(errs, fmt.Errorf("%s changed: %w (it is applied only at start)", field, ErrRestart))
		}
	}
	diff("dataplane.interface", a.Interface == b.Interface)
	diff("dataplane.queues", a.AllQueues == b.AllQueues && slices.Equal(a.Queues, b.Queues))
	diff("dataplane.cpus", slices.Equal(a.CPUs, b.CPUs))
	diff("dataplane.xdp_mode", a.XDPMode == b.XDPMode)
	diff("dataplane.zero_copy", a.ZeroCopy == b.ZeroCopy)
	diff("dataplane.frame_size", a.FrameSize == b.FrameSize)
	diff("dataplane.ring_size", a.RingSize == b.RingSize)
	diff("dataplane.conntrack_capacity", a.ConntrackCapacity == b.ConntrackCapacity)
	diff("dataplane.state_dir", a.StateDir == b.StateDir)
	diff("dataplane.conntrack_syn_timeout_sec", a.ConntrackSYNTimeoutSec == b.ConntrackSYNTimeoutSec)
	diff("dataplane.conntrack_new_entry_rate", a.ConntrackNewEntryRate == b.ConntrackNewEntryRate)
	diff("dataplane.user", a.User == b.User)
	diff("admin.listen", old.Admin.Listen == cfg.Admin.Listen)
	diff("admin.socket", old.Admin.Socket == cfg.Admin.Socket)
	diff("admin.pprof", old.Admin.Pprof == cfg.Admin.Pprof)
	for _, f := range config.BGPRestartFields(old.BGP, cfg.BGP) {
		diff(f, false)
	}
	for _, f := range config.FlowSyncRestartFields(old.FlowSync, cfg.FlowSync) {
		diff(f, false)
	}
	return errors.Join(errs...)
}

// configVIPs lists the VIPs of the forwarding rules, each once.
func configVIPs(cfg *config.Config) []netip.Addr {
	vips := make([]netip.Addr, 0, len(cfg.Rules))
	seen := make(map[netip.Addr]bool, len(cfg.Rules))
	for _, r := range cfg.Rules {
		if !seen[r.VIP] {
			seen[r.VIP] = true
			vips = append(vips, r.VIP)
		}
	}
	return vips
}

// union lists a's addresses, then b's that a lacks.
func union(a, b []netip.Addr) []netip.Addr {
	out := slices.Clone(a)
	in := make(map[netip.Addr]struct{}, len(a))
	for _, x := range a {
		in[x] = struct{}{}
	}
	for _, x := range b {
		if _, ok := in[x]; !ok {
			in[x] = struct{}{}
			out = append(out, x)
		}
	}
	return out
}

// flatten lists the errors that errors.Join (config.Load's several
// problems, restartNeeded's fields) put together, each to be logged once.
func flatten(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []error
		for _, e := range j.Unwrap() {
			out = append(out, flatten(e)...)
		}
		return out
	}
	return []error{err}
}

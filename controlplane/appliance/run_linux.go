package appliance

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/vishvananda/netlink"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"xlb/config"
	"xlb/conntrack"
	"xlb/controlplane"
	"xlb/controlplane/admin"
	"xlb/controlplane/bgp"
	"xlb/controlplane/flowsync"
	"xlb/controlplane/neigh"
	"xlb/dataplane"
	"xlb/dataplane/worker"
	"xlb/dataplane/xdpprog"
	"xlb/healthcheck"
)

// shutdownGrace bounds how long the admin listener waits for requests in
// flight when the appliance stops.
const shutdownGrace = 2 * time.Second

// errStopped ends a startup that a signal interrupted: not a failure.
var errStopped = errors.New("stopped during startup")

// stack is an appliance being brought up: each step adds what it started
// and how to take it down again.
type stack struct {
	a *Appliance
	// ctx ends startup waits; life, the workers and health checks, which
	// the teardown stops: a graceful shutdown (withdraw the routes, keep
	// forwarding a while) fits between ctx's end and the teardown.
	ctx  context.Context
	life context.Context
	cfg  *config.Config
	base *zap.Logger // the appliance's logger
	log  *zap.Logger // base with the interface
	id   Identity    // who the process runs as once started

	link   netlink.Link
	mtu    *mtuWatch
	queues []*queue
	ct     *conntrack.Table
	engine *dataplane.Engine
	// restore is the state a previous process left with the table (nil:
	// none); keep saves this one's (nil without state_dir).
	restore *controlplane.State
	keep    *keeper
	res     *neigh.Resolver
	cp      *controlplane.ControlPlane
	hc      *healthcheck.Checker
	feeds   *atomic.Pointer[map[string][]healthFeed]
	objs    *xdpprog.Objects
	mode    xdpprog.Mode
	vips    []netip.Addr
	failed  chan error // a worker's error
	admin   *admin.Server
	sp      *bgp.Speaker     // nil without [bgp]
	ann     *announcer       // nil without [bgp]
	fs      *flowsync.Syncer // nil without [flow_sync]
	pull    *pullState       // the table pull at start; nil: none
	// follow guards rl and adoptedEarly: the backends a pull adopts are
	// followed by the resolver through the reloader once there is one
	// (serveAdmin), directly before.
	follow       sync.Mutex
	rl           *reloader
	adoptedEarly bool

	undo []func()
}

// down takes down what was started, last first: the admin listener, then
// the workers before their sockets close, then the XDP program (its link
// closed before its maps), health checks and the resolver.
func (s *stack) down() {
	for i := len(s.undo) - 1; i >= 0; i-- {
		s.undo[i]()
	}
}

// Run brings the data plane up on the configured interface, serves until
// ctx is done (SIGTERM, SIGINT) or a worker fails, and takes everything
// down again, on every return path. The XDP link is a bpf_link, so even a
// kill -9 leaves no program behind. The checks that fail for an operator's
// mistake (privileges, interface, queues, CPUs) come first and end in one
// line, before anything is logged. Run is called once.
func (a *Appliance) Run(ctx context.Context) error {
	s := &stack{a: a, ctx: ctx, life: context.WithoutCancel(ctx), cfg: a.cfg, base: a.log}
	defer s.down()
	steps := []func() error{s.host, s.neighbours, s.controlPlane, s.healthChecks, s.attach, s.openQueues, s.flowSync, s.startWorkers, s.startBGP, s.serveAdmin, s.dropPrivileges}
	for _, step := range steps {
		if err := step(); errors.Is(err, errStopped) {
			s.log.Info("signal received during startup: stopping")
			return nil
		} else if err != nil {
			return err
		}
	}
	s.logSummary()
	// Attached, workers running, admin serving: the VIPs may be announced
	// from here, once every backend has a health verdict (the announcer
	// waits for that).
	close(a.ready)
	annDone := s.announce()
	select {
	case <-ctx.Done():
		s.log.Info("signal received: stopping")
		s.withdraw(annDone)
		return nil
	case err := <-s.failed:
		s.log.Error("a worker failed: stopping", zap.Error(err))
		return err
	}
}

// announce starts the announcer (with [bgp]); the returned function stops
// it and waits for it.
func (s *stack) announce() (stop func()) {
	if s.ann == nil {
		return func() {}
	}
	ctx, cancel := context.WithCancel(s.life)
	var wg sync.WaitGroup
	wg.Go(func() { s.ann.run(ctx) })
	return func() { cancel(); wg.Wait() }
}

// withdraw is the first thing a SIGTERM does with [bgp]: every VIP is
// withdrawn (after the GRACEFUL_SHUTDOWN community, when
// graceful_shutdown_sec > 0), and the data plane keeps forwarding until
// graceful_shutdown_sec after the signal, so that routers move the flows
// to the other instances before this one detaches. A worker that fails
// meanwhile ends the wait.
func (s *stack) withdraw(stopAnnouncer func()) {
	if s.ann == nil {
		return
	}
	start := time.Now()
	stopAnnouncer()
	grace := s.ann.cfg.BGP.GracefulShutdown
	ctx, cancel := context.WithTimeout(context.Background(), max(grace, time.Second))
	defer cancel()
	s.ann.shutdown(ctx)
	left := grace - time.Since(start)
	s.log.Info("VIPs withdrawn: forwarding until the graceful shutdown ends", zap.Duration("left", max(left, 0)))
	if left <= 0 {
		return
	}
	t := time.NewTimer(left)
	defer t.Stop()
	select {
	case <-t.C:
	case err := <-s.failed:
		s.log.Error("a worker failed during the graceful shutdown", zap.Error(err))
	}
}

// host checks what the host gives: privileges, the interface, its rx
// queues, the CPUs to pin workers to, and an MTU that frame_size holds
// (then followed).
func (s *stack) host() error {
	d := &s.cfg.Dataplane
	ifname := d.Interface
	s.log = s.base.With(zap.String("interface", ifname))
	if err := checkPrivileges(); err != nil {
		return err
	}
	id, err := RunAs(s.cfg)
	if err != nil {
		return err
	}
	if err := checkSwitch(id, s.a.keepPrivileges); err != nil {
		return err
	}
	s.id = id
	link, err := netlink.LinkByName(ifname)
	if err != nil {
		var nf netlink.LinkNotFoundError
		if errors.As(err, &nf) || errors.Is(err, unix.ENODEV) {
			return fmt.Errorf("interface %q (dataplane.interface in %s) does not exist in this network namespace", ifname, s.cfg.Path)
		}
		return privErr(fmt.Sprintf("looking up interface %q", ifname), err)
	}
	s.link = link
	count, err := rxQueueCount(ifname, link.Attrs().NumRxQueues)
	if err != nil {
		return privErr("counting rx queues", err)
	}
	nums, cpus, err := resolveQueues(d, ifname, count)
	if err != nil {
		return err
	}
	if err := checkCPUs(cpus); err != nil {
		return err
	}
	for i, q := range nums {
		s.queues = append(s.queues, &queue{num: q, cpu: cpus[i]})
	}
	return s.watchMTU()
}

// neighbours starts the resolver of backend MACs (from the kernel's
// neighbour table, kept fresh; a configured mac overrides it) and waits,
// bounded, for them and the routes, so the first clients find their
// backends ready and encapsulation knows its source.
func (s *stack) neighbours() error {
	ct, restore, keep, err := s.openTable()
	if _, ok := errors.AsType[errStateDir](err); ok {
		return err
	}
	if _, ok := errors.AsType[errStateDirInUse](err); ok {
		return err
	}
	if err != nil {
		return fmt.Errorf("conntrack: %w", err)
	}
	// New faulted in every page of the table (huge pages where THP
	// allows), so that no worker pays a first-touch fault in its packet
	// loop; locked, it is never swapped out either. A lock refused is a
	// warning: the table works as well until memory runs short.
	lockErr := ct.Lock()
	m := ct.Memory()
	s.log.Info("conntrack table populated", zap.Int("entries", ct.Capacity()), zap.Int("mib", m.Bytes>>20),
		zap.String("how", m.Populate), zap.Bool("huge_page_advice", m.HugeAdvice),
		zap.Duration("took", m.PopulateTime), zap.Bool("locked", m.Locked), zap.String("file", m.File))
	if lockErr != nil {
		s.log.Warn("conntrack table not locked in memory: it may be swapped out", zap.Error(lockErr))
	}
	s.ct, s.engine = ct, dataplane.NewEngine(ct)
	s.engine.OnTableFault(s.tableFaulted)
	s.restore, s.keep = restore, keep
	if keep != nil {
		// Undone after everything started later: the workers and the
		// keeper's last save are done with the directory by then.
		s.undo = append(s.undo, keep.lock.release)
	}
	s.engine.SetFloodLimits(dataplane.FloodLimitsOf(&s.cfg.Dataplane))
	res, err := neigh.New(s.cfg.Dataplane.Interface, s.base.Named("neigh")) // it names the interface itself
	if err != nil {
		return privErr("neighbour resolver", err)
	}
	s.res = res
	s.undo = append(s.undo, func() { res.Close() })
	res.Want(neigh.TargetsOf(s.cfg))
	waitNeighbours(s.ctx, res, s.cfg, s.log)
	if s.ctx.Err() != nil {
		return errStopped
	}
	return nil
}

// controlPlane builds the first snapshot. Every backend starts unhealthy
// until its health check passes (until one does, E1-E4 fall back to all
// backends), but for those restored from state_dir: they keep the refs,
// health and weights the previous process left.
func (s *stack) controlPlane() error {
	local := localOf(s.res, s.cfg, s.link, s.log)
	s.log.Info("local addresses", zap.String("mac", macString(local.MAC)),
		addrField("encap_src_v4", encapSrc(local.EncapSrcV4, local.HasSrcV4)),
		addrField("encap_src_v6", encapSrc(local.EncapSrcV6, local.HasSrcV6)),
		zap.Int("max_frame", local.MaxFrame))
	opts := controlplane.Options{
		Local:          local,
		InitialHealthy: false,
		InitialWeight:  initialWeight,
		Resolve:        s.res.Resolve,
		Logger:         s.log.Named("controlplane"),
		Restore:        s.restore,
	}
	if s.keep != nil {
		opts.OnRefs = s.keep.save
	}
	cp, err := controlplane.New(s.cfg, s.engine, opts, worker.NowMs())
	if err != nil {
		return fmt.Errorf("control plane: %w", err)
	}
	s.cp = cp
	if s.restore != nil {
		s.log.Info("backends restored with their refs, health and weights", zap.Int("backends", cp.Restored()))
	}
	s.keep.start(s)
	// A MAC learned, changed or lost republishes the snapshot; so does
	// one that changed before OnChange was registered.
	s.res.OnChange(func() { cp.Publish(worker.NowMs()) })
	cp.Publish(worker.NowMs())
	s.watchSelf()
	return nil
}

// healthChecks starts the checks, on this namespace's kernel stack: the
// XDP program passes their replies (not VIP traffic) to the kernel.
func (s *stack) healthChecks() error {
	targets, first := healthTargets(s.cfg)
	s.feeds = &atomic.Pointer[map[string][]healthFeed]{} // a reload replaces them
	s.feeds.Store(&first)
	round := newFirstRound(targets)
	round.holdRestored(s.restore, first)
	s.a.checked.Store(round)
	hlog := s.base.Named("healthcheck")
	feeds := func() map[string][]healthFeed { return *s.feeds.Load() }
	hc := healthcheck.New(hlog, healthcheck.Options{Notify: healthApplier(s.cp, feeds, worker.NowMs, s.a.health, round, hlog)})
	if err := hc.Set(targets); err != nil {
		return err
	}
	s.hc = hc
	hctx, stop := context.WithCancel(s.life)
	var wg sync.WaitGroup
	wg.Go(func() { _ = hc.Run(hctx) })
	s.undo = append(s.undo, func() {
		stop()
		wg.Wait()
		s.log.Info("health checks stopped")
	})
	s.log.Info("health checks started", zap.Int("targets", len(targets)),
		zap.Int("max_concurrent", healthcheck.DefaultMaxConcurrent),
		zap.Int("max_concurrent_failing", healthcheck.DefaultMaxConcurrentFailing))
	return nil
}

// attach loads the XDP program with the VIPs and attaches it.
func (s *stack) attach() error {
	d := &s.cfg.Dataplane
	maxQueue := 0
	for _, q := range s.queues {
		maxQueue = max(maxQueue, q.num)
	}
	objs, err := xdpprog.Load(maxQueue + 1)
	if errors.Is(err, unix.EPERM) {
		return privErr("loading the XDP program", err)
	}
	if err != nil {
		return err // a verifier rejection: its log follows, line by line
	}
	s.objs = objs
	s.undo = append(s.undo, func() { objs.Close() })
	s.vips = configVIPs(s.cfg)
	if err := objs.SetVIPs(s.vips); err != nil {
		return privErr("setting the VIPs", err)
	}
	xdpLink, mode, err := objs.Attach(s.link.Attrs().Index, xdpMode(d.XDPMode))
	if errors.Is(err, unix.EBUSY) || errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("%s already has an XDP program (another xlb?): %s", d.Interface, oneLine(err))
	}
	if err != nil {
		return privErr("attaching XDP to "+d.Interface, err)
	}
	s.mode = mode
	s.undo = append(s.undo, func() {
		if err := xdpLink.Close(); err != nil {
			s.log.Error("detaching the XDP program", zap.Error(err))
			return
		}
		s.log.Info("XDP program detached")
	})
	s.log.Info("XDP program attached", zap.String("xdp_mode", string(mode)), zap.Stringer("requested", d.XDPMode))
	if ok, why := objs.Retags(); !ok {
		// Tagged VIP frames whose tag the NIC or a bridge holds apart
		// would reach the backends untagged (FR9).
		s.log.Warn("XDP cannot see VLAN tags held outside the frame: keep VIP traffic untagged, or its tags in the frame (ethtool -K "+
			d.Interface+" rxvlan off), or run native on a driver with VLAN receive metadata", zap.NamedError("why", why))
	}
	return nil
}

// startWorkers starts one worker per queue. They stop before their
// sockets close.
func (s *stack) startWorkers() error {
	for _, q := range s.queues {
		w, err := worker.New(s.engine, q.port, q.socket, worker.Config{Queue: q.num, CPU: q.cpu, Batch: workerBatch})
		if err != nil {
			return err
		}
		q.worker = w
	}
	ctx, stop := context.WithCancel(s.life)
	s.failed = make(chan error, len(s.queues))
	var wg sync.WaitGroup
	for _, q := range s.queues {
		wg.Go(func() {
			if err := q.worker.Run(ctx); err != nil {
				s.failed <- err
			}
		})
	}
	s.undo = append(s.undo, func() {
		stop()
		wg.Wait()
		s.log.Info("workers stopped")
	})
	return nil
}

// serveAdmin publishes what Status, Reload and the operator read, and
// starts the admin listener on it.
func (s *stack) serveAdmin() error {
	workers := make([]admin.QueueStats, len(s.queues))
	for i, q := range s.queues {
		workers[i] = admin.QueueStats{Queue: q.num, Stats: q.worker.Stats()}
	}
	rl := &reloader{vips: s.objs, neigh: resolverWants{s.res}, hc: s.hc, cp: s.cp, feeds: s.feeds, now: worker.NowMs,
		log: s.log.Named("reload"), cur: s.cfg, begin: s.a.reloadBegin, end: s.a.reloadEnd}
	if s.ann != nil {
		rl.fleet = s.ann
	}
	if s.fs != nil {
		rl.flows = s.fs
	}
	s.undo = append(s.undo, rl.stop)
	s.follow.Lock()
	s.rl = rl
	if s.adoptedEarly {
		rl.reap() // it learns what the resolver follows, and when to forget it
	}
	s.follow.Unlock()
	capt := &capturer{engine: s.engine}
	for _, q := range s.queues {
		capt.workers = append(capt.workers, q.worker)
	}
	rounds := func() []WorkerRounds {
		out := make([]WorkerRounds, len(s.queues))
		for i, q := range s.queues {
			out[i] = WorkerRounds{Queue: q.num, Rounds: q.worker.Rounds()}
		}
		return out
	}
	s.a.cur.Store(&running{cp: s.cp, engine: s.engine, workers: workers, now: worker.NowMs, runtime: s.runtime, rl: rl, ann: s.ann,
		rounds: rounds, capture: capt, flowSync: s.flowSyncStatus()})
	s.undo = append(s.undo, func() { s.a.cur.Store(nil) })
	listen := s.cfg.Admin.Listen
	collectors := []prometheus.Collector{s.a.health}
	if s.sp != nil {
		collectors = append(collectors, s.sp)
	}
	if s.fs != nil {
		collectors = append(collectors, s.fs.Collector())
	}
	nofile := raiseNofile()
	limits := admin.ConnLimits(nofile)
	s.log.Info("descriptor limit", zap.Uint64("nofile", nofile), zap.Int("admin_tcp_connections", limits.TCPConns),
		zap.Int("admin_socket_connections", limits.SocketConns), zap.Int("health_check_probes", healthcheck.DefaultMaxConcurrent))
	srv, err := admin.New(admin.Options{Listen: listen, Socket: s.cfg.Admin.Socket, SocketOwner: &s.id.UID, Pprof: s.cfg.Admin.Pprof, Limits: limits},
		s.a, s.log.Named("admin"), collectors...)
	if err != nil {
		return err
	}
	if err := srv.Start(); err != nil {
		return fmt.Errorf("admin listener on %s: %w", listen, err)
	}
	s.admin = srv
	s.undo = append(s.undo, func() {
		ctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
		defer cancel()
		if err := srv.Close(ctx); err != nil {
			s.log.Warn("closing the admin listener", zap.Error(err))
		}
	})
	return nil
}

// startBGP starts the BGP speaker of [bgp] (none without it): its sessions
// come up now, and the announcer, started once the appliance is ready,
// decides what they carry. The next hops are the interface's first global
// IPv4 and IPv6 addresses; the router ID, unless configured, the IPv4 one.
func (s *stack) startBGP() error {
	b := s.cfg.BGP
	if b == nil {
		return nil
	}
	nh4, nh6, err := interfaceAddrs(s.link)
	if err != nil {
		return privErr("listing the interface's addresses (BGP next hops)", err)
	}
	id := b.RouterID
	if !id.IsValid() {
		if !nh4.IsValid() {
			return fmt.Errorf("bgp.router_id is not set and %s has no IPv4 address to take it from (%s)", s.cfg.Dataplane.Interface, s.cfg.Path)
		}
		id = nh4
	}
	sp, err := bgp.New(bgp.Config{ASN: b.ASN, RouterID: id}, s.base.Named("bgp"))
	if err != nil {
		return err
	}
	if err := sp.Start(s.life); err != nil {
		return fmt.Errorf("bgp: %w", err)
	}
	s.sp = sp
	s.undo = append(s.undo, func() {
		sp.Stop()
		s.log.Info("bgp speaker stopped")
	})
	if err := sp.SetNeighbors(bgp.Neighbors(b)); err != nil {
		return fmt.Errorf("bgp neighbors: %w", err)
	}
	var checked <-chan struct{}
	if r := s.a.checked.Load(); r != nil {
		checked = r.done
	}
	s.ann = newAnnouncer(sp, s.cfg, s.cp.Snapshot, checked, nh4, nh6, s.log.Named("announce"))
	if s.pull != nil {
		s.ann.waitPull(s.pull.done)
	}
	s.log.Info("bgp speaker started", zap.Uint32("asn", b.ASN), zap.Stringer("router_id", id),
		zap.Int("neighbors", len(b.Neighbors)), addrField("next_hop_v4", nh4), addrField("next_hop_v6", nh6))
	return nil
}

// resolverWants gives the resolver the backends of configurations (nil
// ones skipped).
type resolverWants struct{ res *neigh.Resolver }

func (r resolverWants) Want(cfgs ...*config.Config) {
	var ts []neigh.Target
	for _, cfg := range cfgs {
		if cfg != nil {
			ts = append(ts, neigh.TargetsOf(cfg)...)
		}
	}
	r.res.Want(ts)
}

func xdpMode(m config.XDPMode) xdpprog.Mode {
	switch m {
	case config.XDPNative:
		return xdpprog.ModeNative
	case config.XDPGeneric:
		return xdpprog.ModeGeneric
	}
	return xdpprog.ModeAuto
}

package main

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"

	"github.com/vishvananda/netlink"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"xlb/config"
	"xlb/conntrack"
	"xlb/controlplane"
	"xlb/controlplane/admin"
	"xlb/controlplane/neigh"
	"xlb/dataplane"
	"xlb/dataplane/afxdp"
	"xlb/dataplane/worker"
	"xlb/dataplane/xdpprog"
	"xlb/healthcheck"
)

// workerBatch is how many frames a worker takes from its ring per round.
const workerBatch = worker.DefaultBatch

// initialWeight is every backend's weight until it reports one: 0, as for
// a backend whose probes were never answered (W1a). While every backend of
// a weighted service has it, they share equally (W1b).
const initialWeight = 0

// runAppliance brings the data plane up on cfg's interface, serves until
// ctx is done (SIGTERM, SIGINT) and takes everything down again. Every
// resource is released by a defer, in reverse order of creation, on every
// return path: workers stop before their sockets close, and the XDP
// program is detached (its link closed) before its maps are. The link is a
// bpf_link, so even a kill -9 leaves no program behind. Each signal on hup
// reloads cfg's file (X2).
func runAppliance(ctx context.Context, cfg *config.Config, log *zap.Logger, hup <-chan os.Signal) error {
	d := &cfg.Dataplane
	ifname := d.Interface
	// The checks that fail for an operator's mistake come first and end in
	// one line, before anything is logged.
	if err := checkPrivileges(); err != nil {
		return err
	}
	link, err := netlink.LinkByName(ifname)
	if err != nil {
		var nf netlink.LinkNotFoundError
		if errors.As(err, &nf) || errors.Is(err, unix.ENODEV) {
			return fmt.Errorf("xlb run: interface %q (dataplane.interface in %s) does not exist in this network namespace", ifname, cfg.Path)
		}
		return privErr(fmt.Sprintf("looking up interface %q", ifname), err)
	}
	attrs := link.Attrs()
	count, err := rxQueueCount(ifname, attrs.NumRxQueues)
	if err != nil {
		return privErr("counting rx queues", err)
	}
	queues, cpus, err := resolveQueues(d, ifname, count)
	if err != nil {
		return err
	}
	if err := checkCPUs(cpus); err != nil {
		return err
	}

	base := log
	log = log.With(zap.String("interface", ifname))
	ct, err := conntrack.New(d.ConntrackCapacity)
	if err != nil {
		return fmt.Errorf("xlb run: conntrack: %w", err)
	}
	engine := dataplane.NewEngine(ct)

	// Backend MACs from the kernel's neighbour table, kept fresh; a
	// configured mac overrides it.
	res, err := neigh.New(ifname, base.Named("neigh")) // it names the interface itself
	if err != nil {
		return privErr("neighbour resolver", err)
	}
	defer res.Close()
	res.Want(neigh.TargetsOf(cfg))

	// Wait (bounded) for the MACs and routes, so the first clients find
	// their backends ready and encapsulation knows its source.
	waitNeighbours(ctx, res, cfg, log)
	if ctx.Err() != nil {
		log.Info("signal received during startup: stopping")
		return nil
	}
	local := localOf(res, cfg, link, log)
	log.Info("local addresses", zap.String("mac", macString(local.MAC)),
		zap.Stringer("encap_src_v4", encapSrc(local.EncapSrcV4, local.HasSrcV4)),
		zap.Stringer("encap_src_v6", encapSrc(local.EncapSrcV6, local.HasSrcV6)),
		zap.Int("max_frame", local.MaxFrame))
	// Every backend starts unhealthy until its health check passes (until
	// one does, E1-E4 fall back to all backends).
	cp, err := controlplane.New(cfg, engine, controlplane.Options{
		Local:          local,
		InitialHealthy: false,
		InitialWeight:  initialWeight,
		Resolve:        res.Resolve,
		Logger:         log.Named("controlplane"),
	}, worker.NowMs())
	if err != nil {
		return fmt.Errorf("xlb run: control plane: %w", err)
	}
	// A MAC learned, changed or lost republishes the snapshot; so does
	// one that changed before OnChange was registered.
	res.OnChange(func() { cp.Publish(worker.NowMs()) })
	cp.Publish(worker.NowMs())

	// Health checks, on this namespace's kernel stack: the XDP program
	// passes their replies (not VIP traffic) to the kernel.
	targets, firstFeeds := healthTargets(cfg)
	// A reload replaces the feeds.
	feeds := &atomic.Pointer[map[string][]healthFeed]{}
	feeds.Store(&firstFeeds)
	hlog := base.Named("healthcheck")
	hmetrics := admin.NewHealthMetrics()
	hc := healthcheck.New(hlog, healthcheck.Options{Notify: healthApplier(cp, func() map[string][]healthFeed { return *feeds.Load() }, worker.NowMs, hmetrics, hlog)})
	if err := hc.Set(targets); err != nil {
		return fmt.Errorf("xlb run: %w", err)
	}
	hctx, stopChecks := context.WithCancel(ctx)
	var hwg sync.WaitGroup
	hwg.Go(func() { _ = hc.Run(hctx) })
	defer func() {
		stopChecks()
		hwg.Wait()
		log.Info("health checks stopped")
	}()
	log.Info("health checks started", zap.Int("targets", len(targets)),
		zap.Int("max_concurrent", healthcheck.DefaultMaxConcurrent))

	maxQueue := 0
	for _, q := range queues {
		maxQueue = max(maxQueue, q)
	}
	objs, err := xdpprog.Load(maxQueue + 1)
	if errors.Is(err, unix.EPERM) {
		return privErr("loading the XDP program", err)
	}
	if err != nil {
		// A verifier rejection: its log follows, line by line.
		return fmt.Errorf("xlb run: %w", err)
	}
	defer objs.Close()
	vips := configVIPs(cfg)
	if err := objs.SetVIPs(vips); err != nil {
		return privErr("setting the VIPs", err)
	}
	xdpLink, mode, err := objs.Attach(attrs.Index, xdpMode(d.XDPMode))
	if errors.Is(err, unix.EBUSY) || errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("xlb run: %s already has an XDP program (another xlb?): %s", ifname, oneLine(err))
	}
	if err != nil {
		return privErr("attaching XDP to "+ifname, err)
	}
	defer func() {
		if cerr := xdpLink.Close(); cerr != nil {
			log.Error("detaching the XDP program", zap.Error(cerr))
			return
		}
		log.Info("XDP program detached")
	}()
	log.Info("XDP program attached", zap.String("xdp_mode", string(mode)), zap.Stringer("requested", d.XDPMode))

	sockets, rings, err := openSockets(attrs.Index, queues, d, objs, log)
	defer func() {
		for _, s := range sockets {
			if cerr := s.Close(); cerr != nil {
				log.Error("closing AF_XDP socket", zap.Int("queue", s.Queue()), zap.Error(cerr))
			}
		}
	}()
	if err != nil {
		return err
	}

	workers := make([]*worker.Worker, len(queues))
	for i, q := range queues {
		w, err := worker.New(engine, rings[i], sockets[i], worker.Config{Queue: q, CPU: cpus[i], Batch: workerBatch})
		if err != nil {
			return fmt.Errorf("xlb run: %w", err)
		}
		workers[i] = w
	}
	wctx, stopWorkers := context.WithCancel(ctx)
	failed := make(chan error, len(workers))
	var wg sync.WaitGroup
	for _, w := range workers {
		wg.Go(func() {
			if err := w.Run(wctx); err != nil {
				failed <- err
			}
		})
	}
	// Runs before the sockets' defer: no socket closes under its worker.
	defer func() {
		stopWorkers()
		wg.Wait()
		log.Info("workers stopped")
	}()

	stats := make([]admin.QueueStats, len(workers))
	for i, w := range workers {
		stats[i] = admin.QueueStats{Queue: w.Queue(), Stats: w.Stats()}
	}
	info := runInfo{ifname: ifname, ifindex: attrs.Index, mode: mode, zeroCopy: d.ZeroCopy, objs: objs, sockets: sockets, rings: rings, workers: workers,
		health: func() []healthInfo { return healthStatus(hc, *feeds.Load()) }}
	rl := &reloader{path: cfg.Path, vips: objs, neigh: res, hc: hc, cp: cp, feeds: feeds, now: worker.NowMs,
		log: log.Named("reload"), cur: cfg}
	srv, err := admin.New(cfg.Admin.Listen, &runSources{cp: cp, ct: ct, workers: stats, now: worker.NowMs, info: info.get,
		reloads: rl.report, health: hmetrics}, log.Named("admin"))
	if err != nil {
		return fmt.Errorf("xlb run: %w", err)
	}
	if err := srv.Start(); err != nil {
		return fmt.Errorf("xlb run: admin listener on %s: %w", cfg.Admin.Listen, err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
		defer cancel()
		if cerr := srv.Close(cctx); cerr != nil {
			log.Warn("closing the admin listener", zap.Error(cerr))
		}
	}()

	logSummary(log, cfg, queues, cpus, mode, sockets, vips, srv.Addr().String())
	for {
		select {
		case <-ctx.Done():
			log.Info("signal received: stopping")
			return nil
		case err := <-failed:
			log.Error("a worker failed: stopping", zap.Error(err))
			return fmt.Errorf("xlb run: %w", err)
		case <-hup:
			log.Info("SIGHUP: reloading", zap.String("file", cfg.Path))
			_ = rl.reload() // it logs and counts its errors
		}
	}
}

// openSockets opens one AF_XDP socket per queue, with its ring, and
// registers each in the program's XSKMAP. The sockets opened are returned
// also on error, for the caller to close.
func openSockets(ifindex int, queues []int, d *config.Dataplane, objs *xdpprog.Objects, log *zap.Logger) ([]*afxdp.Socket, []*afxdp.Ring, error) {
	opts := afxdp.DefaultOpts()
	opts.FrameSize = uint32(d.FrameSize)
	rs := uint32(d.RingSize)
	opts.FillRingSize, opts.CompletionRingSize, opts.RxRingSize, opts.TxRingSize = rs, rs, rs, rs
	// Enough chunks for a full fill ring and a full TX ring at once.
	opts.NumFrames = 2 * rs
	opts.ZeroCopy = zeroCopy(d.ZeroCopy)
	var (
		sockets []*afxdp.Socket
		rings   []*afxdp.Ring
	)
	for _, q := range queues {
		s, err := afxdp.New(ifindex, q, opts)
		if err != nil {
			return sockets, rings, privErr(fmt.Sprintf("AF_XDP socket on queue %d", q), err)
		}
		sockets = append(sockets, s)
		r, err := afxdp.NewRing(s, workerBatch)
		if err != nil {
			return sockets, rings, fmt.Errorf("xlb run: queue %d: %w", q, err)
		}
		rings = append(rings, r)
		if err := objs.RegisterSocket(q, s.FD()); err != nil {
			return sockets, rings, privErr(fmt.Sprintf("registering queue %d's socket", q), err)
		}
		log.Info("AF_XDP socket bound", zap.Int("queue", q), zap.Stringer("bind_mode", s.Mode()),
			zap.Stringer("zero_copy", d.ZeroCopy))
	}
	return sockets, rings, nil
}

// configVIPs lists the VIPs of the forwarding rules, each once.
func configVIPs(cfg *config.Config) []netip.Addr {
	var vips []netip.Addr
	seen := map[netip.Addr]bool{}
	for _, r := range cfg.Rules {
		if !seen[r.VIP] {
			seen[r.VIP] = true
			vips = append(vips, r.VIP)
		}
	}
	return vips
}

func zeroCopy(z config.ZeroCopy) afxdp.ZeroCopy {
	switch z {
	case config.ZeroCopyOn:
		return afxdp.ZeroCopyOn
	case config.ZeroCopyOff:
		return afxdp.ZeroCopyOff
	}
	return afxdp.ZeroCopyAuto
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

package appliance

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"xlb/controlplane/admin"
	"xlb/controlplane/flowsync"
	"xlb/dataplane/worker"
)

// syncRingSize is each worker's ring of flows for the sync goroutine:
// with the goroutine draining it every few ms, 8192 records hold a burst
// of new flows far above what max_records_per_sec lets out anyway.
const syncRingSize = 8192

// flowSync starts [flow_sync] (nothing without it): the workers made next
// hand the flows they confirm to rings, the sync goroutine shares them
// with the peers and stores theirs. A starting instance whose table was
// not kept (pull_on_start) fetches the peers' table first; the announcer
// holds the VIPs back until that ends.
func (s *stack) flowSync() error {
	c := s.cfg.FlowSync
	if c == nil {
		return nil
	}
	s.engine.EnableFlowSync(syncRingSize)
	fs, err := flowsync.New(flowsync.Options{Config: c, Engine: s.engine, Now: worker.NowMs, Log: s.base.Named("flowsync"),
		AdoptDraining: s.adoptDraining})
	if err != nil {
		return fmt.Errorf("flow_sync: %w", err)
	}
	s.fs = fs
	ctx, cancel := context.WithCancel(s.life)
	var wg sync.WaitGroup
	wg.Go(func() { fs.Run(ctx) })
	s.undo = append(s.undo, func() {
		cancel()
		wg.Wait()
		s.log.Info("flow sync stopped")
	})
	s.log.Info("flow sync started", zap.Stringer("listen", c.Listen), zap.Int("peers", len(c.Peers)),
		zap.Int("keys", len(c.Keys)), zap.Int("max_records_per_sec", c.MaxRecordsPerSec))
	switch {
	case !c.PullOnStart:
	case s.restore != nil:
		s.log.Info("flow table kept from the previous process: not pulled from a peer")
	default:
		s.pull = &pullState{done: make(chan struct{}), settle: s.waitAdopted}
		wg.Go(func() { s.pull.run(ctx, fs, c.PullTimeout, s.log) })
	}
	return nil
}

// pullState is the table pull at start, for the announcer (done) and
// status (report).
type pullState struct {
	done   chan struct{}
	result atomic.Pointer[flowsync.PullResult]
	// settle runs after the pull, before done closes (nil: nothing).
	settle func(ctx context.Context)
}

// adoptDraining makes the backends the pulled peer drains, that this
// configuration lacks, draining here too (the control plane publishes
// them before the pull merges records naming them), and has the resolver
// follow their MACs: a frame to a backend whose MAC is unknown is
// dropped (backend-not-ready).
func (s *stack) adoptDraining(bs []flowsync.DrainingBackend) {
	n := s.cp.AdoptDraining(bs, worker.NowMs())
	s.log.Info("draining backends of the pulled peer adopted", zap.Int("offered", len(bs)), zap.Int("adopted", n))
	if n == 0 {
		return
	}
	s.follow.Lock()
	defer s.follow.Unlock()
	if s.rl != nil {
		s.rl.reap() // follows the control plane's draining backends, forgets them when they end
		return
	}
	// No reload can run before the reloader exists: what it would follow
	// is the configuration's backends and the draining ones.
	dr, _ := s.cp.Draining(worker.NowMs())
	resolverWants{s.res}.Want(s.cfg, dr)
	s.adoptedEarly = true
}

// waitAdopted waits, bounded, for the MACs of the draining backends
// (adopted ones among them) before the VIPs are announced.
func (s *stack) waitAdopted(ctx context.Context) {
	if dr, _ := s.cp.Draining(worker.NowMs()); dr != nil {
		waitNeighbours(ctx, s.res, dr, s.log)
	}
}

// run pulls, logs how it went and closes done: then the VIPs may be
// announced, whether the pull succeeded or not (a fleet's first instance
// has no peer to pull from).
func (p *pullState) run(ctx context.Context, fs *flowsync.Syncer, timeout time.Duration, log *zap.Logger) {
	defer close(p.done)
	if p.settle != nil {
		defer p.settle(ctx)
	}
	start := time.Now()
	log.Info("pulling the flow table from a peer before announcing", zap.Duration("timeout", timeout))
	r := fs.Pull(ctx)
	p.result.Store(&r)
	if r.Err != nil {
		log.Warn("flow table not pulled: announcing anyway", zap.Error(r.Err), zap.Duration("waited", time.Since(start)))
		return
	}
	log.Info("flow table pulled", zap.String("peer", r.Peer), zap.Int("records", r.Records),
		zap.Int("stored", r.Stored), zap.Duration("took", r.Took))
}

// report is the pull as /status shows it.
func (p *pullState) report() *admin.FlowSyncPull {
	r := p.result.Load()
	if r == nil {
		return &admin.FlowSyncPull{}
	}
	out := &admin.FlowSyncPull{Done: true, Peer: r.Peer, Records: r.Records, Stored: r.Stored, TookMs: r.Took.Milliseconds()}
	if r.Err != nil {
		out.Error = r.Err.Error()
	}
	return out
}

// flowSyncReport is the [flow_sync] part of /status.
func flowSyncReport(fs *flowsync.Syncer, listen string, pull *pullState) *admin.FlowSyncReport {
	st := fs.Status()
	rep := &admin.FlowSyncReport{Listen: listen, Peers: make([]admin.FlowSyncPeer, 0, len(st.Peers))}
	for _, p := range st.Peers {
		rep.Peers = append(rep.Peers, admin.FlowSyncPeer{Address: p.Address.String(), Up: p.Up, LastHeardMs: p.LastHeard,
			LagMs: float64(p.LagMs), RecordsIn: p.RecordsIn, RecordsOut: p.RecordsOut})
	}
	if pull != nil {
		rep.Pull = pull.report()
	}
	return rep
}

// flowSyncStatus is what Status asks for the [flow_sync] part (nil
// without it).
func (s *stack) flowSyncStatus() func() *admin.FlowSyncReport {
	if s.fs == nil {
		return nil
	}
	fs, listen, pull := s.fs, s.cfg.FlowSync.Listen.String(), s.pull
	return func() *admin.FlowSyncReport { return flowSyncReport(fs, listen, pull) }
}

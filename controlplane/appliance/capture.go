package appliance

import (
	"context"
	"io"
	"sync/atomic"

	"xlb/controlplane/admin"
	"xlb/dataplane"
	"xlb/dataplane/capture"
	"xlb/dataplane/worker"
)

// capturer hands rings to the running workers; one capture at a time.
type capturer struct {
	workers []*worker.Worker
	engine  *dataplane.Engine
	busy    atomic.Bool
}

// Capture copies the frames req selects, from every worker, into w as
// pcapng (see package capture) until req.Count frames or ctx's end. The
// workers copy only while it runs; one capture at a time
// (admin.ErrCaptureBusy).
func (a *Appliance) Capture(ctx context.Context, req admin.CaptureRequest, w io.Writer) (capture.Stats, error) {
	r := a.cur.Load()
	if r == nil || r.capture == nil {
		return capture.Stats{}, ErrNotRunning
	}
	return r.capture.run(ctx, req, w)
}

func (c *capturer) run(ctx context.Context, req admin.CaptureRequest, w io.Writer) (capture.Stats, error) {
	if !c.busy.CompareAndSwap(false, true) {
		return capture.Stats{}, admin.ErrCaptureBusy
	}
	defer c.busy.Store(false)
	snap := req.Snap
	if snap <= 0 {
		snap = capture.DefaultSnapLen
	}
	rings := make([]*capture.Ring, len(c.workers))
	for i, wk := range c.workers {
		rings[i] = capture.NewRing(wk.Queue(), capture.DefaultSlots, snap, wk.Batch(), req.Filter)
		wk.SetCapture(rings[i])
	}
	defer func() {
		for _, wk := range c.workers {
			wk.SetCapture(nil)
		}
	}()
	s := &capture.Session{
		Rings: rings, Filter: req.Filter, Count: req.Count, Snap: snap,
		Epoch: worker.Epoch(), Flush: req.Flush, Resolve: c.resolve,
	}
	return s.Run(ctx, w)
}

// resolve names a backend from the snapshot published now.
func (c *capturer) resolve(ref dataplane.BackendRef) (capture.Named, bool) {
	snap := c.engine.Load()
	if snap == nil {
		return capture.Named{}, false
	}
	b := snap.Backend(ref)
	if b == nil {
		return capture.Named{}, false
	}
	n := capture.Named{Name: b.Name, IP: b.IP}
	if svc := snap.Service(b.Service); svc != nil {
		n.Service = svc.Name
	}
	return n, true
}

var (
	_ admin.Capturer = (*Appliance)(nil)
	_ admin.Reloader = (*Appliance)(nil)
)

// ReloadNow is ReloadFileWith for the admin socket's POST /reload and
// /reload-dry-run, returning what the reload changed (or would).
func (a *Appliance) ReloadNow(req admin.ReloadRequest) ([]string, error) {
	r := a.cur.Load()
	if r == nil {
		return nil, ErrNotRunning
	}
	return r.rl.reloadNow(req)
}

// reloadNow serves an admin socket's reload request.
func (r *reloader) reloadNow(req admin.ReloadRequest) ([]string, error) {
	changes, err := r.reloadFileChanges(ReloadOptions{AllowEmpty: req.AllowEmpty, Path: req.Path, DryRun: req.DryRun})
	return changes.Lines(), err
}

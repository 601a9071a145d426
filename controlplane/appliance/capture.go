package appliance

import (
	"context"
	"errors"
	"io"
	"sync/atomic"

	"xlb/dataplane"
	"xlb/dataplane/capture"
	"xlb/dataplane/worker"
)

// ErrCaptureBusy is returned by Capture while another capture runs: the
// workers have one ring each.
var ErrCaptureBusy = errors.New("appliance: a capture is already running")

// CaptureRequest is what `xlb capture` asks for.
type CaptureRequest struct {
	Filter capture.Filter
	Count  int // frames; 0: until ctx ends
	Snap   int // bytes per frame and direction; 0: capture.DefaultSnapLen
	// Flush is called after each burst written to the writer.
	Flush func()
}

// capturer hands rings to the running workers; one capture at a time.
type capturer struct {
	workers []*worker.Worker
	engine  *dataplane.Engine
	busy    atomic.Bool
}

// Capture copies the frames req selects, from every worker, into w as
// pcapng (see package capture) until req.Count frames or ctx's end. The
// workers copy only while it runs.
func (a *Appliance) Capture(ctx context.Context, req CaptureRequest, w io.Writer) (capture.Stats, error) {
	r := a.cur.Load()
	if r == nil || r.capture == nil {
		return capture.Stats{}, ErrNotRunning
	}
	return r.capture.run(ctx, req, w)
}

func (c *capturer) run(ctx context.Context, req CaptureRequest, w io.Writer) (capture.Stats, error) {
	if !c.busy.CompareAndSwap(false, true) {
		return capture.Stats{}, ErrCaptureBusy
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

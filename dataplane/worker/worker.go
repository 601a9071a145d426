package worker

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"runtime/debug"
	"sync/atomic"
	"time"

	"xlb/dataplane"
	"xlb/dataplane/capture"
)

// Poller is how an idle worker waits for frames: afxdp.Socket.Poll. With
// timeout 0 it returns at once (after a syscall only if the kernel asked
// for one); with a timeout it sleeps until frames arrive or it passes.
type Poller interface {
	Poll(timeout time.Duration) (bool, error)
}

// Defaults of Config.
const (
	DefaultBatch    = 64
	DefaultSpin     = 50 * time.Microsecond
	DefaultIdleWait = 10 * time.Millisecond
	// MaxIdleWait bounds IdleWait: it is also how long a sleeping worker
	// may take to notice that it should stop.
	MaxIdleWait = time.Second
)

// ErrConfig is wrapped by New for a configuration out of range.
var ErrConfig = errors.New("worker: invalid configuration")

// Config configures one Worker. The zero value of a field takes its default.
type Config struct {
	// Queue is the rx queue served (for errors and stats).
	Queue int
	// CPU pins the worker's thread; negative: not pinned.
	CPU int
	// Batch is the most frames one round receives (default 64).
	Batch int
	// Spin is how long an idle worker keeps polling without sleeping
	// (default 50µs): a burst that resumes within it costs no wakeup.
	Spin time.Duration
	// IdleWait is how long one sleep in Poller.Poll lasts at most once
	// Spin has passed (default 10ms, at most MaxIdleWait).
	IdleWait time.Duration
}

func (c Config) withDefaults() (Config, error) {
	if c.Batch == 0 {
		c.Batch = DefaultBatch
	}
	if c.Spin == 0 {
		c.Spin = DefaultSpin
	}
	if c.IdleWait == 0 {
		c.IdleWait = DefaultIdleWait
	}
	switch {
	case c.Batch < 0 || c.Batch > 1<<16:
		return c, fmt.Errorf("%w: batch %d: must be 1..65536", ErrConfig, c.Batch)
	case c.Spin < 0:
		return c, fmt.Errorf("%w: spin %v: must be >= 0", ErrConfig, c.Spin)
	case c.IdleWait < 0 || c.IdleWait > MaxIdleWait:
		return c, fmt.Errorf("%w: idle wait %v: must be 0..%v", ErrConfig, c.IdleWait, MaxIdleWait)
	case c.Queue < 0:
		return c, fmt.Errorf("%w: queue %d: must be >= 0", ErrConfig, c.Queue)
	}
	return c, nil
}

// Worker polls one port. Run belongs to one goroutine; Stats and Counters
// may be read from any.
type Worker struct {
	cfg     Config
	port    dataplane.FramePort
	poller  Poller
	decider *dataplane.Decider
	frames  []dataplane.Frame

	idle      bool  // the last round received nothing
	idleSince int64 // ns, when the current idle stretch began

	// capture, while `xlb capture` runs: the ring this worker copies
	// frames into. One atomic load per round when nil.
	capture atomic.Pointer[capture.Ring]

	c counters
}

type counters struct {
	batches, frames, spins, sleeps atomic.Uint64
}

// Counters describe what the loop did, for tests and diagnostics.
type Counters struct {
	Batches uint64 // rounds that received frames
	Frames  uint64 // frames received
	Spins   uint64 // empty rounds that polled without sleeping
	Sleeps  uint64 // empty rounds that slept in Poller.Poll
}

// New returns a worker deciding port's frames with engine, waiting on
// poller when idle. It wraps ErrConfig for a bad Config.
func New(engine *dataplane.Engine, port dataplane.FramePort, poller Poller, cfg Config) (*Worker, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if engine == nil || port == nil || poller == nil {
		return nil, fmt.Errorf("%w: queue %d: engine, port and poller are required", ErrConfig, cfg.Queue)
	}
	return &Worker{
		cfg:     cfg,
		port:    port,
		poller:  poller,
		decider: engine.NewDecider(),
		frames:  make([]dataplane.Frame, cfg.Batch),
	}, nil
}

// Queue is the rx queue the worker serves.
func (w *Worker) Queue() int { return w.cfg.Queue }

// CPU is the CPU the worker is pinned to, negative when none.
func (w *Worker) CPU() int { return w.cfg.CPU }

// Stats are the engine's counters of this worker.
func (w *Worker) Stats() *dataplane.Stats { return w.decider.Stats() }

// SetCapture makes the worker copy frames into r from its next round on;
// nil stops. The ring must have been made for this worker's batch size
// (capture.NewRing's batch >= Config.Batch copies the whole batch).
func (w *Worker) SetCapture(r *capture.Ring) { w.capture.Store(r) }

// Batch is the most frames one round receives.
func (w *Worker) Batch() int { return w.cfg.Batch }

// Counters returns the loop's counters.
func (w *Worker) Counters() Counters {
	return Counters{
		Batches: w.c.batches.Load(),
		Frames:  w.c.frames.Load(),
		Spins:   w.c.spins.Load(),
		Sleeps:  w.c.sleeps.Load(),
	}
}

// Rounds is how many times the loop has gone round: a batch, a spin or a
// sleep in Poller.Poll each count one, so an idle worker's rounds still
// advance at least once per IdleWait, and only a worker stuck inside a
// round (or stopped) stops them. It is the worker's heartbeat for a
// liveness check (the service manager's watchdog).
func (w *Worker) Rounds() uint64 {
	return w.c.batches.Load() + w.c.spins.Load() + w.c.sleeps.Load()
}

// Run polls until ctx is done, then returns nil; or returns the error that
// stopped it (pinning, or the poller failing). It runs on a locked OS
// thread; a pinned thread is never handed back to the runtime (it exits
// with the goroutine), so no other goroutine inherits its CPU mask.
func (w *Worker) Run(ctx context.Context) error {
	runtime.LockOSThread()
	// A fault in a file table's mapping (the file truncated under us) is
	// a panic that decide contains, not a crash; any other still crashes.
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	if w.cfg.CPU >= 0 {
		if err := pin(w.cfg.CPU); err != nil {
			return fmt.Errorf("worker: pinning queue %d's thread to CPU %d: %w", w.cfg.Queue, w.cfg.CPU, err)
		}
	} else {
		defer runtime.UnlockOSThread()
	}
	done := ctx.Done()
	for {
		select {
		case <-done:
			return nil
		default:
		}
		if err := w.round(); err != nil {
			return fmt.Errorf("worker: queue %d: %w", w.cfg.Queue, err)
		}
	}
}

// round is one iteration: a batch when frames are waiting, else one poll,
// spinning or sleeping by how long the worker has been idle.
func (w *Worker) round() error {
	now := nowNs()
	var n int
	if r := w.capture.Load(); r != nil {
		n = w.pollCapturing(r, now)
	} else {
		n = w.poll(msOf(now))
	}
	if n > 0 {
		w.idle = false
		// Single writer: a load and a store, no locked read-modify-write.
		w.c.batches.Store(w.c.batches.Load() + 1)
		w.c.frames.Store(w.c.frames.Load() + uint64(n))
		return nil
	}
	if !w.idle {
		w.idle, w.idleSince = true, now
	}
	var timeout time.Duration
	if time.Duration(now-w.idleSince) >= w.cfg.Spin {
		timeout = w.cfg.IdleWait
		w.c.sleeps.Store(w.c.sleeps.Load() + 1)
	} else {
		w.c.spins.Store(w.c.spins.Load() + 1)
	}
	_, err := w.poller.Poll(timeout)
	return err
}

// poll is Decider.Poll with the decision contained (decide).
func (w *Worker) poll(now int64) int {
	n := w.port.Receive(w.frames)
	if n == 0 {
		return 0
	}
	w.decide(w.frames[:n], now)
	w.port.Complete(w.frames[:n])
	return n
}

// decide is Decider.Process, but for a fault in the mapping of a file
// table (Run makes faults panics): the decider replaces the table by an
// empty one and decides the rest of the batch with it (Contain), and the
// loop goes on. Any other panic goes on too. A deferred call per batch,
// no allocation.
func (w *Worker) decide(batch []dataplane.Frame, now int64) {
	since := w.decider.Decided()
	defer func() {
		if r := recover(); r != nil && !w.decider.Contain(r, batch, since, now) {
			panic(r)
		}
	}()
	w.decider.Process(batch, now)
}

// pollCapturing is poll with the capture ring's copies around the
// decision: as received before it (the engine rewrites in place), as sent
// after it, before the frames are completed.
func (w *Worker) pollCapturing(r *capture.Ring, now int64) int {
	n := w.port.Receive(w.frames)
	if n == 0 {
		return 0
	}
	batch := w.frames[:n]
	r.Before(batch)
	w.decide(batch, msOf(now))
	r.After(batch, now)
	w.port.Complete(batch)
	return n
}

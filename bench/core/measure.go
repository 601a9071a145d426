package core

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"xlb/dataplane"
)

// batch is the frames a worker takes from its port per poll, as in
// production (the engine decides up to 64 at once).
const batch = 64

// run is one measurement: workers polling their own ports in parallel for
// a duration.
type run struct {
	bed      *bed          // nil: the "ring only" baseline (no engine)
	frames   [][][]byte    // per worker
	dur      time.Duration // measured time
	onStart  func()        // called as the window opens (a CPU profile); its allocations count
	sync     bool          // deciders with flow-sync rings, drained by a goroutine
	ports    []*dataplane.MemFramePort
	deciders []*dataplane.Decider
	rings    []*dataplane.SyncRing
}

// syncRing is the records of a decider's flow-sync ring in lbbench: what
// 2 ms of a worker's new flows at 2 Mpps fill.
const syncRing = 4096

// drainRings pops r.rings until stop, as the sync goroutine would: every
// 100 µs once a pass found them all but empty. It closes started once it
// allocated all it will: its buffer and the goroutine's timer, made by
// its first time.Sleep; the window's allocation count stays the workers'.
func (r *run) drainRings(stop *atomic.Bool, started chan<- struct{}) {
	buf := make([]dataplane.SyncRecord, 256)
	time.Sleep(time.Microsecond)
	close(started)
	for !stop.Load() {
		more := false
		for _, ring := range r.rings {
			more = ring.Pop(buf) == len(buf) || more
		}
		if !more {
			time.Sleep(100 * time.Microsecond)
		}
	}
}

// startDrain takes the rings of the n deciders just made (the engine's
// last; its next deciders, the next case's, get none) and drains them
// in a goroutine until the returned func is called.
func (r *run) startDrain(n int) (stop func()) {
	all := r.bed.eng.SyncRings()
	r.rings = all[len(all)-n:]
	r.bed.eng.EnableFlowSync(0)
	var halt atomic.Bool
	var drained sync.WaitGroup
	drained.Add(1)
	started := make(chan struct{})
	go func() {
		defer drained.Done()
		r.drainRings(&halt, started)
	}()
	<-started
	return func() {
		halt.Store(true)
		drained.Wait()
	}
}

// syncCounts sums the rings' pushes and drops.
func (r *run) syncCounts() (pushed, dropped uint64) {
	for _, ring := range r.rings {
		pushed, dropped = pushed+ring.Pushed(), dropped+ring.Drops()
	}
	return pushed, dropped
}

// sample is what one measurement found.
type sample struct {
	packets uint64
	mpps    float64       // all workers: the sum of their rates
	wallNs  float64       // wall time per packet and worker (1000 / Mpps per worker)
	cpuNs   float64       // thread CPU time per packet
	cpu     time.Duration // thread CPU time, all workers
	allocs  uint64        // heap allocations of the process during the window
	newConn uint64        // packets forwarded as new connections
	// Flow-sync records pushed and dropped in the window (sync).
	syncRecords, syncDrops uint64
}

type workerResult struct {
	pkts uint64
	wall time.Duration
	cpu  time.Duration
}

// measure runs r. Each worker locks its OS thread, warms up (one pass over
// its frames, which also sizes its counters and, for SYNs, inserts their
// keys), then waits for the others; the window starts for all at once and
// each stops on its own clock after r.dur. Allocations are the process's
// mallocs between the moment every worker waits and the moment all are
// done: nothing else runs then.
func (r *run) measure() (sample, error) {
	n := len(r.frames)
	r.ports = make([]*dataplane.MemFramePort, n)
	r.deciders = make([]*dataplane.Decider, n)
	if r.sync && r.bed != nil {
		r.bed.eng.EnableFlowSync(syncRing)
	}
	for w := range n {
		r.ports[w] = dataplane.NewMemFramePort(r.frames[w], batch)
		if r.bed != nil {
			r.deciders[w] = r.bed.eng.NewDecider()
		}
	}
	if r.sync && r.bed != nil {
		defer r.startDrain(n)()
	}
	var snap *dataplane.Snapshot
	if r.bed != nil {
		snap = r.bed.eng.Load()
	}
	res := make([]workerResult, n)
	var m0, m1 runtime.MemStats
	var finishing atomic.Int32
	finishing.Store(int32(n))
	var ready, done sync.WaitGroup
	start := make(chan struct{})
	ready.Add(n)
	done.Add(n)
	for w := range n {
		go func() {
			defer done.Done()
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			port, dc := r.ports[w], r.deciders[w]
			frames := make([]dataplane.Frame, batch)
			poll := func(now int64) int {
				if dc != nil {
					return dc.Poll(port, frames, now)
				}
				return portOnly(port, frames)
			}
			for warm := 0; warm < len(r.frames[w]) || warm < 4*batch; {
				warm += poll(clock())
			}
			ready.Done()
			<-start
			cpu0 := threadCPU()
			t0 := time.Since(epoch)
			end := t0 + r.dur
			var pkts uint64
			for {
				// One clock read per batch, as a production worker: the
				// engine's ms clock and the end of the window.
				// At least one batch, even when the scheduler kept the
				// thread off the CPU for the whole window (a loaded
				// machine): every worker has a figure.
				el := time.Since(epoch)
				if el >= end && pkts > 0 {
					res[w] = workerResult{pkts: pkts, wall: el - t0, cpu: threadCPU() - cpu0}
					// The last worker to finish closes the allocation
					// window, still on its locked thread: what the runtime
					// does once the workers exit (a thread to run the
					// waiting goroutine) is not theirs.
					if finishing.Add(-1) == 0 {
						runtime.ReadMemStats(&m1)
					}
					return
				}
				pkts += uint64(poll(1000 + el.Milliseconds()))
			}
		}()
	}
	ready.Wait()
	var new0 uint64
	for _, dc := range r.deciders {
		if dc != nil {
			new0 += newConnections(dc, snap)
		}
	}
	rx0 := make([]uint64, n)
	for w, port := range r.ports {
		rx0[w] = port.Received
	}
	// The first stop-the-world may start an OS thread for the idle P (the
	// workers hold theirs, locked), and creating one allocates in the
	// runtime; the second finds it parked. What is counted is then the
	// workers' own.
	runtime.ReadMemStats(&m0)
	runtime.ReadMemStats(&m0)
	push0, drop0 := r.syncCounts()
	if r.onStart != nil {
		r.onStart()
	}
	close(start)
	done.Wait()
	push1, drop1 := r.syncCounts()

	var s sample
	for w := range n {
		s.packets += res[w].pkts
		s.cpu += res[w].cpu
		if res[w].wall > 0 {
			s.mpps += float64(res[w].pkts) / res[w].wall.Seconds() / 1e6
		}
		port := r.ports[w]
		if port.Forwarded != port.Received {
			return s, fmt.Errorf("worker %d forwarded %d of %d frames (passed %d, dropped %d)%s",
				w, port.Forwarded, port.Received, port.Passed, port.Dropped, dropReasons(r.deciders[w]))
		}
		if got := port.Received - rx0[w]; got != res[w].pkts {
			return s, fmt.Errorf("worker %d: port received %d in the window, worker counted %d", w, got, res[w].pkts)
		}
	}
	if s.packets == 0 {
		return s, fmt.Errorf("no packet in %v", r.dur)
	}
	s.allocs = m1.Mallocs - m0.Mallocs
	s.syncRecords, s.syncDrops = push1-push0, drop1-drop0
	s.wallNs = 1000 * float64(n) / s.mpps
	s.cpuNs = float64(s.cpu.Nanoseconds()) / float64(s.packets)
	for _, dc := range r.deciders {
		if dc != nil {
			s.newConn += newConnections(dc, snap)
		}
	}
	s.newConn -= new0
	return s, nil
}

// portOnly is the "ring only" baseline: the port's copy of each frame and
// its completion, every frame forwarded, no engine.
func portOnly(port *dataplane.MemFramePort, frames []dataplane.Frame) int {
	n := port.Receive(frames)
	for i := range n {
		frames[i].Verdict = dataplane.VerdictForward
	}
	port.Complete(frames[:n])
	return n
}

func dropReasons(dc *dataplane.Decider) string {
	if dc == nil {
		return ""
	}
	s := ""
	for r := range dataplane.NumReasons {
		if n := dc.Stats().Drops[r].Load(); n > 0 {
			s += fmt.Sprintf(" %v=%d", dataplane.Reason(r), n)
		}
	}
	if s != "" {
		s = "; drops:" + s
	}
	return s
}

// spareThreads makes the runtime create n OS threads now and keep them
// idle. A worker locked to its thread that the scheduler preempts (every
// 10 ms) hands its P to another thread; when none is idle the runtime
// creates one, and that allocates (about seven objects): runtime
// allocations that are not the engine's would then land in a measured
// window. Go keeps idle threads, so the pool made here lasts.
func spareThreads(n int) {
	var locked sync.WaitGroup
	release := make(chan struct{})
	locked.Add(n)
	var done sync.WaitGroup
	done.Add(n)
	for range n {
		go func() {
			defer done.Done()
			runtime.LockOSThread()
			locked.Done()
			<-release // blocked while locked: its thread is held, so the next goroutine needs another
			runtime.UnlockOSThread()
		}()
	}
	locked.Wait()
	close(release)
	done.Wait()
}

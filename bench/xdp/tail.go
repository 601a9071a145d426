package xdp

import (
	"bufio"
	"strconv"
	"strings"
	"time"

	"xlb/bench/xdp/topo"
)

// Tail is, for a case of xlb, what its worker and the middle's NAPI thread
// did and waited on over the case, beside the latency it measured: the
// instruments that say where a latency tail comes from. The worker polls,
// so it is always runnable unless it sleeps in poll(2); time it spends
// runnable but off its core (run-queue wait) is time something else had
// the core: the NAPI thread that feeds it (part of the path), other
// processes, xlb's own other threads (the Go runtime's GC among them).
type Tail struct {
	// The worker thread (xlb's busiest over the case): CPU time, time
	// waiting runnable on the run queue, times preempted (involuntary
	// context switches) and times it slept (voluntary: poll(2)).
	WorkerRunMS     float64 `json:"worker_run_ms"`
	WorkerWaitMS    float64 `json:"worker_runqueue_wait_ms"`
	WorkerPreempted uint64  `json:"worker_preempted"`
	WorkerSlept     uint64  `json:"worker_slept"`
	// RuntimeParks are the worker's sleeps that were not poll(2) sleeps
	// (WorkerSlept - IdleSleeps): the Go scheduler parking its locked
	// thread, as it does when it preempts the worker (every 10 ms of
	// running without a reschedule) or stops the world.
	RuntimeParks uint64 `json:"worker_runtime_parks"`
	// XLBOthersMS is the CPU time of xlb's threads but the worker (health
	// checks, admin, the Go runtime), wherever they ran.
	XLBOthersMS float64 `json:"xlb_other_threads_ms"`
	// The middle veth's NAPI thread: CPU time and run-queue wait (a frame
	// waits in the veth ring while it does), and the times it got the CPU
	// (NAPIWaitMS / NAPISlices is its mean wait for it).
	NAPIRunMS  float64 `json:"napi_run_ms"`
	NAPIWaitMS float64 `json:"napi_runqueue_wait_ms"`
	NAPISlices uint64  `json:"napi_slices"`
	// WorkerSlices: the times the worker got the CPU.
	WorkerSlices uint64 `json:"worker_slices"`
	// OthersMS is the middle core's busy time that was neither the
	// worker's nor the NAPI thread's nor stolen (/proc/stat, 10 ms ticks:
	// ±20 ms): other processes, xlb's other threads, interrupts. StealMS
	// is the time the VM's host ran something else on that virtual CPU
	// (/proc/stat's steal).
	OthersMS float64 `json:"middle_core_others_ms"`
	StealMS  float64 `json:"middle_core_steal_ms"`
	// xlb's loop and socket counters (/status): rounds that slept in
	// poll(2) with a timeout after the spin, poll(2) calls in all.
	IdleSleeps uint64 `json:"idle_sleeps"`
	Polls      uint64 `json:"polls"`
	// The kernel's counters of the worker's socket (XDP_STATISTICS):
	// frames dropped for a full rx ring or an empty fill ring; and the
	// frames xlb dropped for a full TX ring.
	RxRingFull    uint64 `json:"rx_ring_full"`
	FillRingEmpty uint64 `json:"fill_ring_empty"`
	TxRingFull    uint64 `json:"tx_ring_full"`
	// The Go runtime's collections in xlb over the case (GODEBUG=gctrace=1):
	// how many, and their stop-the-world pauses, summed and the longest.
	GCs          int     `json:"gcs"`
	GCPauseMS    float64 `json:"gc_pause_ms"`
	GCMaxPauseMS float64 `json:"gc_max_pause_ms"`
	// FramesOver1ms are the frames whose latency was 1 ms or more.
	FramesOver1ms uint64 `json:"frames_over_1ms"`
}

// napiStat sums the middle veth's NAPI threads' threadStats.
func (b *bench) napiStat() threadStat {
	var s threadStat
	for _, pid := range topo.NAPIThreads(b.topo.MidDev) {
		t := taskStat("/proc/" + strconv.Itoa(pid))
		s.cpu += t.cpu
		s.wait += t.wait
		s.slices += t.slices
		s.vol += t.vol
		s.nonvol += t.nonvol
	}
	return s
}

// gcPause is one collection's stop-the-world time.
type gcPause struct {
	stw time.Duration
}

// parseGCTrace returns the collections GODEBUG=gctrace=1 printed in log:
// lines "gc N @Ts P%: A+B+C ms clock, ...", whose A (sweep termination)
// and C (mark termination) stop the world. Other lines are skipped.
func parseGCTrace(log string) []gcPause {
	var out []gcPause
	sc := bufio.NewScanner(strings.NewReader(log))
	for sc.Scan() {
		l := sc.Text()
		if !strings.HasPrefix(l, "gc ") {
			continue
		}
		_, rest, ok := strings.Cut(l, "%: ")
		if !ok {
			continue
		}
		clock, _, ok := strings.Cut(rest, " ms clock")
		if !ok {
			continue
		}
		parts := strings.Split(clock, "+")
		if len(parts) != 3 {
			continue
		}
		a, err1 := strconv.ParseFloat(parts[0], 64)
		c, err2 := strconv.ParseFloat(parts[2], 64)
		if err1 != nil || err2 != nil {
			continue
		}
		out = append(out, gcPause{stw: time.Duration((a + c) * float64(time.Millisecond))})
	}
	return out
}

// gcTail fills t's collection figures from the pauses.
func (t *Tail) gcTail(ps []gcPause) {
	t.GCs = len(ps)
	for _, p := range ps {
		ms := float64(p.stw) / 1e6
		t.GCPauseMS += ms
		t.GCMaxPauseMS = max(t.GCMaxPauseMS, ms)
	}
}

package xdp

import (
	"bufio"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"xlb/bench/xdp/gen"
	"xlb/bench/xdp/sink"
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
	// When is, for a latency run, what the worker and the NAPI thread did
	// while the slow frames were on their way, and otherwise.
	When *When `json:"when,omitempty"`
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

// The worker's and the NAPI thread's schedstat sampled through a latency
// run, to see what they did while the frames that took long were on
// their way, next to what they did otherwise.
const (
	// sampleEvery is the sampler's period; windowWidth the resolution of
	// the largest latency by send time (sink.Windows).
	sampleEvery = 2 * time.Millisecond
	windowWidth = 250 * time.Microsecond
	// tailLatency marks a frame of the tail; calmLatency a window without.
	tailLatency = time.Millisecond
	calmLatency = 200 * time.Microsecond
)

// schedSample is the worker's and the NAPI thread's run and run-queue wait
// so far, at time at (gen.Now's clock).
type schedSample struct {
	at                       int64
	wRun, wWait, nRun, nWait time.Duration
}

// readSample reads one schedSample.
func readSample(at int64, worker string, napi []string) schedSample {
	s := schedSample{at: at}
	s.wRun, s.wWait = schedRunWait(worker)
	for _, d := range napi {
		r, w := schedRunWait(d)
		s.nRun += r
		s.nWait += w
	}
	return s
}

// schedRunWait is a task's run time and run-queue wait (schedstat).
func schedRunWait(dir string) (run, wait time.Duration) {
	b, err := os.ReadFile(filepath.Join(dir, "schedstat"))
	if err != nil {
		return 0, 0
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0, 0
	}
	r, _ := strconv.ParseUint(f[0], 10, 64)
	w, _ := strconv.ParseUint(f[1], 10, 64)
	return time.Duration(r), time.Duration(w)
}

// When is what the worker and the NAPI thread did over the spans of a
// latency run in which frames took tailLatency or more (from a frame's
// send to the sample after its latency) and over the sample periods in
// which none took calmLatency: fractions of the spans' time. schedstat
// adds a run-queue wait when it ends, so a wait share may pass 1.
type When struct {
	TailSpans int   `json:"tail_spans"`
	CalmSpans int   `json:"calm_spans"`
	Tail      Share `json:"tail"`
	Calm      Share `json:"calm"`
}

// Share is what the time went to: the worker running, waiting on the run
// queue, asleep (neither: poll(2)); the NAPI thread running and waiting;
// the core neither of them ran on (other tasks, or idle).
type Share struct {
	WorkerRun   float64 `json:"worker_run"`
	WorkerWait  float64 `json:"worker_wait"`
	WorkerSleep float64 `json:"worker_asleep"`
	NAPIRun     float64 `json:"napi_run"`
	NAPIWait    float64 `json:"napi_wait"`
	CoreOther   float64 `json:"core_other_or_idle"`
}

// when sorts the sample periods of a run by the largest latency of the
// frames sent in them (w: windows from w.Start, every w.Width) and adds
// up what the samples say for each kind.
func when(ss []schedSample, w *sink.Windows) *When {
	if len(ss) < 2 || w == nil || w.Width <= 0 {
		return nil
	}
	maxIn := func(from, to int64) uint64 {
		var m uint64
		for i := max((from-w.Start)/w.Width, 0); i < int64(len(w.Max)) && w.Start+i*w.Width < to; i++ {
			m = max(m, w.Max[i])
		}
		return m
	}
	var r When
	var tail, calm [6]float64
	var tailT, calmT float64
	add := func(acc *[6]float64, a, b schedSample) float64 {
		dt := float64(b.at - a.at)
		wr, ww := float64(b.wRun-a.wRun), float64(b.wWait-a.wWait)
		nr, nw := float64(b.nRun-a.nRun), float64(b.nWait-a.nWait)
		acc[0] += wr
		acc[1] += ww
		acc[2] += max(dt-wr-ww, 0)
		acc[3] += nr
		acc[4] += nw
		acc[5] += max(dt-wr-nr, 0)
		return dt
	}
	for j := 0; j+1 < len(ss); j++ {
		m := maxIn(ss[j].at, ss[j+1].at)
		switch {
		case m >= uint64(tailLatency):
			// From the period's start to the first sample after its
			// slowest frame arrived.
			k := j + 1
			for k+1 < len(ss) && ss[k].at < ss[j+1].at+int64(m) {
				k++
			}
			tailT += add(&tail, ss[j], ss[k])
			r.TailSpans++
		case m > 0 && m < uint64(calmLatency):
			calmT += add(&calm, ss[j], ss[j+1])
			r.CalmSpans++
		}
	}
	share := func(acc [6]float64, t float64) Share {
		if t <= 0 {
			return Share{}
		}
		return Share{acc[0] / t, acc[1] / t, acc[2] / t, acc[3] / t, acc[4] / t, acc[5] / t}
	}
	r.Tail, r.Calm = share(tail, tailT), share(calm, calmT)
	return &r
}

// schedSampler reads schedSamples every sampleEvery until stopped.
type schedSampler struct {
	done chan struct{}
	out  chan []schedSample
}

// startSampler samples worker thread tid and the NAPI threads napi from a
// thread of its own pinned to cpu (the generator's: not the core measured;
// -1: unpinned).
func startSampler(tid int, napi []int, cpu int) *schedSampler {
	s := &schedSampler{done: make(chan struct{}), out: make(chan []schedSample, 1)}
	worker := "/proc/" + strconv.Itoa(tid)
	var dirs []string
	for _, p := range napi {
		dirs = append(dirs, "/proc/"+strconv.Itoa(p))
	}
	go func() {
		if cpu >= 0 {
			runtime.LockOSThread() // never unlocked: the pinned thread ends here
			_ = setAffinity(unix.Gettid(), cpu)
		}
		ss := []schedSample{readSample(gen.Now(), worker, dirs)}
		t := time.NewTicker(sampleEvery)
		defer t.Stop()
		for {
			select {
			case <-s.done:
				s.out <- append(ss, readSample(gen.Now(), worker, dirs))
				return
			case <-t.C:
				ss = append(ss, readSample(gen.Now(), worker, dirs))
			}
		}
	}()
	return s
}

// stop ends the sampling and returns the samples.
func (s *schedSampler) stop() []schedSample {
	close(s.done)
	return <-s.out
}

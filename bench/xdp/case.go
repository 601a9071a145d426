package xdp

import (
	"context"
	"fmt"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"xlb/bench/xdp/gen"
	"xlb/bench/xdp/sink"
	"xlb/bench/xdp/topo"
	"xlb/internal/nsx"
)

// Case is one measured case (a row of the report's data).
type Case struct {
	Variant string `json:"forwarder"`
	Size    int    `json:"frame_bytes"` // on the wire, FCS included
	// Load is "full" (as fast as the generator sends), "lossless" (the
	// check of the search's result: the maximum lossless rate), "paired"
	// (xlb's and xlb-ct's lossless rates by the paired search), "half-slice"
	// (xlb's latency run again, its worker on a short time slice), "half"
	// (the latency run at half of it), "floor" ((b) xdpfwd at the rate of
	// FloorFor's latency run) or "floor-busy" (the same with the middle's
	// core kept busy, see keepBusy).
	Load     string  `json:"load"`
	RatePPS  float64 `json:"rate_pps,omitempty"` // the generator's paced rate
	Duration float64 `json:"duration_s"`
	// Trials of the lossless-rate search and its checks, the last of
	// which is this case (Load "lossless").
	Trials []Trial `json:"search,omitempty"`
	Checks []Trial `json:"checks,omitempty"`
	// GenLimited: no loss up to the generator's own rate (Load
	// "lossless"): the forwarder's limit is higher than measured.
	GenLimited bool   `json:"generator_limited,omitempty"`
	FloorFor   string `json:"floor_for,omitempty"`
	// SinkOnMiddle: the sink's receive path ran in softirq context on the
	// middle hop's core (latency runs; see setSinkOnMiddle).
	SinkOnMiddle bool `json:"sink_on_middle_core,omitempty"`

	Sent       uint64   `json:"sent"`
	Forwarded  uint64   `json:"forwarded"`
	PerBackend []uint64 `json:"per_backend"`
	Other      uint64   `json:"other_mac"`
	SentPPS    float64  `json:"sent_pps"`
	FwdPPS     float64  `json:"forwarded_pps"`
	Loss       float64  `json:"loss"` // fraction of sent

	// Where frames were dropped (kernel counters over the case).
	DropIn   uint64 `json:"drop_in"`   // generator -> middle: the middle's veth ring full, its XDP redirect failed
	DropOut  uint64 `json:"drop_out"`  // middle -> generator: the generator's veth ring full, XDP_TX failed
	DropSink uint64 `json:"drop_sink"` // the sink socket's rx ring full or no fill buffer
	// DropMid is the rest of the loss: inside the middle hop (its own
	// rings, e.g. an AF_XDP TX ring full) or still in flight at the end.
	DropMid uint64 `json:"drop_mid"`
	// Out is what the middle hop sent on: forwarded + DropOut; OutPPS
	// its rate. The middle's CPU figures are per frame sent on, so that
	// a return path too slow for a fast forwarder does not count against it.
	Out    uint64  `json:"out"`
	OutPPS float64 `json:"out_pps"`

	// The middle hop's CPU: its NAPI thread (kernel: XDP, copies into
	// AF_XDP, the stack) and its user-space threads.
	KernelCPU  float64 `json:"middle_kernel_cpu_s"`
	UserCPU    float64 `json:"middle_user_cpu_s"`
	BusyCores  float64 `json:"middle_busy_cores"`
	NsPerPkt   float64 `json:"middle_cpu_ns_per_packet"`
	PPSPerCore float64 `json:"pps_per_busy_core"`
	GenCPU     float64 `json:"generator_cpu_s"`
	// Stamped frames carried the sink's receive time (sink.RxStamp); the
	// others were timed when the generator's loop read them.
	Stamped uint64 `json:"rx_stamped"`
	// GenSkipped, GenStalls, GenStallMS, GenMaxGapUS: frames the paced
	// generator skipped after a stall rather than send in a burst, and
	// its loop's stalls over the case (gen.Result).
	GenSkipped  uint64  `json:"generator_skipped,omitempty"`
	GenStalls   int     `json:"generator_stalls,omitempty"`
	GenStallMS  float64 `json:"generator_stall_ms,omitempty"`
	GenMaxGapUS float64 `json:"generator_max_gap_us,omitempty"`
	// XDPRedirected and SocketTook are, for an AF_XDP forwarder, the
	// frames its XDP program redirected to its socket and those its worker
	// took (the rest the socket dropped: no fill buffer, rx ring full).
	XDPRedirected uint64 `json:"xdp_redirected,omitempty"`
	SocketTook    uint64 `json:"socket_took,omitempty"`
	// Middle are the forwarder's own counters over the case.
	Middle map[string]uint64 `json:"middle_counters,omitempty"`
	// MiddleFaults are the page faults the forwarder's process took over
	// the case (Load "lossless": over the whole search, its trials and
	// checks), WorkerFaults those of its busiest thread (the worker);
	// both only for xlb. A worker whose memory was populated at start
	// takes none while it forwards.
	MiddleFaults uint64 `json:"middle_page_faults"`
	WorkerFaults uint64 `json:"worker_page_faults"`
	// CPUBusy is each CPU's busy fraction over the case (/proc/stat: the
	// whole machine, other processes included).
	CPUBusy []float64 `json:"cpu_busy"`

	// Latency percentiles, mean and maximum in µs (0 with no frames).
	LatP50  float64 `json:"latency_p50_us"`
	LatP90  float64 `json:"latency_p90_us"`
	LatP99  float64 `json:"latency_p99_us"`
	LatP999 float64 `json:"latency_p999_us"`
	LatMean float64 `json:"latency_mean_us"`
	LatMax  float64 `json:"latency_max_us"`
	// Added is the latency over (b)'s at the same rate (Load "half").
	Added *Added `json:"added_latency,omitempty"`
	// Paired is the paired search's result (Load "paired").
	Paired *Paired `json:"paired,omitempty"`
	// Tail is, for xlb, what its worker waited on over the case.
	Tail    *Tail `json:"tail,omitempty"`
	latency sink.Histogram
}

// Trial is one trial of a lossless-rate search.
type Trial struct {
	RatePPS float64 `json:"rate_pps"`
	SentPPS float64 `json:"sent_pps"`
	Loss    float64 `json:"loss"`
	Pass    bool    `json:"pass"`
}

// Added is a latency run's percentiles minus those of the floor: (b)
// xdpfwd, the least a forwarder can do on this path, at the same rate and
// frame size (µs; negative within noise).
type Added struct {
	FloorRatePPS float64 `json:"floor_rate_pps"`
	FloorP50     float64 `json:"floor_p50_us"`
	FloorP99     float64 `json:"floor_p99_us"`
	FloorP999    float64 `json:"floor_p999_us"`
	P50          float64 `json:"p50_us"`
	P99          float64 `json:"p99_us"`
	P999         float64 `json:"p999_us"`
	// BusyFloorP50 and BusyFloorP99 are (b)'s at the same rate with the
	// middle's core kept busy by a lowest-priority spinner (0: not
	// measured): the floor of a forwarder that keeps its core busy.
	BusyFloorP50 float64 `json:"busy_floor_p50_us,omitempty"`
	BusyFloorP99 float64 `json:"busy_floor_p99_us,omitempty"`
}

// setAffinity pins task pid to cpu.
func setAffinity(pid, cpu int) error {
	var set unix.CPUSet
	set.Set(cpu)
	return unix.SchedSetaffinity(pid, &set)
}

// vethDrops reads a veth's rx and tx drop counters in namespace ns.
func vethDrops(ns, dev string) (rx, tx uint64) {
	_ = nsx.Do(ns, func() error {
		l, err := netlink.LinkByName(dev)
		if err == nil && l.Attrs().Statistics != nil {
			rx, tx = l.Attrs().Statistics.RxDropped, l.Attrs().Statistics.TxDropped
		}
		return nil
	})
	return
}

type dropCounts struct{ genRx, genTx, midRx, midTx uint64 }

func (b *bench) drops() dropCounts {
	var d dropCounts
	d.genRx, d.genTx = vethDrops(b.topo.GenNS, b.topo.GenDev)
	d.midRx, d.midTx = vethDrops(b.topo.MidNS, b.topo.MidDev)
	return d
}

// kernelCPU is the CPU time of the middle veth's NAPI thread(s).
func (b *bench) kernelCPU() time.Duration {
	var d time.Duration
	for _, pid := range topo.NAPIThreads(b.topo.MidDev) {
		d += pidCPU(pid)
	}
	return d
}

// latencyBacklog bounds how late a latency run's generator still sends a
// frame (gen.Config.Backlog).
const latencyBacklog = 20 * time.Microsecond

// runCase sends variant v's frames of size at rate (0: full speed) for d;
// load names the case. Paced, the generator spins (gen.Config.Spin), and
// the throughput search's runs go in trains (Config.Coalesce).
func (b *bench) runCase(ctx context.Context, f *forwarder, v variant, size int, load string, rate float64, d time.Duration) (Case, error) {
	fr := b.frames[[2]int{size, int(v.port)}]
	if fr == nil {
		return Case{}, fmt.Errorf("no frames for %d bytes to port %d", size, v.port)
	}
	b.run++
	ctr := sink.NewCounter(backendMACs(b.topo), b.run)
	var user0 time.Duration
	if f.userCPU != nil {
		user0 = f.userCPU()
	}
	var mid0 map[string]uint64
	if f.counters != nil {
		mid0 = f.counters()
	}
	var thr0 map[string]threadStat
	if f.threads != nil {
		thr0 = f.threads()
	}
	logOff := 0
	if f.log != nil {
		logOff = len(f.log())
	}
	napi0 := b.napiStat()
	kern0, drops0, cpu0 := b.kernelCPU(), b.drops(), readCPUTimes()
	start := time.Now()
	// After a stall the generator sends at most a quarter of the middle's
	// veth ring (256 frames) late in the throughput runs, and next to
	// nothing in the latency runs (frames stay evenly spaced).
	var coalesce time.Duration
	backlog := 1 + int(rate*float64(latencyBacklog)/1e9)
	if load == "trial" || load == "lossless" {
		coalesce, backlog = b.cfg.Coalesce, 64
	}
	// Latency runs of xlb: the worker's and NAPI's schedstat sampled
	// through the run, for Tail.When.
	var sampler *schedSampler
	if (load == "half" || load == "half-slice") && f.workerTID != nil {
		if tid := f.workerTID(); tid > 0 {
			ctr.Windows = &sink.Windows{Start: gen.Now(), Width: int64(windowWidth), Max: make([]uint64, int(d/windowWidth)+1)}
			sampler = startSampler(tid, topo.NAPIThreads(b.topo.MidDev), b.genCPU)
		}
	}
	res, err := gen.Run(ctx, gen.Config{Socket: b.sock, Frames: fr, Counter: ctr, Run: b.run,
		Duration: d, Rate: rate, CPU: b.genCPU, Spin: rate > 0, Coalesce: coalesce, Backlog: backlog})
	wall := time.Since(start)
	var samples []schedSample
	if sampler != nil {
		samples = sampler.stop()
	}
	if err != nil {
		return Case{}, err
	}
	cpu1, drops1, kern1 := readCPUTimes(), b.drops(), b.kernelCPU()
	napi1 := b.napiStat()
	var user time.Duration
	if f.userCPU != nil {
		user = f.userCPU() - user0
	}
	var faults, workerFaults uint64
	var thr1 map[string]threadStat
	if f.threads != nil {
		thr1 = f.threads()
		faults, workerFaults = faultsBetween(thr0, thr1)
	}
	if err := f.alive(); err != nil {
		return Case{}, err
	}
	var middle map[string]uint64
	if f.counters != nil {
		if mid1 := f.counters(); mid1 != nil {
			middle = map[string]uint64{}
			for k, v := range mid1 {
				if d := v - mid0[k]; v >= mid0[k] && d > 0 {
					middle[k] = d
				}
			}
		}
	}

	r := Case{Variant: v.name, Size: size, Load: load, RatePPS: rate, Duration: d.Seconds(), SinkOnMiddle: b.sinkOnMiddle,
		Sent: res.Sent, Forwarded: ctr.Frames, PerBackend: ctr.PerBackend, Other: ctr.Other,
		GenCPU: res.ThreadCPU.Seconds(), Middle: middle, XDPRedirected: middle[f.redirKey], SocketTook: middle[f.tookKey], CPUBusy: busyFrac(cpu0, cpu1), latency: ctr.Latency,
		MiddleFaults: faults, WorkerFaults: workerFaults}
	secs := d.Seconds()
	r.Stamped, r.GenSkipped = res.Stamped, res.Skipped
	r.GenStalls, r.GenStallMS, r.GenMaxGapUS = res.Stalls, float64(res.StallTime)/1e6, float64(res.MaxGap)/1e3
	r.SentPPS = float64(r.Sent) / secs
	r.FwdPPS = float64(r.Forwarded) / secs
	if r.Sent > 0 {
		r.Loss = 1 - float64(r.Forwarded)/float64(r.Sent)
	}
	// A veth's tx_dropped counts its own sends the peer's ring refused and
	// its XDP_TX failures; rx_dropped its XDP drops and redirect failures
	// (and the peer's XDP_TX failures again, so the generator's is not used).
	r.DropIn = (drops1.genTx - drops0.genTx) + (drops1.midRx - drops0.midRx)
	r.DropOut = drops1.midTx - drops0.midTx
	r.DropSink = res.SinkStats.Kernel.RxDropped + res.SinkStats.Kernel.RxRingFull
	r.Out = r.Forwarded + r.DropOut
	r.OutPPS = float64(r.Out) / secs
	if lost := int64(r.Sent) - int64(r.Forwarded+r.DropIn+r.DropOut+r.DropSink); lost > 0 {
		r.DropMid = uint64(lost)
	}
	r.KernelCPU = (kern1 - kern0).Seconds()
	r.UserCPU = user.Seconds()
	mid := r.KernelCPU + r.UserCPU
	r.BusyCores = mid / wall.Seconds()
	if r.Out > 0 && mid > 0 {
		r.NsPerPkt = mid * 1e9 / float64(r.Out)
		r.PPSPerCore = float64(r.Out) / mid
	}
	h := &r.latency
	us := func(ns uint64) float64 { return float64(ns) / 1e3 }
	r.LatP50, r.LatP90, r.LatP99, r.LatP999 = us(h.Quantile(0.5)), us(h.Quantile(0.9)), us(h.Quantile(0.99)), us(h.Quantile(0.999))
	r.LatMean, r.LatMax = h.Mean()/1e3, us(h.Max)
	if f.log != nil && thr1 != nil {
		_, w := busiestBetween(thr0, thr1)
		napi := napi1.sub(napi0)
		t := &Tail{WorkerRunMS: ms(w.cpu), WorkerWaitMS: ms(w.wait), WorkerPreempted: w.nonvol, WorkerSlept: w.vol,
			NAPIRunMS: ms(napi.cpu), NAPIWaitMS: ms(napi.wait), NAPISlices: napi.slices, WorkerSlices: w.slices,
			IdleSleeps: middle["runtime.queues.idle_sleeps"], Polls: middle["runtime.queues.socket_polls"],
			RxRingFull: middle["runtime.queues.kernel.rx_ring_full"], FillRingEmpty: middle["runtime.queues.kernel.fill_ring_empty"],
			TxRingFull: middle["runtime.queues.tx_ring_full_drops"], FramesOver1ms: h.Above(uint64(time.Millisecond))}
		t.RuntimeParks = t.WorkerSlept - min(t.IdleSleeps, t.WorkerSlept)
		t.XLBOthersMS = max(ms(user-w.cpu), 0)
		if b.midCPU >= 0 && b.midCPU < len(cpu0.busy) && b.midCPU < len(cpu1.busy) {
			mid := b.midCPU
			tick := func(x, y []uint64) time.Duration { return time.Duration(y[mid]-x[mid]) * time.Second / clockTicks }
			steal := tick(cpu0.steal, cpu1.steal)
			t.StealMS = ms(steal)
			t.OthersMS = max(ms(tick(cpu0.busy, cpu1.busy)-steal-w.cpu-napi.cpu), 0)
		}
		if lg := f.log(); len(lg) >= logOff {
			t.gcTail(parseGCTrace(lg[logOff:]))
		}
		t.When = when(samples, ctr.Windows)
		r.Tail = t
	}
	return r, nil
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }

// Package xdp is `lbbench xdp`: real frames through xlb on a namespace
// topology of its own, next to three baselines measured in the same run on
// the same topology, at 64- and 1500-byte frames.
//
//	P-gen: generator + sink ── veth ── P-mid: xlb | (a) reflector | (b) xdpfwd | (c) nftlb
//	        (one AF_XDP socket)              one-armed: back out of the same veth
//
// Per forwarder and frame size it sends at full speed for a while (how the
// middle hop behaves at overload: livelock), then searches the highest
// paced rate it forwards without loss (RFC 2544 style: loss at most
// Config.LossMax, short trials, bisection, the result checked with one
// longer run), then measures latency at half of that rate. It reports
// Mpps, loss, the middle hop's CPU (busy cores, ns per packet, packets per
// second per busy core) at the lossless rate, latency percentiles and CDFs
// from the timestamps frames carry, the latency each forwarder adds to
// (b)'s at the same rate, and the ratios xlb/(a), xlb/(b), xlb/(c). xlb-ct
// is compared with xlb by a paired search (paired.go), and xlb's latency
// tail is set beside what its worker waited on (Tail). See Notes in the
// report for the method. RunExisting measures over interfaces lbbench did
// not build instead (existing.go): real NIC ports, with xlb or the xdpfwd
// baseline on another host (remote.go).
package xdp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/netip"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/vishvananda/netlink"

	"xlb/bench/report"
	"xlb/bench/xdp/gen"
	"xlb/bench/xdp/sink"
	"xlb/bench/xdp/topo"
	"xlb/dataplane/afxdp"
	"xlb/internal/nsx"
)

// Config is one `lbbench xdp` run.
type Config struct {
	Quick bool
	// Duration of each measured case: full load, the check of the
	// lossless rate, the latency runs (default 300 ms quick, 2 s full).
	Duration time.Duration
	// Trial is the length of one trial of the lossless-rate search
	// (default 200 ms quick, 500 ms full); Trials the most trials of one
	// search (default 5 quick, 10 full).
	Trial  time.Duration
	Trials int
	// Coalesce sends the search's paced frames in trains, what is due
	// once per Coalesce (gen.Config.Coalesce), as a NIC's interrupt
	// coalescing delivers them (default DefaultCoalesce; negative: each
	// frame when due, evenly spaced). Latency runs always space frames
	// evenly.
	Coalesce time.Duration
	// LossMax is the most a trial may lose and still count as lossless
	// (default 0.001: 0.1 %).
	LossMax float64
	// Resolution ends a search once the lowest failing rate is within
	// this fraction of the highest passing one (default 5 % quick, 2 %).
	Resolution float64
	// Sizes are frame sizes on the wire, FCS included (default 64 quick,
	// 64 and 1500 full).
	Sizes []int
	// Variants to measure (default all: xlb, xlb-ct, reflector, xdpfwd,
	// nftlb).
	Variants []string
	// Backends behind the VIP (default 4).
	Backends int
	// Sources x Ports distinct flows (default 256 x 256).
	Sources, Ports int
	// Prefix of the topology's names (default lbx).
	Prefix string
	// XLB is the xlb binary; empty: built from this module's cmd/xlb.
	XLB string
	// Progress receives the progress bar (stderr); nil: none.
	Progress io.Writer
}

// DefaultCoalesce is the search's coalescing window: one send call per
// frame at a few hundred thousand frames a second takes the generator's
// whole core on a virtual machine (tens of µs a call when the call wakes a
// busy core), so evenly spaced frames could not be offered there at all;
// 20 µs is a modest NIC setting (rx-usecs) and makes trains of 2 to 15
// frames at 0.1 to 0.75 Mpps.
const DefaultCoalesce = 20 * time.Microsecond

func (c *Config) defaults() error {
	pick := func(quick, full time.Duration) time.Duration {
		if c.Quick {
			return quick
		}
		return full
	}
	if c.Duration <= 0 {
		c.Duration = pick(300*time.Millisecond, 2*time.Second)
	}
	if c.Trial <= 0 {
		c.Trial = pick(200*time.Millisecond, 500*time.Millisecond)
	}
	if c.Trials <= 0 {
		c.Trials = 10
		if c.Quick {
			c.Trials = 5
		}
	}
	switch {
	case c.Coalesce == 0:
		c.Coalesce = DefaultCoalesce
	case c.Coalesce < 0:
		c.Coalesce = 0
	case c.Coalesce > time.Millisecond:
		return fmt.Errorf("coalescing window %v: want at most 1ms", c.Coalesce)
	}
	if c.LossMax <= 0 {
		c.LossMax = 0.001
	}
	if c.LossMax >= 0.5 {
		return fmt.Errorf("loss threshold %g: want a fraction below 0.5", c.LossMax)
	}
	if c.Resolution <= 0 {
		c.Resolution = 0.02
		if c.Quick {
			c.Resolution = 0.05
		}
	}
	if len(c.Sizes) == 0 {
		c.Sizes = []int{64, 1500}
		if c.Quick {
			c.Sizes = []int{64}
		}
	}
	for _, s := range c.Sizes {
		if s < sink.MinFrame+4 || s > 1518 {
			return fmt.Errorf("frame size %d: want %d..1518 (wire size, FCS included)", s, sink.MinFrame+4)
		}
	}
	if len(c.Variants) == 0 {
		c.Variants = allVariants
	}
	for _, v := range c.Variants {
		if !slices.Contains(allVariants, v) {
			return fmt.Errorf("forwarder %q: want some of %s", v, strings.Join(allVariants, ", "))
		}
	}
	if c.Backends == 0 {
		c.Backends = 4
	}
	if c.Sources == 0 {
		c.Sources = 256
	}
	if c.Ports == 0 {
		c.Ports = 256
	}
	if c.Prefix == "" {
		c.Prefix = "lbx"
	}
	return nil
}

// bench is the state of one run.
type bench struct {
	cfg            Config
	topo           *topo.Topo
	tmp            string
	genCPU, midCPU int
	sock           *afxdp.Socket
	prog           *sink.Program
	frames         map[[2]int]*gen.Frames // by size and port
	run            uint32
	notes          []string
	progress       *report.Progress
	// halfRates are the latency runs' rates so far, for (b)'s floor
	// runs at the same rates.
	halfRates []halfRate
	// sinkOnMiddle: the sink's NAPI runs in softirq context (see
	// setSinkOnMiddle).
	sinkOnMiddle bool
}

// halfRate is the rate of one latency run.
type halfRate struct {
	variant string
	size    int
	rate    float64
}

func (b *bench) vips() []netip.Addr { return []netip.Addr{topo.VIP} }

func (b *bench) note(format string, a ...any) { b.notes = append(b.notes, fmt.Sprintf(format, a...)) }

// Run measures and returns the report. It needs root; the topology is
// removed before it returns, also on error or when ctx ends (a signal).
func Run(ctx context.Context, cfg Config) (report.Report, error) {
	if err := cfg.defaults(); err != nil {
		return report.Report{}, err
	}
	if os.Geteuid() != 0 {
		return report.Report{}, errors.New("needs root: network namespaces, veth, XDP and AF_XDP (try sudo)")
	}
	b := &bench{cfg: cfg, genCPU: -1, midCPU: -1, frames: map[[2]int]*gen.Frames{}}
	if runtime.NumCPU() >= 2 {
		b.genCPU, b.midCPU = 0, 1
	}
	var err error
	if b.tmp, err = os.MkdirTemp("", "lbbench-xdp-"); err != nil {
		return report.Report{}, err
	}
	defer os.RemoveAll(b.tmp)

	// Our threads, and so the generator's and the reflector's made later.
	defer restoreNice(reniceAll(os.Getpid(), benchNice))
	results, err := b.measure(ctx)
	if err != nil {
		return report.Report{}, err
	}
	return b.report(results), nil
}

func (b *bench) measure(ctx context.Context) (_ []Case, err error) {
	want := map[string]bool{}
	for _, v := range b.cfg.Variants {
		want[v] = true
	}
	// Frames first: a bad flow spec fails before anything is set up.
	for _, size := range b.cfg.Sizes {
		for _, port := range []uint16{portXLB, portXLBCT} {
			f, err := gen.Build(gen.FlowSpec{SrcMAC: topo.GenMAC, DstMAC: topo.MidMAC, Clients: topo.Clients,
				Sources: b.cfg.Sources, Ports: b.cfg.Ports, Dst: topo.VIP, DstPort: port, FrameLen: size - 4})
			if err != nil {
				return nil, err
			}
			b.frames[[2]int{size, int(port)}] = f
		}
	}
	if b.topo, err = topo.Up(topo.Options{Prefix: b.cfg.Prefix, Backends: b.cfg.Backends}); err != nil {
		return nil, err
	}
	defer func() {
		if b.sock != nil {
			b.sock.Close()
		}
		if b.prog != nil {
			b.prog.Close()
		}
		err = errors.Join(err, b.topo.Down())
	}()
	if !b.topo.Threaded {
		b.note("NAPI could not run threaded (%v): the kernel's share of each side is not measured apart; CPU figures cover user space only", b.topo.ThreadedErr)
	}
	b.pinNAPI()
	if err := b.openSink(); err != nil {
		return nil, err
	}

	// (b) xdpfwd runs last: its floor runs are at the rates of the
	// latency runs of every forwarder before it.
	var fwds []*forwarder
	if want["xlb"] || want["xlb-ct"] {
		fwds = append(fwds, b.xlbForwarder(want))
	}
	if want["reflector"] {
		fwds = append(fwds, b.reflectorForwarder())
	}
	if want["nftlb"] {
		fwds = append(fwds, b.nftlbForwarder())
	}
	if want["xdpfwd"] {
		fwds = append(fwds, b.xdpfwdForwarder())
	}
	total, others := 0, 0
	for _, f := range fwds {
		total += f.steps(&b.cfg)
		if f.name != "xdpfwd" {
			others += len(f.variants)
		}
	}
	if want["xdpfwd"] {
		total += (2*others + 1) * len(b.cfg.Sizes) // floor runs
	}
	if b.cfg.Progress != nil {
		b.progress = report.NewProgress(b.cfg.Progress, "xdp", total)
		defer b.progress.Done()
	}

	var results []Case
	for _, f := range fwds {
		rs, err := b.measureForwarder(ctx, f)
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if err != nil {
			if f.name == "xlb" {
				return nil, err
			}
			b.note("%s: not measured: %v", f.name, err)
			b.progress.Add(f.steps(&b.cfg))
			continue
		}
		results = append(results, rs...)
	}
	addFloors(results)
	return results, nil
}

// steps is f's share of the progress bar: per variant and size a full
// load run, the search's trials, the check of its result, a latency run.
func (f *forwarder) steps(c *Config) int {
	n := len(f.variants) * len(c.Sizes) * (3 + c.Trials)
	if f.paired() {
		n += len(c.Sizes) * c.pairedSteps()
	}
	if f.sliceAB(c) {
		n += len(f.variants) * len(c.Sizes)
	}
	return n
}

// sliceAB: the latency runs of f are run a second time with its worker on
// a short time slice (shortSliceCase): xlb's, in a full run.
func (f *forwarder) sliceAB(c *Config) bool {
	return f.workerTID != nil && !c.Quick
}

// shortSliceCase is the latency run again (Load "half-slice") with xlb's
// worker thread given the middle NAPI thread's short time slice (setSlice),
// then its own back: the same run's A/B of whether the worker waiting out
// other tasks' slices on its core makes the tail. An empty Case (and a
// note) when the worker's thread is not found or the kernel refuses.
func (b *bench) shortSliceCase(ctx context.Context, f *forwarder, v variant, size int, rate float64) (Case, error) {
	tid := f.workerTID()
	if tid <= 0 {
		b.note("%s: the worker's thread (pinned to CPU %d) not found: no short-slice latency run", v.name, b.midCPU)
		return Case{}, nil
	}
	if err := setSlice(tid, benchNice, napiSlice); err != nil {
		b.note("%s: could not give the worker a %v slice (%v; Linux >= 6.12): no short-slice latency run", v.name, napiSlice, err)
		return Case{}, nil
	}
	c, err := b.runCase(ctx, f, v, size, "half-slice", rate, b.cfg.Duration)
	if e := setSlice(tid, benchNice, 0); e != nil && err == nil {
		err = fmt.Errorf("restoring the worker's time slice: %w", e)
	}
	return c, err
}

// paired: f is xlb with both its variants, which the paired search
// compares.
func (f *forwarder) paired() bool {
	return f.name == "xlb" && len(f.variants) == 2
}

func (c *Config) pairedSteps() int {
	if c.Quick {
		return pairedStepsQuick
	}
	return pairedSteps
}

// paired runs the paired search of xlb and xlb-ct at size from one rate,
// the higher of their own searches' results (half of what came back at
// full load for one that found none), and returns a case per variant (Load
// "paired", RatePPS the highest rate whose step passed).
func (b *bench) paired(ctx context.Context, f *forwarder, size int, full, ll [2]Case) ([]Case, error) {
	var start float64
	var top [2]float64
	for i := range 2 {
		r := ll[i].SentPPS
		if ll[i].Loss > b.cfg.LossMax {
			r = full[i].FwdPPS / 2
		}
		start = max(start, r)
		top[i] = full[i].SentPPS
	}
	var faults, workerFaults [2]uint64 // over the trials, for WorkerFaults
	res, err := pairedSearch(&b.cfg, start, top, b.cfg.pairedSteps(), func(i int, rate float64) (Case, error) {
		c, err := b.runCase(ctx, f, f.variants[i], size, "trial", rate, b.cfg.Trial)
		faults[i] += c.MiddleFaults
		workerFaults[i] += c.WorkerFaults
		return c, err
	}, b.progress)
	if err != nil {
		return nil, err
	}
	var out []Case
	for i, p := range res {
		out = append(out, Case{Variant: f.variants[i].name, Size: size, Load: "paired", RatePPS: p.Lo, SentPPS: p.Lo,
			Duration: b.cfg.Trial.Seconds(), Paired: &p, MiddleFaults: faults[i], WorkerFaults: workerFaults[i]})
	}
	return out, nil
}

// pinNAPI puts the generator side's NAPI thread on the generator's core and
// the middle's on the middle's, as a NIC's interrupts would be steered.
func (b *bench) pinNAPI() {
	if b.genCPU < 0 {
		b.note("one CPU: nothing pinned; generator, sink and middle hop share it")
		for _, dev := range []string{b.topo.GenDev, b.topo.MidDev} {
			for _, pid := range topo.NAPIThreads(dev) {
				_ = renice(pid, benchNice)
			}
		}
		return
	}
	b.pinSink()
	for _, pid := range topo.NAPIThreads(b.topo.MidDev) {
		if err := setAffinity(pid, b.midCPU); err != nil {
			b.note("could not pin %s's NAPI thread %d to CPU %d: %v", b.topo.MidDev, pid, b.midCPU, err)
		}
		// The middle's NAPI thread is the system measured: an ordinary
		// thread, but with a short time slice so that it preempts a
		// polling worker on its core when frames arrive, as a NIC's
		// interrupt would, instead of waiting out the worker's slice
		// while the 256-frame veth ring overflows. At overload the two
		// still share the core fairly (no livelock).
		if err := setSlice(pid, benchNice, napiSlice); err != nil {
			b.note("could not give the middle's NAPI thread a %v time slice (%v; Linux >= 6.12): it may wait out a polling worker's slice", napiSlice, err)
		}
	}
}

// pinSink pins the generator veth's NAPI thread (the sink's receive path)
// to the generator's core and makes it SCHED_FIFO.
func (b *bench) pinSink() {
	if b.genCPU < 0 {
		return
	}
	for _, pid := range topo.NAPIThreads(b.topo.GenDev) {
		if err := setAffinity(pid, b.genCPU); err != nil {
			b.note("could not pin %s's NAPI thread %d to CPU %d: %v", b.topo.GenDev, pid, b.genCPU, err)
		}
		_ = renice(pid, benchNice)
		// The sink's side is the measuring instrument: its NAPI thread
		// runs before the generator thread that shares its core, as an
		// interrupt would, so that frames coming back are not lost to
		// the sender's loop; the sender then slows down instead.
		if err := setFIFO(pid); err != nil {
			b.note("could not make the sink's NAPI thread SCHED_FIFO (%v): frames coming back may be lost to the generator's own loop (drop out)", err)
		}
	}
}

// setSinkOnMiddle moves the sink's receive path for the latency runs. Off
// (throughput runs): the generator veth's NAPI is a thread on the
// generator's core, so that the sink's work never takes the middle hop's
// CPU. On (latency runs): it runs in softirq context where the middle hop
// sends, on the middle's core, right after the frame is sent, and puts it
// on the sink socket's ring, which the spinning generator reads at once.
// That takes one cross-CPU wakeup of a sleeping thread, tens of µs on a
// virtual machine, off the return path of every forwarder alike, at the
// price of the sink's own work (tens of ns a frame) on the middle's core.
func (b *bench) setSinkOnMiddle(on bool) error {
	if b.sinkOnMiddle == on || b.genCPU < 0 {
		return nil
	}
	if !b.topo.Threaded {
		b.sinkOnMiddle = on // softirq all along, where the middle sends
		return nil
	}
	if err := topo.SetThreaded(b.topo.GenNS, b.topo.GenDev, !on); err != nil {
		return err
	}
	b.sinkOnMiddle = on
	if !on {
		b.pinSink()
	}
	return nil
}

// openSink attaches the sink program to the generator's veth and binds the
// generator's socket to its queue 0.
func (b *bench) openSink() error {
	var err error
	if b.prog, err = sink.Load(1); err != nil {
		return err
	}
	return nsx.Do(b.topo.GenNS, func() error {
		l, err := netlink.LinkByName(b.topo.GenDev)
		if err != nil {
			return err
		}
		if err := b.prog.Attach(l.Attrs().Index); err != nil {
			return err
		}
		if b.sock, err = afxdp.New(l.Attrs().Index, 0, gen.SocketOpts()); err != nil {
			return fmt.Errorf("generator socket: %w", err)
		}
		return b.prog.Register(0, b.sock.FD())
	})
}

// measureForwarder starts f, runs its cases and stops it: per variant and
// size full speed and the lossless-rate search, then (sink on the middle)
// latency at half the lossless rate, and for (b) also at the rates of the
// forwarders before it (the floor).
func (b *bench) measureForwarder(ctx context.Context, f *forwarder) (_ []Case, err error) {
	if err := f.start(ctx); err != nil {
		return nil, err
	}
	defer func() {
		if e := f.stop(); e != nil {
			err = errors.Join(err, e)
		}
		if e := b.setSinkOnMiddle(false); e != nil {
			err = errors.Join(err, e)
		}
	}()
	// A short run per variant to warm caches, the rings and the tables
	// before measuring: a tracked variant's flows are then established,
	// as in a steady state (new flows are lbbench core's business).
	// They are the first frames each variant's worker sees, so they are
	// kept (Load "warm"): what xlb-ct's first inserts cost (page faults,
	// loss) is there.
	var out []Case
	for _, v := range f.variants {
		c, err := b.runCase(ctx, f, v, b.cfg.Sizes[0], "warm", 0, min(b.cfg.Duration/2, 200*time.Millisecond))
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	rates := map[[2]int]float64{} // by variant index and size
	fulls, lls := map[[2]int]Case{}, map[[2]int]Case{}
	for vi, v := range f.variants {
		for _, size := range b.cfg.Sizes {
			full, err := b.runCase(ctx, f, v, size, "full", 0, b.cfg.Duration)
			if err != nil {
				return nil, err
			}
			b.progress.Add(1)
			out = append(out, full)
			ll, err := b.search(ctx, f, v, size, full)
			if err != nil {
				return nil, err
			}
			out = append(out, ll)
			fulls[[2]int{vi, size}], lls[[2]int{vi, size}] = full, ll
			rate := ll.RatePPS / 2
			if ll.Loss > b.cfg.LossMax || rate <= 0 {
				// No lossless rate found: half of what came back at
				// full load, as before.
				rate = full.FwdPPS / 2
			}
			rates[[2]int{vi, size}] = rate
		}
	}
	if f.paired() {
		for _, size := range b.cfg.Sizes {
			cs, err := b.paired(ctx, f, size, [2]Case{fulls[[2]int{0, size}], fulls[[2]int{1, size}]},
				[2]Case{lls[[2]int{0, size}], lls[[2]int{1, size}]})
			if err != nil {
				return nil, err
			}
			out = append(out, cs...)
		}
	}
	if err := b.setSinkOnMiddle(true); err != nil {
		return nil, err
	}
	for vi, v := range f.variants {
		for _, size := range b.cfg.Sizes {
			rate := rates[[2]int{vi, size}]
			if rate <= 0 {
				b.progress.Add(1)
				continue
			}
			half, err := b.runCase(ctx, f, v, size, "half", rate, b.cfg.Duration)
			if err != nil {
				return nil, err
			}
			b.progress.Add(1)
			out = append(out, half)
			if f.sliceAB(&b.cfg) {
				c, err := b.shortSliceCase(ctx, f, v, size, rate)
				if err != nil {
					return nil, err
				}
				b.progress.Add(1)
				if c.Load != "" {
					out = append(out, c)
				}
			}
		}
	}
	if f.name == "xdpfwd" {
		// The floor at every other forwarder's latency rate, and the
		// busy floor at every rate, its own included.
		own := slices.Clone(b.halfRates)
		for vi, v := range f.variants {
			for _, size := range b.cfg.Sizes {
				if r := rates[[2]int{vi, size}]; r > 0 {
					own = append(own, halfRate{v.name, size, r})
				}
			}
		}
		for _, hr := range own {
			for _, load := range []string{"floor", "floor-busy"} {
				if load == "floor" && hr.variant == "xdpfwd" {
					continue // its own latency run
				}
				c, err := b.floorCase(ctx, f, hr, load)
				if err != nil {
					return nil, err
				}
				b.progress.Add(1)
				if c.Load != "" {
					out = append(out, c)
				}
			}
		}
	} else {
		for vi, v := range f.variants {
			for _, size := range b.cfg.Sizes {
				if r := rates[[2]int{vi, size}]; r > 0 {
					b.halfRates = append(b.halfRates, halfRate{v.name, size, r})
				}
			}
		}
	}
	return out, nil
}

// floorCase runs (b) xdpfwd at hr's rate and size: load "floor" as it is,
// "floor-busy" with the middle's core kept busy (keepBusy). A busy floor
// that cannot start is a note and an empty Case.
func (b *bench) floorCase(ctx context.Context, f *forwarder, hr halfRate, load string) (Case, error) {
	if load == "floor-busy" {
		if b.midCPU < 0 {
			return Case{}, nil
		}
		stop, err := keepBusy(b.midCPU)
		if err != nil {
			b.note("busy floor not measured: %v", err)
			return Case{}, nil
		}
		defer stop()
	}
	c, err := b.runCase(ctx, f, f.variants[0], hr.size, load, hr.rate, b.cfg.Duration)
	c.FloorFor = hr.variant
	return c, err
}

// search finds the highest paced rate at which f forwards v's frames of
// size with at most LossMax lost: the first trial at the rate forwarded at
// full load; up (doubling, or by a quarter after a pass that lost a little)
// while trials pass; after a failure, secant steps to
// below what came back, then bisection between the highest pass and the
// lowest failure until they are within Resolution or Trials are spent. A
// failure that lost little is tried once more (the machine, not the
// forwarder, may have lost those). The highest pass is then run once more
// for Duration (again once after a small loss, then 5 % lower, twice at
// most), and that run is the result (Load "lossless", with the trials). A
// forwarder that loses nothing at full speed keeps up with the generator:
// the full load run is the result, marked GenLimited.
func (b *bench) search(ctx context.Context, f *forwarder, v variant, size int, full Case) (Case, error) {
	return searchRate(&b.cfg, full, func(load string, rate float64, d time.Duration) (Case, error) {
		return b.runCase(ctx, f, v, size, load, rate, d)
	}, b.progress)
}

// runFunc runs one paced case (load "trial" or "lossless") at rate for d.
type runFunc func(load string, rate float64, d time.Duration) (Case, error)

// searchRate is search's algorithm over run; full is the full-load case.
func searchRate(cfg *Config, full Case, run runFunc, progress *report.Progress) (Case, error) {
	// The result carries the page faults of every run of the search (none
	// when it is the full-load case itself).
	var faults, workerFaults uint64
	if full.Loss <= cfg.LossMax && full.Sent > 0 {
		c := full
		c.Load, c.RatePPS, c.GenLimited = "lossless", full.SentPPS, true
		c.MiddleFaults, c.WorkerFaults = 0, 0
		progress.Add(cfg.Trials + 1)
		return c, nil
	}
	top := full.SentPPS // the generator's own limit
	if top <= 0 {
		c := full
		c.Load = "lossless"
		c.MiddleFaults, c.WorkerFaults = 0, 0
		progress.Add(cfg.Trials + 1)
		return c, nil
	}
	inner := run
	run = func(load string, rate float64, d time.Duration) (Case, error) {
		c, err := inner(load, rate, d)
		faults += c.MiddleFaults
		workerFaults += c.WorkerFaults
		return c, err
	}
	r := min(full.FwdPPS, top)
	if r <= 0 {
		r = top / 10
	}
	lo, hi := 0.0, math.Inf(1)
	var trials []Trial
	// trial runs one trial at rate; a failure that lost little (a
	// disturbance of the machine, not an overloaded forwarder: both
	// overflow the 256-frame veth ring, only one of them again) is tried
	// once more at that rate. Both count as trials.
	trial := func(rate float64) (Case, bool, error) {
		var c Case
		for again := false; ; again = true {
			var err error
			if c, err = run("trial", rate, cfg.Trial); err != nil {
				return c, false, err
			}
			progress.Add(1)
			t := Trial{RatePPS: rate, SentPPS: c.SentPPS, Loss: c.Loss, Pass: c.Loss <= cfg.LossMax && c.Sent > 0}
			trials = append(trials, t)
			if t.Pass || again || c.Loss > smallLoss*cfg.LossMax || len(trials) >= cfg.Trials {
				return c, t.Pass, nil
			}
		}
	}
	fails := 0 // in a row, before the first pass
	for len(trials) < cfg.Trials && r > 0 {
		c, pass, err := trial(r)
		if err != nil {
			return Case{}, err
		}
		if pass {
			lo = r
		} else {
			hi = r
		}
		switch {
		case lo > 0 && hi/lo-1 <= cfg.Resolution:
			r = 0
		case math.IsInf(hi, 1):
			if r >= top {
				r = 0 // lossless as fast as the generator sends paced
				break
			}
			// Up: doubling from a clean pass (the full-load rate can be
			// far below the capacity after a livelock collapse), by a
			// quarter from a pass that lost a little.
			up := 2.0
			if c.Loss > 0 {
				up = 1.25
			}
			r = min(r*up, top)
		case lo == 0:
			// Secant: below what came back, by a step that doubles with
			// every failure in a row (a loss that does not fall with the
			// rate), never below a quarter of the rate (livelock forwards
			// less than the capacity).
			r = max(min(c.FwdPPS, r)*(1-min(cfg.Resolution*float64(int(1)<<fails), 0.5)), r/4)
			fails++
		default:
			r = (lo + hi) / 2
		}
	}
	progress.Add(cfg.Trials - len(trials))
	if lo == 0 {
		// Nothing passed: the result is the slowest trial, lossy.
		lo = trials[len(trials)-1].RatePPS
	}
	// The check: again at the same rate once after a small loss, then 5 %
	// and 10 % lower while it loses more.
	passed := anyPass(trials)
	var c Case
	var checks []Trial
	for try, again := 0, false; ; try++ {
		var err error
		if c, err = run("lossless", lo, cfg.Duration); err != nil {
			return Case{}, err
		}
		checks = append(checks, Trial{RatePPS: lo, SentPPS: c.SentPPS, Loss: c.Loss, Pass: c.Loss <= cfg.LossMax && c.Sent > 0})
		if c.Loss <= cfg.LossMax || !passed || try == 3 {
			break
		}
		if !again && c.Loss <= smallLoss*cfg.LossMax {
			again = true
			continue
		}
		lo *= 0.95
	}
	progress.Add(1)
	c.Trials, c.Checks = trials, checks
	c.MiddleFaults, c.WorkerFaults = faults, workerFaults
	// Never failed, up to what the generator sends.
	c.GenLimited = passed && math.IsInf(hi, 1) && lo >= top
	return c, nil
}

// smallLoss: a trial or check that lost at most smallLoss x LossMax is
// run again once before it counts as failed.
const smallLoss = 10

func anyPass(ts []Trial) bool {
	for _, t := range ts {
		if t.Pass {
			return true
		}
	}
	return false
}

// addFloors gives every latency run whose floor was measured its latency
// minus the floor's: (b) xdpfwd at the same rate and size, as it is and
// with the middle's core kept busy.
func addFloors(rs []Case) {
	floor := func(load, v string, size int) *Case {
		for j := range rs {
			if rs[j].Load == load && rs[j].FloorFor == v && rs[j].Size == size && rs[j].latency.N > 0 {
				return &rs[j]
			}
		}
		return nil
	}
	for i := range rs {
		c := &rs[i]
		if c.Load != "half" || c.latency.N == 0 {
			continue
		}
		fl := floor("floor", c.Variant, c.Size)
		if c.Variant == "xdpfwd" {
			fl = c
		}
		if fl == nil {
			continue
		}
		c.Added = &Added{FloorRatePPS: fl.RatePPS, FloorP50: fl.LatP50, FloorP99: fl.LatP99, FloorP999: fl.LatP999,
			P50: c.LatP50 - fl.LatP50, P99: c.LatP99 - fl.LatP99, P999: c.LatP999 - fl.LatP999}
		if bf := floor("floor-busy", c.Variant, c.Size); bf != nil {
			c.Added.BusyFloorP50, c.Added.BusyFloorP99 = bf.LatP50, bf.LatP99
		}
	}
}

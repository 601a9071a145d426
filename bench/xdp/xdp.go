// Package xdp is `lbbench xdp`: real frames through xlb on a namespace
// topology of its own, next to three baselines measured in the same run on
// the same topology, at 64- and 1500-byte frames.
//
//	P-gen: generator + sink ── veth ── P-mid: xlb | (a) reflector | (b) xdpfwd | (c) nftlb
//	        (one AF_XDP socket)              one-armed: back out of the same veth
//
// Per forwarder and frame size it sends at full speed for a fixed time, then
// at half of the rate that came back (the latency run). It reports sent and
// forwarded Mpps, loss, the middle hop's CPU (busy cores, ns per packet,
// packets per second per busy core), latency percentiles and CDFs from the
// timestamps frames carry, and the ratios xlb/(a), xlb/(b), xlb/(c). See
// Notes in the report for the method.
package xdp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/vishvananda/netlink"

	"xlb/bench/internal/nsx"
	"xlb/bench/report"
	"xlb/bench/xdp/gen"
	"xlb/bench/xdp/sink"
	"xlb/bench/xdp/topo"
	"xlb/dataplane/afxdp"
)

// Config is one `lbbench xdp` run.
type Config struct {
	Quick bool
	// Duration of each measured case (default 400 ms quick, 4 s full).
	Duration time.Duration
	// Sizes are frame sizes on the wire, FCS included (default 64, 1500).
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

func (c *Config) defaults() error {
	if c.Duration <= 0 {
		c.Duration = 4 * time.Second
		if c.Quick {
			c.Duration = 400 * time.Millisecond
		}
	}
	if len(c.Sizes) == 0 {
		c.Sizes = []int{64, 1500}
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

	var fwds []*forwarder
	if want["xlb"] || want["xlb-ct"] {
		fwds = append(fwds, b.xlbForwarder(want))
	}
	if want["reflector"] {
		fwds = append(fwds, b.reflectorForwarder())
	}
	if want["xdpfwd"] {
		fwds = append(fwds, b.xdpfwdForwarder())
	}
	if want["nftlb"] {
		fwds = append(fwds, b.nftlbForwarder())
	}
	total := 0
	for _, f := range fwds {
		total += 2 * len(f.variants) * len(b.cfg.Sizes)
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
			b.progress.Add(2 * len(f.variants) * len(b.cfg.Sizes))
			continue
		}
		results = append(results, rs...)
	}
	return results, nil
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
	for _, p := range []struct {
		dev string
		cpu int
	}{{b.topo.GenDev, b.genCPU}, {b.topo.MidDev, b.midCPU}} {
		for _, pid := range topo.NAPIThreads(p.dev) {
			if err := setAffinity(pid, p.cpu); err != nil {
				b.note("could not pin %s's NAPI thread %d to CPU %d: %v", p.dev, pid, p.cpu, err)
			}
			_ = renice(pid, benchNice)
			if p.dev == b.topo.MidDev {
				// The middle's NAPI thread is the system measured: an
				// ordinary thread, but with a short time slice so that
				// it preempts a polling worker on its core when frames
				// arrive, as a NIC's interrupt would, instead of waiting
				// out the worker's slice while the 256-frame veth ring
				// overflows. At overload the two still share the core
				// fairly (no livelock).
				if err := setSlice(pid, benchNice, napiSlice); err != nil {
					b.note("could not give the middle's NAPI thread a %v time slice (%v; Linux >= 6.12): it may wait out a polling worker's slice", napiSlice, err)
				}
			}
			if p.dev == b.topo.GenDev {
				// The sink's side is the measuring instrument: its NAPI
				// thread runs before the generator thread that shares
				// its core, as an interrupt would, so that frames coming
				// back are not lost to the sender's loop; the sender
				// then slows down instead. (The middle's NAPI thread
				// stays an ordinary thread: it is the system measured.)
				if err := setFIFO(pid); err != nil {
					b.note("could not make the sink's NAPI thread SCHED_FIFO (%v): frames coming back may be lost to the generator's own loop (drop out)", err)
				}
			}
		}
	}
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

// measureForwarder starts f, runs its cases (per variant and size: full
// speed, then half of the rate forwarded) and stops it.
func (b *bench) measureForwarder(ctx context.Context, f *forwarder) (_ []Case, err error) {
	if err := f.start(ctx); err != nil {
		return nil, err
	}
	defer func() {
		if e := f.stop(); e != nil {
			err = errors.Join(err, e)
		}
	}()
	// A short run to warm caches, tables and the rings before measuring.
	if _, err := b.runCase(ctx, f, f.variants[0], b.cfg.Sizes[0], 0, min(b.cfg.Duration/2, 200*time.Millisecond)); err != nil {
		return nil, err
	}
	var out []Case
	for _, v := range f.variants {
		for _, size := range b.cfg.Sizes {
			full, err := b.runCase(ctx, f, v, size, 0, b.cfg.Duration)
			if err != nil {
				return nil, err
			}
			b.progress.Add(1)
			out = append(out, full)
			rate := full.FwdPPS / 2
			if rate <= 0 {
				b.progress.Add(1)
				continue
			}
			half, err := b.runCase(ctx, f, v, size, rate, b.cfg.Duration)
			if err != nil {
				return nil, err
			}
			b.progress.Add(1)
			out = append(out, half)
		}
	}
	return out, nil
}

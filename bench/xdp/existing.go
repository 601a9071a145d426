package xdp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"time"

	"xlb/bench/report"
	"xlb/bench/xdp/gen"
	"xlb/bench/xdp/sink"
	"xlb/bench/xdp/topo"
	"xlb/dataplane/afxdp"
)

// Existing is a run over interfaces lbbench did not build (real NIC
// ports): the generator sends from an AF_XDP socket on Iface's queue 0, the
// sink receives on SinkIface's queue 0 (its XDP program there; empty or
// Iface: one socket for both), and the forwarder (xlb on another host,
// with RemoteXLBConfig's configuration, or (b) xdpfwd there, ServeXDPFwd)
// is reached at XLBMAC and sends every frame back to SinkIface's MAC. No
// namespace is made; nothing is sent but the bench's UDP frames to
// topo.VIP.
type Existing struct {
	Iface, SinkIface string
	XLBMAC           net.HardwareAddr
}

// RunExisting measures xlb and xlb-ct, or xdpfwd, behind e: per variant and size a
// full-load run, the lossless-rate search and latency at half of that rate,
// as Run does. What it cannot see is the far host: no CPU per packet, no
// drop counters there, no floor ((b) xdpfwd) to subtract; the report says
// so. Call it in the network namespace of e.Iface; it needs root.
func RunExisting(ctx context.Context, cfg Config, e Existing) (report.Report, error) {
	if err := cfg.defaults(); err != nil {
		return report.Report{}, err
	}
	if os.Geteuid() != 0 {
		return report.Report{}, errors.New("needs root: XDP and AF_XDP (try sudo)")
	}
	if len(e.XLBMAC) != 6 || e.XLBMAC[0]&1 != 0 {
		return report.Report{}, fmt.Errorf("xlb MAC %v: want the xlb host's port's unicast MAC (--xlb-mac)", e.XLBMAC)
	}
	vs, err := existingVariants(cfg.Variants)
	if err != nil {
		return report.Report{}, err
	}
	if e.SinkIface == "" {
		e.SinkIface = e.Iface
	}
	genIfc, err := ethernetIface(e.Iface)
	if err != nil {
		return report.Report{}, err
	}
	sinkIfc, err := ethernetIface(e.SinkIface)
	if err != nil {
		return report.Report{}, err
	}
	mac, sinkMAC := genIfc.HardwareAddr, sinkIfc.HardwareAddr
	frames := map[[2]int]*gen.Frames{}
	for _, size := range cfg.Sizes {
		for _, v := range vs {
			f, err := gen.Build(gen.FlowSpec{SrcMAC: mac, DstMAC: e.XLBMAC, Clients: topo.Clients,
				Sources: cfg.Sources, Ports: cfg.Ports, Dst: topo.VIP, DstPort: v.port, FrameLen: size - 4})
			if err != nil {
				return report.Report{}, err
			}
			frames[[2]int{size, int(v.port)}] = f
		}
	}
	prog, err := sink.Load(1)
	if err != nil {
		return report.Report{}, err
	}
	defer prog.Close()
	if err := prog.Attach(sinkIfc.Index); err != nil {
		return report.Report{}, fmt.Errorf("sink on %s: %w", e.SinkIface, err)
	}
	sinkSock, err := afxdp.New(sinkIfc.Index, 0, gen.SocketOpts())
	if err != nil {
		return report.Report{}, fmt.Errorf("sink socket on %s queue 0: %w", e.SinkIface, err)
	}
	defer sinkSock.Close()
	if err := prog.Register(0, sinkSock.FD()); err != nil {
		return report.Report{}, err
	}
	// One port: the sink's socket sends too. Two: the generator's own
	// socket on its port, with no XDP program there (nothing comes back
	// to it).
	sock, sinkOf := sinkSock, (*afxdp.Socket)(nil)
	if genIfc.Index != sinkIfc.Index {
		if sock, err = afxdp.New(genIfc.Index, 0, gen.SocketOpts()); err != nil {
			return report.Report{}, fmt.Errorf("generator socket on %s queue 0: %w", e.Iface, err)
		}
		defer sock.Close()
		sinkOf = sinkSock
	}

	var run uint32
	runCase := func(v variant, size int, load string, rate float64, d time.Duration) (Case, error) {
		run++
		ctr := sink.NewCounter([]net.HardwareAddr{sinkMAC}, run)
		var coalesce time.Duration
		backlog := 1 + int(rate*float64(latencyBacklog)/1e9)
		if load == "trial" || load == "lossless" {
			coalesce, backlog = cfg.Coalesce, 64
		}
		res, err := gen.Run(ctx, gen.Config{Socket: sock, Sink: sinkOf, Frames: frames[[2]int{size, int(v.port)}], Counter: ctr, Run: run,
			Duration: d, Rate: rate, CPU: -1, Spin: rate > 0, Coalesce: coalesce, Backlog: backlog})
		if err != nil {
			return Case{}, err
		}
		r := Case{Variant: v.name, Size: size, Load: load, RatePPS: rate, Duration: d.Seconds(),
			Sent: res.Sent, Forwarded: ctr.Frames, PerBackend: ctr.PerBackend, Other: ctr.Other,
			GenCPU: res.ThreadCPU.Seconds(), latency: ctr.Latency}
		r.Stamped, r.GenSkipped = res.Stamped, res.Skipped
		r.GenStalls, r.GenStallMS, r.GenMaxGapUS = res.Stalls, float64(res.StallTime)/1e6, float64(res.MaxGap)/1e3
		r.SentPPS, r.FwdPPS = float64(r.Sent)/d.Seconds(), float64(r.Forwarded)/d.Seconds()
		if r.Sent > 0 {
			r.Loss = 1 - float64(r.Forwarded)/float64(r.Sent)
		}
		r.DropSink = res.SinkStats.Kernel.RxDropped + res.SinkStats.Kernel.RxRingFull
		r.Out, r.OutPPS = r.Forwarded, r.FwdPPS
		h := &r.latency
		us := func(ns uint64) float64 { return float64(ns) / 1e3 }
		r.LatP50, r.LatP90, r.LatP99, r.LatP999 = us(h.Quantile(0.5)), us(h.Quantile(0.9)), us(h.Quantile(0.99)), us(h.Quantile(0.999))
		r.LatMean, r.LatMax = h.Mean()/1e3, us(h.Max)
		return r, nil
	}

	var progress *report.Progress
	if cfg.Progress != nil {
		progress = report.NewProgress(cfg.Progress, "xdp", len(vs)*len(cfg.Sizes)*(3+cfg.Trials))
		defer progress.Done()
	}
	var cases []Case
	for _, v := range vs {
		if _, err := runCase(v, cfg.Sizes[0], "warm", 0, min(cfg.Duration/2, 200*time.Millisecond)); err != nil {
			return report.Report{}, err
		}
		for _, size := range cfg.Sizes {
			full, err := runCase(v, size, "full", 0, cfg.Duration)
			if err != nil {
				return report.Report{}, err
			}
			progress.Add(1)
			ll, err := searchRate(&cfg, full, func(load string, rate float64, d time.Duration) (Case, error) {
				return runCase(v, size, load, rate, d)
			}, progress)
			if err != nil {
				return report.Report{}, err
			}
			cases = append(cases, full, ll)
			rate := ll.RatePPS / 2
			if ll.Loss > cfg.LossMax || rate <= 0 {
				rate = full.FwdPPS / 2
			}
			if rate > 0 {
				half, err := runCase(v, size, "half", rate, cfg.Duration)
				if err != nil {
					return report.Report{}, err
				}
				cases = append(cases, half)
			}
			progress.Add(1)
		}
		if ctx.Err() != nil {
			return report.Report{}, ctx.Err()
		}
	}
	return existingReport(cfg, e, mac, sinkMAC, cases), nil
}

// existingVariants are the variants of a run over existing interfaces:
// xlb's two services, or (b) xdpfwd (ServeXDPFwd on the far host, which
// forwards the untracked service's port like any other).
func existingVariants(want []string) ([]variant, error) {
	var vs []variant
	for _, v := range []variant{{name: "xlb", port: portXLB}, {name: "xlb-ct", port: portXLBCT}, {name: "xdpfwd", port: portXLB}} {
		if slices.Contains(want, v.name) {
			v.desc = variantDesc[v.name] + ", on the remote host"
			vs = append(vs, v)
		}
	}
	switch {
	case len(vs) == 0:
		return nil, errors.New("over existing interfaces xlb, xlb-ct or xdpfwd are measured (--forwarders)")
	case vs[len(vs)-1].name == "xdpfwd" && len(vs) > 1:
		return nil, errors.New("over existing interfaces either xlb (xlb, xlb-ct) or xdpfwd is at the far end, not both (--forwarders)")
	}
	return vs, nil
}

// ethernetIface is the named interface, with a 6-byte MAC.
func ethernetIface(name string) (*net.Interface, error) {
	ifc, err := net.InterfaceByName(name)
	if err != nil {
		return nil, err
	}
	if len(ifc.HardwareAddr) != 6 {
		return nil, fmt.Errorf("interface %s has no Ethernet address", name)
	}
	return ifc, nil
}

// existingReport is RunExisting's report: what the load host sees.
func existingReport(cfg Config, e Existing, mac, sinkMAC net.HardwareAddr, cs []Case) report.Report {
	ports := e.Iface
	if e.SinkIface != e.Iface {
		ports = fmt.Sprintf("%s (generator) and %s (sink)", e.Iface, e.SinkIface)
	}
	t := report.Table{Title: fmt.Sprintf("The forwarder on the remote host, over %s (this host: generator and sink; no CPU figures from the far side)", ports),
		Columns: []string{"forwarder", "frame B", "load", "offered Mpps", "sent Mpps", "back Mpps", "loss %", "p50 µs", "p99 µs", "p99.9 µs"}}
	for _, c := range cs {
		off := "full"
		if c.RatePPS > 0 {
			off = mpps(c.RatePPS)
		}
		sent := mpps(c.SentPPS)
		if c.Load == "lossless" {
			sent = losslessLabel(&c) // ">=" when the generator was the limit
		}
		t.Rows = append(t.Rows, []string{c.Variant, fmt.Sprint(c.Size), c.Load, off, sent, mpps(c.FwdPPS), pct(c.Loss),
			report.F(c.LatP50, 1), report.F(c.LatP99, 1), report.F(c.LatP999, 1)})
	}
	return report.Report{Tables: []report.Table{t},
		Notes: []string{
			fmt.Sprintf("frames from %s (%s) to the far host's MAC %s, VIP %s, %d flows; the forwarder there sends them back to %s's MAC %s (its backends' mac, RemoteXLBConfig; or ServeXDPFwd's)", e.Iface, mac, e.XLBMAC, topo.VIP, cfg.Sources*cfg.Ports, e.SinkIface, sinkMAC),
			"lossless: the highest paced rate with at most " + pct(cfg.LossMax) + " % loss (search, then checked); half: latency at half of it, sender's clock to the sink's receive stamp, both on this host",
			"not measured from here: the xlb host's CPU per packet (read its /status counters and the worker's CPU time there), drops on the wire or in the NIC (ethtool -S on both hosts), and no floor (b) is subtracted from the latency",
		},
		Data: Data{Cases: cs, Backends: 1, Flows: cfg.Sources * cfg.Ports, Variants: cfg.Variants, GenCPU: -1, MidCPU: -1, LossMax: cfg.LossMax, CoalesceUS: float64(cfg.Coalesce) / 1e3}}
}

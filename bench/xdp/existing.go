package xdp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	"xlb/bench/report"
	"xlb/bench/xdp/gen"
	"xlb/bench/xdp/sink"
	"xlb/bench/xdp/topo"
	"xlb/dataplane/afxdp"
)

// Existing is a run over an interface lbbench did not build (a real NIC
// port): the generator and the sink share one AF_XDP socket on Iface's
// queue 0, and the forwarder (xlb on another host, with RemoteXLBConfig's
// configuration) is reached at XLBMAC and sends every frame back to
// Iface's MAC. No namespace is made; nothing is sent but the bench's UDP
// frames to topo.VIP.
type Existing struct {
	Iface  string
	XLBMAC net.HardwareAddr
}

// RunExisting measures xlb (and xlb-ct) behind e: per variant and size a
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
	var vs []variant
	for _, v := range []variant{{name: "xlb", port: portXLB}, {name: "xlb-ct", port: portXLBCT}} {
		for _, w := range cfg.Variants {
			if w == v.name {
				v.desc = variantDesc[v.name] + ", on the remote host"
				vs = append(vs, v)
			}
		}
	}
	if len(vs) == 0 {
		return report.Report{}, errors.New("over existing interfaces only xlb and xlb-ct are measured (--forwarders)")
	}
	ifc, err := net.InterfaceByName(e.Iface)
	if err != nil {
		return report.Report{}, err
	}
	mac := ifc.HardwareAddr
	if len(mac) != 6 {
		return report.Report{}, fmt.Errorf("interface %s has no Ethernet address", e.Iface)
	}
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
	if err := prog.Attach(ifc.Index); err != nil {
		return report.Report{}, fmt.Errorf("sink on %s: %w", e.Iface, err)
	}
	sock, err := afxdp.New(ifc.Index, 0, gen.SocketOpts())
	if err != nil {
		return report.Report{}, fmt.Errorf("generator socket on %s queue 0: %w", e.Iface, err)
	}
	defer sock.Close()
	if err := prog.Register(0, sock.FD()); err != nil {
		return report.Report{}, err
	}

	var run uint32
	runCase := func(v variant, size int, load string, rate float64, d time.Duration) (Case, error) {
		run++
		ctr := sink.NewCounter([]net.HardwareAddr{mac}, run)
		var coalesce time.Duration
		backlog := 1 + int(rate*float64(latencyBacklog)/1e9)
		if load == "trial" || load == "lossless" {
			coalesce, backlog = cfg.Coalesce, 64
		}
		res, err := gen.Run(ctx, gen.Config{Socket: sock, Frames: frames[[2]int{size, int(v.port)}], Counter: ctr, Run: run,
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
		r.DropSink = res.Stats.Kernel.RxDropped + res.Stats.Kernel.RxRingFull
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
	return existingReport(cfg, e, mac, cases), nil
}

// existingReport is RunExisting's report: what the load host sees.
func existingReport(cfg Config, e Existing, mac net.HardwareAddr, cs []Case) report.Report {
	t := report.Table{Title: fmt.Sprintf("xlb on the remote host, over %s (this host: generator and sink; no CPU figures from the far side)", e.Iface),
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
			fmt.Sprintf("frames from %s (%s) to the xlb host's MAC %s, VIP %s, %d flows; xlb sends them back to %s's MAC (its backends' mac, RemoteXLBConfig)", e.Iface, mac, e.XLBMAC, topo.VIP, cfg.Sources*cfg.Ports, e.Iface),
			"lossless: the highest paced rate with at most " + pct(cfg.LossMax) + " % loss (search, then checked); half: latency at half of it, sender's clock to the sink's receive stamp, both on this host",
			"not measured from here: the xlb host's CPU per packet (read its /status counters and the worker's CPU time there), drops on the wire or in the NIC (ethtool -S on both hosts), and no floor (b) is subtracted from the latency",
		},
		Data: Data{Cases: cs, Backends: 1, Flows: cfg.Sources * cfg.Ports, Variants: cfg.Variants, GenCPU: -1, MidCPU: -1, LossMax: cfg.LossMax, CoalesceUS: float64(cfg.Coalesce) / 1e3}}
}

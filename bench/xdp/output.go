package xdp

import (
	"fmt"
	"runtime"
	"strconv"
	"strings"

	"xlb/bench/report"
	"xlb/bench/xdp/topo"
)

// Data is the JSON result beside the tables.
type Data struct {
	Cases    []Case   `json:"cases"`
	Backends int      `json:"backends"`
	Flows    int      `json:"flows"`
	Variants []string `json:"forwarders"`
	// GenCPU and MidCPU are the cores the generator and the middle hop
	// were pinned to (-1: none).
	GenCPU int `json:"generator_cpu"`
	MidCPU int `json:"middle_cpu"`
}

// find returns the case of variant v at size and load, or nil.
func find(rs []Case, v string, size int, load string) *Case {
	for i := range rs {
		if rs[i].Variant == v && rs[i].Size == size && rs[i].Load == load {
			return &rs[i]
		}
	}
	return nil
}

func mpps(pps float64) string { return report.F(pps/1e6, 3) }

func (b *bench) report(rs []Case) report.Report {
	r := report.Report{Data: Data{Cases: rs, Backends: b.cfg.Backends, Flows: b.cfg.Sources * b.cfg.Ports,
		Variants: b.cfg.Variants, GenCPU: b.genCPU, MidCPU: b.midCPU}}

	main := report.Table{
		Title: "Forwarding through the middle hop (full: as fast as the generator sends; half: at half the rate forwarded at full)",
		Columns: []string{"frame B", "forwarder", "load", "sent Mpps", "out Mpps", "fwd Mpps", "loss %", "busy cores",
			"CPU ns/pkt", "Mpps/core", "p50 µs", "p99 µs", "p99.9 µs"},
	}
	drops := report.Table{
		Title:   "Where frames were lost (kernel counters) and per-backend share",
		Columns: []string{"frame B", "forwarder", "load", "sent", "forwarded", "drop in", "drop mid", "drop out", "drop sink", "per backend %", "other MAC"},
	}
	for _, c := range rs {
		main.Rows = append(main.Rows, []string{strconv.Itoa(c.Size), c.Variant, c.Load, mpps(c.SentPPS), mpps(c.OutPPS), mpps(c.FwdPPS),
			report.F(100*c.Loss, 2), report.F(c.BusyCores, 2), report.G(c.NsPerPkt), mpps(c.PPSPerCore),
			report.G(c.LatP50), report.G(c.LatP99), report.G(c.LatP999)})
		var shares []string
		for _, n := range c.PerBackend {
			s := "0"
			if c.Forwarded > 0 {
				s = report.F(100*float64(n)/float64(c.Forwarded), 0)
			}
			shares = append(shares, s)
		}
		drops.Rows = append(drops.Rows, []string{strconv.Itoa(c.Size), c.Variant, c.Load, strconv.FormatUint(c.Sent, 10),
			strconv.FormatUint(c.Forwarded, 10), strconv.FormatUint(c.DropIn, 10), strconv.FormatUint(c.DropMid, 10), strconv.FormatUint(c.DropOut, 10),
			strconv.FormatUint(c.DropSink, 10), strings.Join(shares, "/"), strconv.FormatUint(c.Other, 10)})
	}
	r.Tables = append(r.Tables, main)

	ratios := report.Table{
		Title:   "xlb against the baselines (full load): pps sent on by the middle hop, and per busy core",
		Columns: []string{"frame B", "xlb", "baseline", "pps ratio", "per-core ratio"},
	}
	baselines := []struct{ name, label string }{{"reflector", "(a) reflector"}, {"xdpfwd", "(b) xdpfwd"}, {"nftlb", "(c) nftlb"}}
	for _, size := range b.cfg.Sizes {
		for _, x := range []string{"xlb", "xlb-ct"} {
			xc := find(rs, x, size, "full")
			if xc == nil {
				continue
			}
			for _, bl := range baselines {
				bc := find(rs, bl.name, size, "full")
				if bc == nil {
					continue
				}
				ratios.Rows = append(ratios.Rows, []string{strconv.Itoa(size), x, bl.label,
					report.Ratio(xc.OutPPS, bc.OutPPS), report.Ratio(xc.PPSPerCore, bc.PPSPerCore)})
			}
		}
	}
	if len(ratios.Rows) > 0 {
		r.Tables = append(r.Tables, ratios)
	}
	r.Tables = append(r.Tables, drops)

	r.Targets = b.targets(rs)
	r.Charts = b.charts(rs)
	r.Notes = append(b.methodNotes(rs), b.notes...)
	return r
}

func (b *bench) targets(rs []Case) []report.Target {
	var ts []report.Target
	small := 64
	if !containsInt(b.cfg.Sizes, 64) {
		small = b.cfg.Sizes[0]
	}
	for _, x := range []string{"xlb", "xlb-ct"} {
		xc := find(rs, x, small, "full")
		if xc == nil {
			continue
		}
		for _, t := range []struct {
			base, label string
			want        float64
		}{{"reflector", "(a) AF_XDP reflector", 0.9}, {"nftlb", "(c) nftables DNAT", 2}} {
			bc := find(rs, t.base, small, "full")
			if bc == nil || bc.PPSPerCore == 0 {
				continue
			}
			v := xc.PPSPerCore / bc.PPSPerCore
			ts = append(ts, report.Target{Name: fmt.Sprintf("%s / %s, pps per busy core, %d B", x, t.label, small),
				Want: fmt.Sprintf(">= %gx", t.want), Measured: v, Unit: "x", Met: v >= t.want})
		}
	}
	for _, x := range []string{"xlb", "xlb-ct"} {
		for _, size := range b.cfg.Sizes {
			hc := find(rs, x, size, "half")
			if hc == nil || hc.latency.N == 0 {
				continue
			}
			ts = append(ts,
				report.Target{Name: fmt.Sprintf("%s latency p50 at half saturation, %d B", x, size), Want: "<= 10 µs",
					Measured: hc.LatP50, Unit: "µs", Met: hc.LatP50 <= 10},
				report.Target{Name: fmt.Sprintf("%s latency p99 at half saturation, %d B", x, size), Want: "<= 50 µs",
					Measured: hc.LatP99, Unit: "µs", Met: hc.LatP99 <= 50})
		}
	}
	return ts
}

func containsInt(s []int, v int) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// charts: the latency CDF per frame size at half load, one line per
// forwarder, from 200 quantiles of its histogram.
func (b *bench) charts(rs []Case) []report.Chart {
	var cs []report.Chart
	for _, size := range b.cfg.Sizes {
		c := report.Chart{File: fmt.Sprintf("xdp-latency-%d", size), Kind: "cdf", LogX: true,
			Title:  fmt.Sprintf("Latency generator -> middle hop -> sink, %d-byte frames, half of saturation", size),
			XLabel: "latency (µs)", YLabel: "fraction of frames"}
		for _, v := range b.cfg.Variants {
			hc := find(rs, v, size, "half")
			if hc == nil || hc.latency.N == 0 {
				continue
			}
			s := report.Series{Name: v}
			for i := 1; i < 200; i++ {
				s.Y = append(s.Y, float64(hc.latency.Quantile(float64(i)/200))/1e3)
			}
			c.Series = append(c.Series, s)
		}
		if len(c.Series) > 0 {
			cs = append(cs, c)
		}
	}
	return cs
}

func (b *bench) methodNotes(rs []Case) []string {
	n := []string{
		fmt.Sprintf("Topology: namespaces %s-gen and %s-mid joined by one veth pair (%sg <-> %sm), one queue each; "+
			"%d backends are macvlans on %sg with their own MACs and addresses (the middle hop has permanent neighbour entries for them, "+
			"and xlb's TCP health checks are answered there). VIP %s; everything is removed at exit.",
			b.cfg.Prefix, b.cfg.Prefix, b.cfg.Prefix, b.cfg.Prefix, b.cfg.Backends, b.cfg.Prefix, topo.VIP),
		fmt.Sprintf("Traffic: UDP from %d sources x %d source ports = %d distinct 5-tuples, sent in turn by our AF_XDP generator "+
			"(dataplane/afxdp, copy mode on veth) from %sg; frame sizes are wire sizes with the 4-byte FCS (a 64 B frame is 60 bytes in memory). "+
			"Each case sends for %v; full load = as fast as the generator's socket takes frames, half = a token bucket at half the rate forwarded at full load.",
			b.cfg.Sources, b.cfg.Ports, b.cfg.Sources*b.cfg.Ports, b.cfg.Prefix, b.cfg.Duration),
		"sent = frames the kernel completed from the generator's TX ring; fwd = frames of the case that came back to the generator's socket (the sink's XDP program redirects UDP to the bench ports there), counted by destination MAC; loss = 1 - fwd/sent. " +
			"drop in = the middle's veth ring was full or its XDP redirect failed (an AF_XDP socket's ring full: the middle hop too slow); drop out = the generator's veth ring was full or XDP_TX failed on the way back (the return path too slow); drop sink = the sink socket's ring was full; drop mid = the rest (lost inside the middle hop, e.g. its AF_XDP TX ring full; its own counters are in the JSON). " +
			"out = fwd + drop out: what the middle hop sent on; its CPU figures are per frame sent on, so a forwarder faster than the generator's side can absorb is not charged for frames lost after it.",
		"Latency = receive time - the transmit time written into the payload just before the frame was queued (one monotonic clock, one process; one reading per batch), so it includes the generator's send syscall, both veth hops and the sink's receive loop, not only the middle hop; (b) xdpfwd is the floor of that path.",
	}
	cpu := "CPU of the middle hop = its veth's NAPI kernel thread (threaded NAPI: XDP programs, copies into AF_XDP sockets, the IP stack and nftables all run there) + the forwarder's user-space threads " +
		"(xlb: every thread of the xlb process; reflector: its worker threads), from /proc/PID/schedstat over the case. busy cores = that CPU time / wall time; " +
		"CPU ns/pkt = CPU time / out; Mpps/core = out / CPU seconds. AF_XDP workers poll (xlb spins 50 µs before sleeping), so at half load their CPU includes idle polling: compare per-core figures at full load."
	if b.midCPU >= 0 {
		cpu += fmt.Sprintf(" Pinned: generator thread and the generator veth's NAPI thread on CPU %d, the middle's NAPI thread and worker on CPU %d (of %d).", b.genCPU, b.midCPU, runtime.NumCPU())
	}
	var took []string
	for _, c := range rs {
		if c.Load == "full" && c.XDPRedirected > 0 {
			took = append(took, fmt.Sprintf("%s %d B %.0f%%", c.Variant, c.Size, 100*float64(c.SocketTook)/float64(c.XDPRedirected)))
		}
	}
	if len(took) > 0 {
		cpu += " At full load the AF_XDP paths are overloaded and their kernel side also works on frames their socket then drops (no fill buffer, rx ring full: receive livelock, as on a NIC at overload); " +
			"share of the frames their XDP program redirected that the worker took: " + strings.Join(took, ", ") + ". That work counts in their CPU per packet."
	}
	n = append(n, cpu,
		fmt.Sprintf("Priorities: every thread measured or measuring (generator, NAPI threads, xlb, the reflector's worker) runs at nice %d, so that other load on the machine disturbs less; "+
			"the sink's NAPI thread is SCHED_FIFO (lowest priority), as an interrupt would be, so that frames coming back are not lost to the generator's own loop; "+
			"the middle's NAPI thread stays SCHED_OTHER but with a %v time slice, so that it preempts a polling worker when frames arrive (as an interrupt would) and still shares the core fairly at overload. "+
			"The veth rings hold 256 frames: a middle hop that is off its core for a few ms at any load loses frames (drop in).", benchNice, napiSlice),
		"veth specifics: there is no zero-copy AF_XDP on veth, so xlb and the reflector copy every frame in and out (copy mode); and an XDP program on the receiving veth first copies each frame that was sent from a socket or the stack into a page with XDP headroom, "+
			"which the XDP-based middles (xlb, reflector, xdpfwd) pay and nftables (no XDP program) does not. On a NIC with zero-copy both copies go away.")
	return n
}

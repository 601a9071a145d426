package xdp

import (
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"time"

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
	// LossMax is the loss a lossless trial may have (fraction).
	LossMax float64 `json:"loss_max"`
	// CoalesceUS is the search's coalescing window (µs; 0: evenly spaced).
	CoalesceUS float64 `json:"coalesce_us"`
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

func pct(f float64) string { return report.F(100*f, 2) }

// losslessLabel is the lossless rate as shown: "≥" when the generator was
// the limit.
func losslessLabel(c *Case) string {
	if c.GenLimited {
		return ">=" + mpps(c.SentPPS)
	}
	return mpps(c.SentPPS)
}

func (b *bench) report(rs []Case) report.Report {
	r := report.Report{Data: Data{Cases: rs, Backends: b.cfg.Backends, Flows: b.cfg.Sources * b.cfg.Ports,
		Variants: b.cfg.Variants, GenCPU: b.genCPU, MidCPU: b.midCPU, LossMax: b.cfg.LossMax, CoalesceUS: float64(b.cfg.Coalesce) / 1e3}}

	lossless := report.Table{
		Title: fmt.Sprintf("Maximum lossless rate (loss <= %s %%: highest paced rate of a search, checked for %v) and the middle hop's CPU at that rate",
			report.G(100*b.cfg.LossMax), b.cfg.Duration),
		Columns: []string{"frame B", "forwarder", "Mpps (no loss)", "loss %", "busy cores", "CPU ns/pkt", "Mpps/core", "trials", "note"},
	}
	lat := report.Table{
		Title: "Latency at half the lossless rate (µs; added = minus (b) xdpfwd's at the same rate and size, the floor of this path)",
		Columns: []string{"frame B", "forwarder", "rate Mpps", "sent Mpps", "loss %", "p50", "p99", "p99.9",
			"floor p50", "floor p99", "added p50", "added p99", "added p99.9", "busy floor p50", "busy floor p99"},
	}
	full := report.Table{
		Title: "At full load (as fast as the generator sends: overload; the AF_XDP paths livelock)",
		Columns: []string{"frame B", "forwarder", "sent Mpps", "out Mpps", "fwd Mpps", "loss %", "busy cores",
			"CPU ns/pkt", "Mpps/core", "worker took %"},
	}
	drops := report.Table{
		Title:   "Where frames were lost (kernel counters) and per-backend share",
		Columns: []string{"frame B", "forwarder", "load", "rate Mpps", "sent", "forwarded", "drop in", "drop mid", "drop out", "drop sink", "per backend %", "other MAC"},
	}
	for _, c := range rs {
		if c.Load == "paired" {
			continue // pairedTable
		}
		size := strconv.Itoa(c.Size)
		switch c.Load {
		case "lossless":
			note := ""
			switch {
			case c.GenLimited:
				note = "no loss at the generator's full rate"
			case c.Loss > b.cfg.LossMax && anyPass(c.Trials):
				note = "the check lost more than its trial"
			case c.Loss > b.cfg.LossMax:
				note = "lossy: no trial passed"
			}
			lossless.Rows = append(lossless.Rows, []string{size, c.Variant, losslessLabel(&c), pct(c.Loss), report.F(c.BusyCores, 2),
				report.G(c.NsPerPkt), mpps(c.PPSPerCore), strconv.Itoa(len(c.Trials)), note})
		case "half":
			row := []string{size, c.Variant, mpps(c.RatePPS), mpps(c.SentPPS), pct(c.Loss), report.G(c.LatP50), report.G(c.LatP99), report.G(c.LatP999)}
			if a := c.Added; a != nil {
				row = append(row, report.G(a.FloorP50), report.G(a.FloorP99), report.G(a.P50), report.G(a.P99), report.G(a.P999))
				if a.BusyFloorP50 > 0 {
					row = append(row, report.G(a.BusyFloorP50), report.G(a.BusyFloorP99))
				} else {
					row = append(row, "-", "-")
				}
			} else {
				row = append(row, "-", "-", "-", "-", "-", "-", "-")
			}
			lat.Rows = append(lat.Rows, row)
		case "full":
			took := "-"
			if c.XDPRedirected > 0 {
				took = report.F(100*float64(c.SocketTook)/float64(c.XDPRedirected), 0)
			}
			full.Rows = append(full.Rows, []string{size, c.Variant, mpps(c.SentPPS), mpps(c.OutPPS), mpps(c.FwdPPS),
				pct(c.Loss), report.F(c.BusyCores, 2), report.G(c.NsPerPkt), mpps(c.PPSPerCore), took})
		}
		load := c.Load
		if c.FloorFor != "" {
			load = c.Load + ":" + c.FloorFor
		}
		rate := "max"
		if c.RatePPS > 0 {
			rate = mpps(c.RatePPS)
		}
		var shares []string
		for _, n := range c.PerBackend {
			s := "0"
			if c.Forwarded > 0 {
				s = report.F(100*float64(n)/float64(c.Forwarded), 0)
			}
			shares = append(shares, s)
		}
		drops.Rows = append(drops.Rows, []string{size, c.Variant, load, rate, strconv.FormatUint(c.Sent, 10),
			strconv.FormatUint(c.Forwarded, 10), strconv.FormatUint(c.DropIn, 10), strconv.FormatUint(c.DropMid, 10), strconv.FormatUint(c.DropOut, 10),
			strconv.FormatUint(c.DropSink, 10), strings.Join(shares, "/"), strconv.FormatUint(c.Other, 10)})
	}
	r.Tables = append(r.Tables, lossless)
	if t := b.pairedTable(rs); len(t.Rows) > 0 {
		r.Tables = append(r.Tables, t)
	}

	ratios := report.Table{
		Title:   "xlb against the baselines at the maximum lossless rate: pps, and pps per busy core (\">=\": a baseline limited by the generator, so the ratio is an upper bound)",
		Columns: []string{"frame B", "xlb", "baseline", "pps ratio", "per-core ratio"},
	}
	baselines := []struct{ name, label string }{{"reflector", "(a) reflector"}, {"xdpfwd", "(b) xdpfwd"}, {"nftlb", "(c) nftlb"}}
	for _, size := range b.cfg.Sizes {
		for _, x := range []string{"xlb", "xlb-ct"} {
			xc := find(rs, x, size, "lossless")
			if xc == nil {
				continue
			}
			for _, bl := range baselines {
				bc := find(rs, bl.name, size, "lossless")
				if bc == nil {
					continue
				}
				label := bl.label
				if bc.GenLimited {
					label += " (>=)"
				}
				ratios.Rows = append(ratios.Rows, []string{strconv.Itoa(size), x, label,
					report.Ratio(xc.SentPPS, bc.SentPPS), report.Ratio(xc.PPSPerCore, bc.PPSPerCore)})
			}
		}
	}
	if len(ratios.Rows) > 0 {
		r.Tables = append(r.Tables, ratios)
	}
	r.Tables = append(r.Tables, lat)
	if t := tailTable(rs); len(t.Rows) > 0 {
		r.Tables = append(r.Tables, t)
	}
	if t := whenTable(rs); len(t.Rows) > 0 {
		r.Tables = append(r.Tables, t)
	}
	r.Tables = append(r.Tables, full, drops)

	r.Targets = b.targets(rs)
	r.Charts = b.charts(rs)
	r.Notes = append(b.methodNotes(rs), b.notes...)
	return r
}

// tailTable is, for xlb's latency and lossless runs, the latency tail
// beside what its worker waited on (Tail).
func tailTable(rs []Case) report.Table {
	t := report.Table{
		Title: "xlb's latency tail and what its worker waited on over the run (ms; schedstat, /status, XDP_STATISTICS, gctrace)",
		Columns: []string{"frame B", "forwarder", "load", "p50 µs", "p99 µs", "max µs", "frames >= 1 ms",
			"worker run", "worker run-queue wait (mean µs)", "preempted", "poll(2) sleeps", "runtime parks", "NAPI run", "NAPI wait (mean µs)", "others on its core", "host steal", "xlb's other threads",
			"GCs", "GC pause (max)", "rx ring full", "fill empty", "drop in (veth)"},
	}
	for _, c := range rs {
		tl := c.Tail
		if tl == nil || (c.Load != "half" && c.Load != "half-slice" && c.Load != "lossless") {
			continue
		}
		u := func(n uint64) string { return strconv.FormatUint(n, 10) }
		t.Rows = append(t.Rows, []string{strconv.Itoa(c.Size), c.Variant, c.Load, report.G(c.LatP50), report.G(c.LatP99), report.G(c.LatMax),
			u(tl.FramesOver1ms), report.F(tl.WorkerRunMS, 0), withMean(tl.WorkerWaitMS, tl.WorkerSlices), u(tl.WorkerPreempted), u(tl.IdleSleeps), u(tl.RuntimeParks),
			report.F(tl.NAPIRunMS, 0), withMean(tl.NAPIWaitMS, tl.NAPISlices), report.F(tl.OthersMS, 0), report.F(tl.StealMS, 0), report.F(tl.XLBOthersMS, 0),
			strconv.Itoa(tl.GCs), report.F(tl.GCPauseMS, 2) + " (" + report.F(tl.GCMaxPauseMS, 2) + ")",
			u(tl.RxRingFull), u(tl.FillRingEmpty), u(c.DropIn)})
	}
	return t
}

// whenTable is, for xlb's latency runs, what the worker and the NAPI
// thread did while frames that took 1 ms or more were on their way, and in
// the sample periods in which no frame took 200 µs (Tail.When).
func whenTable(rs []Case) report.Table {
	t := report.Table{
		Title: fmt.Sprintf("When xlb's tail happens: share of the time, from the send of a frame that took >= %v to its arrival, and in %v periods where none took %v "+
			"(schedstat sampled every %v; the kernel counts a run-queue wait when it ends, so a wait share can pass 100 %%)",
			tailLatency, sampleEvery, calmLatency, sampleEvery),
		Columns: []string{"frame B", "forwarder", "load", "spans", "n", "worker runs %", "worker waits %", "worker asleep %",
			"NAPI runs %", "NAPI waits %", "core: others or idle %"},
	}
	for _, c := range rs {
		if c.Tail == nil || c.Tail.When == nil {
			continue
		}
		w := c.Tail.When
		for _, k := range []struct {
			name string
			n    int
			s    Share
		}{{"tail", w.TailSpans, w.Tail}, {"calm", w.CalmSpans, w.Calm}} {
			p := func(f float64) string { return report.F(100*f, 0) }
			t.Rows = append(t.Rows, []string{strconv.Itoa(c.Size), c.Variant, c.Load, k.name, strconv.Itoa(k.n),
				p(k.s.WorkerRun), p(k.s.WorkerWait), p(k.s.WorkerSleep), p(k.s.NAPIRun), p(k.s.NAPIWait), p(k.s.CoreOther)})
		}
	}
	return t
}

// withMean is a wait in ms with its mean per time on the CPU in µs.
func withMean(waitMS float64, slices uint64) string {
	if slices == 0 {
		return report.F(waitMS, 1)
	}
	return fmt.Sprintf("%s (%s)", report.F(waitMS, 1), report.F(1e3*waitMS/float64(slices), 1))
}

// targets are ours (docs/performance-targets.md): xlb >= 0.9 x (a) in
// lossless pps, >= 2 x (c) in pps per busy core at the lossless rate, at
// 64 B (or the smallest size); added latency p50 <= 10 µs and p99 <= 50 µs
// at half the lossless rate (absolute where no floor was measured, and
// named so).
func (b *bench) targets(rs []Case) []report.Target {
	var ts []report.Target
	small := 64
	if !containsInt(b.cfg.Sizes, 64) {
		small = b.cfg.Sizes[0]
	}
	for _, x := range []string{"xlb", "xlb-ct"} {
		xc := find(rs, x, small, "lossless")
		if xc == nil {
			continue
		}
		if bc := find(rs, "reflector", small, "lossless"); bc != nil && bc.SentPPS > 0 {
			v := xc.SentPPS / bc.SentPPS
			ts = append(ts, report.Target{Name: fmt.Sprintf("%s / (a) AF_XDP reflector, lossless pps, %d B", x, small),
				Want: ">= 0.9x", Measured: v, Unit: "x", Met: v >= 0.9})
		}
		if bc := find(rs, "nftlb", small, "lossless"); bc != nil && bc.PPSPerCore > 0 {
			v := xc.PPSPerCore / bc.PPSPerCore
			ts = append(ts, report.Target{Name: fmt.Sprintf("%s / (c) nftables DNAT, pps per busy core at the lossless rate, %d B", x, small),
				Want: ">= 2x", Measured: v, Unit: "x", Met: v >= 2})
		}
	}
	// Tracking costs tens of ns a packet in the engine, next to ~2.5 µs of
	// AF_XDP path on veth: the tracked variant forwards within 10 % of the
	// untracked one, unless its worker stalls (first-touch page faults in
	// the conntrack table did, before it was populated at start). Measured
	// by the paired search where it ran (each variant's own search is
	// noisier: minutes apart on a machine whose load changes).
	if v, ok := PairedRatio(rs, small); ok {
		ts = append(ts, report.Target{Name: fmt.Sprintf("xlb-ct / xlb, lossless pps (paired search), %d B", small),
			Want: ">= 0.9x", Measured: v, Unit: "x", Met: v >= 0.9})
	} else if ct, x := find(rs, "xlb-ct", small, "lossless"), find(rs, "xlb", small, "lossless"); ct != nil && x != nil && x.SentPPS > 0 {
		v := ct.SentPPS / x.SentPPS
		ts = append(ts, report.Target{Name: fmt.Sprintf("xlb-ct / xlb, lossless pps, %d B", small),
			Want: ">= 0.9x", Measured: v, Unit: "x", Met: v >= 0.9})
	}
	if n, ok := WorkerFaults(rs); ok {
		ts = append(ts, report.Target{Name: "page faults of xlb's worker over the xlb and xlb-ct cases, its first frames excepted",
			Want: fmt.Sprintf("<= %d", FaultSlack), Measured: float64(n), Unit: "faults", Met: n <= FaultSlack})
	}
	for _, x := range []string{"xlb", "xlb-ct"} {
		for _, size := range b.cfg.Sizes {
			hc := find(rs, x, size, "half")
			if hc == nil || hc.latency.N == 0 {
				continue
			}
			kind, p50, p99 := "added latency", hc.LatP50, hc.LatP99
			if hc.Added != nil {
				p50, p99 = hc.Added.P50, hc.Added.P99
			} else {
				kind = "latency (absolute: no floor measured)"
			}
			ts = append(ts,
				report.Target{Name: fmt.Sprintf("%s %s p50 at half the lossless rate, %d B", x, kind, size), Want: "<= 10 µs",
					Measured: p50, Unit: "µs", Met: p50 <= 10},
				report.Target{Name: fmt.Sprintf("%s %s p99 at half the lossless rate, %d B", x, kind, size), Want: "<= 50 µs",
					Measured: p99, Unit: "µs", Met: p99 <= 50})
		}
	}
	return ts
}

// PairedRatio is xlb-ct's lossless rate over xlb's at size by the paired
// search; ok false when it did not run or either variant passed no step.
func PairedRatio(rs []Case, size int) (float64, bool) {
	x, ct := find(rs, "xlb", size, "paired"), find(rs, "xlb-ct", size, "paired")
	if x == nil || ct == nil || x.Paired == nil || ct.Paired == nil {
		return 0, false
	}
	v, _, _, ok := pairedRatio(*x.Paired, *ct.Paired)
	return v, ok
}

// pairedTable shows the paired search per size: each variant's bracket,
// its steps (rate: losses of the trials) and the ratio with its range.
func (b *bench) pairedTable(rs []Case) report.Table {
	t := report.Table{
		Title: fmt.Sprintf("xlb-ct against xlb, paired search: trials interleaved (xlb, xlb-ct, ...), %d per rate step, a step passes when most do (loss <= %s %%); ratio range from the brackets",
			pairedTrials, report.G(100*b.cfg.LossMax)),
		Columns: []string{"frame B", "forwarder", "Mpps (no loss)", "lowest failing Mpps", "steps: Mpps (median loss %)", "xlb-ct / xlb", "range"},
	}
	for _, size := range b.cfg.Sizes {
		x, ct := find(rs, "xlb", size, "paired"), find(rs, "xlb-ct", size, "paired")
		if x == nil || ct == nil || x.Paired == nil || ct.Paired == nil {
			continue
		}
		ratio, rng := "-", "-"
		if v, lo, hi, ok := pairedRatio(*x.Paired, *ct.Paired); ok {
			ratio, rng = report.Ratio(v, 1), report.F(lo, 2)+"-"+report.F(hi, 2)
		}
		for _, c := range []*Case{x, ct} {
			p := c.Paired
			var steps []string
			for _, s := range p.Steps {
				mark := ""
				if !s.Pass {
					mark = " x"
				}
				steps = append(steps, fmt.Sprintf("%s (%s)%s", mpps(s.RatePPS), pct(medianLoss(s.Losses)), mark))
			}
			hi := "-"
			if p.Hi > 0 {
				hi = mpps(p.Hi)
			}
			row := []string{strconv.Itoa(size), c.Variant, mpps(p.Lo), hi, strings.Join(steps, ", "), "", ""}
			if c == ct {
				row[5], row[6] = ratio, rng
			}
			t.Rows = append(t.Rows, row)
		}
	}
	return t
}

// FaultSlack is how many page faults xlb's worker may take over the
// cases of both variants once its own first frames are behind it
// (WorkerFaults). Populated at start, the conntrack table costs it none:
// 1-5 in all were seen (the Go runtime, the kernel). Unpopulated, each of
// the bench table's 128 huge pages costs one as xlb-ct's first flows land
// on it (one per 4 KiB page without THP): 128 or more, spread over
// xlb-ct's warm-up and the case after it (the worker, stalled, is still
// working off xlb-ct's frames there).
const FaultSlack = 32

// WorkerFaults is the page faults xlb's worker took over every case of xlb
// and xlb-ct but xlb's warm-up, which runs first and carries the worker's
// own first frames (its buffers first touched: 4-9 faults); ok false
// without xlb-ct's warm-up. It counts faults, not time, so a loaded machine
// does not move it: it is the check (lbbench's CI smoke, cmd/lbbench's
// tests) that the conntrack table stays populated at start, so that
// xlb-ct's first inserts cost the worker nothing more than xlb's packets.
func WorkerFaults(rs []Case) (faults uint64, ok bool) {
	for _, c := range rs {
		switch {
		case c.Variant == "xlb" && c.Load == "warm":
		case c.Variant == "xlb" || c.Variant == "xlb-ct":
			faults += c.WorkerFaults
			ok = ok || c.Variant == "xlb-ct" && c.Load == "warm"
		}
	}
	return faults, ok
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
			Title:  fmt.Sprintf("Latency generator -> middle hop -> sink, %d-byte frames, at half the lossless rate", size),
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
			"Per forwarder and frame size: full load for %v (as fast as the generator's socket takes frames), the lossless-rate search, then the latency run.",
			b.cfg.Sources, b.cfg.Ports, b.cfg.Sources*b.cfg.Ports, b.cfg.Prefix, b.cfg.Duration),
		fmt.Sprintf("Throughput is the maximum lossless rate, RFC 2544 style: the generator sends at a fixed paced rate (spinning on the clock, %s) for %v trials; "+
			"a trial passes when it loses at most %s %% of what was sent. The first trial is at the rate forwarded at full load; passes step up, doubling after a clean pass and by 25 %% after one that lost a little (at most to what the generator sent at full speed); "+
			"failures step to below what came back (secant; the step doubles with each failure in a row), then bisection until the highest pass and the lowest failure are within %s %% or %d trials are spent. "+
			"A paced generator held up (the host took its core, a send call waited, the sink's thread ran) sends at most 64 frames late in one go, a quarter of the middle's veth ring, and skips the rest rather than send them in a burst (JSON: generator_skipped); Mpps (no loss) is the rate actually sent. "+
			"A trial that failed with a small loss (at most %d x the threshold) is run once more at the same rate: the veth rings hold 256 frames, half a millisecond at 0.5 Mpps, "+
			"so a virtual machine's host taking a core away for a millisecond loses frames at any rate a forwarder needs most of its core for, and only an overloaded forwarder loses them again. "+
			"The highest pass is then run for %v (again once after a small loss, then 5 %% lower while it loses more): that run is the result, with the busy cores and CPU per packet at that rate; the trials and checks are in the JSON (\"search\", \"checks\"). "+
			"A forwarder that loses nothing at full speed keeps up with the generator, and its rate is shown as \">=\" (the instrument's limit, not the forwarder's). "+
			"The ratios and throughput targets use these rates; the full-load table measures something else worth knowing, the behaviour at overload (an AF_XDP path's kernel side copies frames its worker then has no time for, receive livelock, so it may forward less than at its lossless rate).",
			spacing(b.cfg.Coalesce), b.cfg.Trial, report.G(100*b.cfg.LossMax), report.G(100*b.cfg.Resolution), b.cfg.Trials, smallLoss, b.cfg.Duration),
		fmt.Sprintf("First frames: a short full-speed run per variant before its cases warms the rings and, for xlb-ct, inserts the flows (xlb's conntrack table holds %d entries, %d MiB). "+
			"It is kept in the JSON (load \"warm\"), with every case's page faults of the xlb process and of its busiest thread, the worker (middle_page_faults, worker_page_faults, /proc/PID/task/*/stat). "+
			"xlb populates its table at start (huge pages, every page faulted in before the first packet), so xlb-ct's first inserts cost the worker no faults; a table left unpopulated costs it a fault, "+
			"a 2 MiB page zeroed (0.1 ms, or 2-8 ms on a virtual machine whose host backs memory on first touch), as the first flows land on each page, while its rings overflow. "+
			"The target on the worker's faults after its own first frames (xlb's warm-up) is the check that this stays so.",
			benchCTCapacity, benchCTCapacity*64>>20),
		"sent = frames the kernel completed from the generator's TX ring; fwd = frames of the case that came back to the generator's socket (the sink's XDP program redirects UDP to the bench ports there), counted by destination MAC; loss = 1 - fwd/sent. " +
			"drop in = the middle's veth ring was full or its XDP redirect failed (an AF_XDP socket's ring full: the middle hop too slow); drop out = the generator's veth ring was full or XDP_TX failed on the way back (the return path too slow); drop sink = the sink socket's ring was full; drop mid = the rest (lost inside the middle hop, e.g. its AF_XDP TX ring full; its own counters are in the JSON). " +
			"out = fwd + drop out: what the middle hop sent on; its CPU figures are per frame sent on, so a forwarder faster than the generator's side can absorb is not charged for frames lost after it.",
		"Latency = receive time - transmit time, at half the lossless rate, each frame when it is due (evenly spaced; a generator held up more than " + latencyBacklog.String() + " skips what fell due meanwhile, so sent Mpps may be below the rate). " +
			"The transmit time is written into the payload just before the frame is put on the TX ring and the kernel is kicked (sendto); " +
			"the receive time is taken by the sink's XDP program (bpf_ktime_get_ns, into the frame's metadata) when the frame arrives, not when the generator's loop gets to it: " +
			"that loop also sends, and on a virtual machine a send call that wakes a busy core waits tens of µs (the JSON's generator_stall_ms), which would otherwise count as latency. Both are CLOCK_MONOTONIC. " +
			"The path: the generator's send syscall copies the frame into the generator veth, which wakes the middle's NAPI thread on the middle's core (a cross-CPU wakeup, as a NIC interrupt); the middle hop forwards; " +
			"the generator veth's NAPI runs the sink's XDP program, which stamps the frame and hands it to the sink socket. " +
			"For these runs the sink's NAPI runs in softirq context on the middle's core, right where the middle hop sends (in its NAPI thread, or in its worker's send syscall), instead of a thread on the generator's core. " +
			"That takes a second cross-CPU wakeup off the path, and the generator never sleeps between paced frames, so there is no timer wakeup either; on a virtual machine each costs tens of µs " +
			"(a timer wakeup some 50 µs late, a wakeup across cores 40+ µs), and with the receive time taken by the generator's loop they made (b)'s p50 ~110 µs, with late paced frames leaving in bursts; (b)'s p50 is now ~10-20 µs. " +
			"The sink's own work (its XDP program and one copy) then runs on the middle's core, for every forwarder alike (its CPU per packet barely changes: the wakeup it replaces cost as much); CPU figures come from the throughput runs, not these.",
		"added = a forwarder's percentile minus that of (b) xdpfwd, the least a forwarder can do on this path, measured at the same rate and frame size (floor runs, after the others): " +
			"what the forwarder adds over a minimal XDP_TX hop. Percentiles of two runs are subtracted, not frames, so an added p99 is within the noise of both p99s and may come out negative; the absolute figures are shown too. " +
			"busy floor = (b) again at the same rate, with the middle's core kept busy by a SCHED_IDLE spinner that anything preempts at once: on a virtual machine an interrupt to a busy virtual CPU arrives tens of µs later than to an idle (halted) one, " +
			"and a forwarder whose worker polls between frames (xlb and the reflector spin 50 µs) keeps its core busy, so every frame's wakeup of the middle's NAPI thread pays that, while (b) at half load leaves its core idle. " +
			"A forwarder's latency minus the busy floor is closer to its own processing; on bare metal, where interrupt delivery to a busy core costs ~1 µs, the two floors are close.",
	}
	cpu := "CPU of the middle hop = its veth's NAPI kernel thread (threaded NAPI: XDP programs, copies into AF_XDP sockets, the IP stack and nftables all run there) + the forwarder's user-space threads " +
		"(xlb: every thread of the xlb process; reflector: its worker threads), from /proc/PID/schedstat over the case. busy cores = that CPU time / wall time; " +
		"CPU ns/pkt = CPU time / out; Mpps/core = out / CPU seconds. AF_XDP workers poll (xlb spins 50 µs before sleeping), so below saturation their CPU includes idle polling; at the lossless rate they are close to busy."
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
	if find(rs, "xlb", b.cfg.Sizes[0], "paired") != nil {
		n = append(n, fmt.Sprintf("xlb-ct against xlb (paired search): both variants from one starting rate (the higher of their own searches' results), "+
			"their %v trials interleaved (xlb, xlb-ct, xlb, ...) so that a disturbance of the machine falls on both alike, %d trials per variant and rate step, "+
			"a step passing when most of them do; up %gx after a pass, down after a failure, then bisection to %s %% (%d steps at most). "+
			"The xlb-ct / xlb target uses it: each variant's own search runs minutes apart from the other's, and a shared machine's load changes in between. "+
			"The range is what the brackets allow; the spread between runs is larger on a loaded machine.",
			b.cfg.Trial, pairedTrials, pairedStep, report.G(100*b.cfg.Resolution), b.cfg.pairedSteps()))
	}
	if len(tailTable(rs).Rows) > 0 {
		n = append(n, "xlb's latency tail: over each of xlb's lossless and latency runs, the worker thread's CPU time and run-queue wait "+
			"(/proc/PID/task/TID/schedstat; mean per time it got the CPU), its preemptions and voluntary sleeps (status), of those its poll(2) sleeps after the 50 µs spin (/status idle_sleeps) "+
			"and the rest (the Go scheduler parking its locked thread: preemption, stop-the-world), the socket's rx-ring-full and fill-ring-empty counts (XDP_STATISTICS), "+
			"the Go runtime's collections and their stop-the-world pauses (xlb runs with GODEBUG=gctrace=1), the middle NAPI thread's CPU and run-queue wait, "+
			"the middle core's busy time that was neither theirs nor the host's (steal), from /proc/stat in 10 ms ticks, the CPU of xlb's other threads, "+
			"and the frames that took 1 ms or more. Through the latency runs the worker's and the NAPI thread's schedstat is also sampled every "+sampleEvery.String()+
			" from a thread on the generator's core (a few reads of /proc per sample), and each period set beside the slowest frame sent in it (the when-table). In a full run, half-slice is the latency run again with the worker given the NAPI thread's "+napiSlice.String()+
			" time slice (so that, waking, it preempts a task running out a longer one), then its own back.")
	}
	n = append(n, cpu,
		fmt.Sprintf("Priorities: every thread measured or measuring (generator, NAPI threads, xlb, the reflector's worker) runs at nice %d, so that other load on the machine disturbs less; "+
			"in the throughput runs the sink's NAPI thread is SCHED_FIFO (lowest priority), as an interrupt would be, so that frames coming back are not lost to the generator's own loop, which spins when paced; "+
			"the middle's NAPI thread stays SCHED_OTHER but with a %v time slice, so that it preempts a polling worker when frames arrive (as an interrupt would) and still shares the core fairly at overload. "+
			"The veth rings hold 256 frames: a middle hop that is off its core for a few ms at any load loses frames (drop in).", benchNice, napiSlice),
		"veth specifics: there is no zero-copy AF_XDP on veth, so xlb and the reflector copy every frame in and out (copy mode); and an XDP program on the receiving veth first copies each frame that was sent from a socket or the stack into a page with XDP headroom, "+
			"which the XDP-based middles (xlb, reflector, xdpfwd) pay and nftables (no XDP program) does not. On a NIC with zero-copy both copies go away.")
	return n
}

// spacing says how the search's paced frames are sent.
func spacing(w time.Duration) string {
	if w <= 0 {
		return "each frame when it is due, evenly spaced"
	}
	return fmt.Sprintf("what is due once per %v, one send call a train, as a NIC's receive interrupt coalescing of that window would deliver frames: "+
		"one send call per frame at a few hundred thousand a second takes the generator's whole core on a virtual machine, so evenly spaced frames (--coalesce 0) cannot be offered there at those rates", w)
}

package core

import (
	"fmt"
	"runtime"
	"strconv"
	"strings"

	"xlb/bench/flows"
	"xlb/bench/report"
)

// Our targets (docs/performance-targets.md).
const (
	targetEngineNs = 60 // ns per established packet at 1M live flows
	targetLookupNs = 50 // ns per conntrack hit on a 1M table
	// Ratios to one Go map hit with the same keys in the same run, at 1M.
	targetLookupRatio = 0.5  // conntrack hit
	targetEngineRatio = 0.35 // engine per established-v4 packet
	// The in-cache engine cost (1k flows) against a saved run of the same
	// machine: down by a third.
	targetInCacheRatio = 2.0 / 3
	// Flow sync on against off: at most 5 % more per packet.
	targetFlowSyncPct = 5
)

func ff(v float64, prec int) string { return strconv.FormatFloat(v, 'f', prec, 64) }

// allocs formats allocations per packet: "0" when there were none at all,
// so that a rounding never hides one.
func allocs(c Case) string {
	if c.Allocs == 0 {
		return "0"
	}
	return fmt.Sprintf("%.2g (%d)", c.AllocsPerPkt, c.Allocs)
}

// cpuOrWall is the figure the targets use: thread CPU time where the
// platform reports it, wall time otherwise.
func cpuOrWall(c Case) float64 {
	if c.CPUNsPerPkt > 0 {
		return c.CPUNsPerPkt
	}
	return c.NsPerPkt
}

// find returns a case measured without flow sync; findSync one with.
func (res *Result) find(engine bool, mix string, fl, workers, size, frame int) (Case, bool) {
	return res.findCase(false, engine, mix, fl, workers, size, frame)
}

func (res *Result) findSync(mix string, fl, frame int) (Case, bool) {
	return res.findCase(true, true, mix, fl, 1, smallFrame, frame)
}

func (res *Result) findCase(sync, engine bool, mix string, fl, workers, size, frame int) (Case, bool) {
	for _, c := range res.Cases {
		if c.FlowSync == sync && c.Engine == engine && c.Mix == mix && c.Flows == fl && c.Workers == workers && c.FrameSize == size && c.Replay == frame {
			return c, true
		}
	}
	return Case{}, false
}

// flowSyncPairs are the headline cases measured with flow sync off and on.
func (res *Result) flowSyncPairs() (mixes []string, off, on []Case) {
	h := res.Headline
	for _, m := range []flows.Mix{flows.EstablishedV4, flows.Realistic, flows.AllSYN} {
		a, ok1 := res.find(true, m.Name, h, 1, smallFrame, replayFor(h, res.Replay))
		b, ok2 := res.findSync(m.Name, h, replayFor(h, res.Replay))
		if ok1 && ok2 {
			mixes, off, on = append(mixes, m.Name), append(off, a), append(on, b)
		}
	}
	return mixes, off, on
}

// pctMore is how much more b costs than a, in percent of a.
func pctMore(a, b Case) float64 { return 100 * (cpuOrWall(b)/cpuOrWall(a) - 1) }

// Report lays the result out as tables, charts, targets and notes.
func (res *Result) Report() report.Report {
	r := report.Report{Data: res}
	h := res.Headline
	mixes := flows.Mixes()

	// Sweep over live flows.
	sweep := report.Table{
		Title:   "Engine against live flows (1 worker, 64-byte frames; table capacity ~2x flows)",
		Columns: []string{"mix", "live flows", "capacity", "replayed", "Mpps", "ns/pkt", "CPU ns/pkt", "allocs/pkt", "new conn %"},
	}
	flowsChart := report.Chart{File: "core-flows", Title: "Engine cost against live flows (1 worker, 64-byte frames)",
		Kind: "line", XLabel: "live flows", YLabel: "CPU ns per packet", LogX: true}
	for _, m := range mixes {
		s := report.Series{Name: m.Name}
		for _, f := range res.Flows {
			c, ok := res.find(true, m.Name, f, 1, smallFrame, replayFor(f, res.Replay))
			if !ok {
				continue
			}
			sweep.Rows = append(sweep.Rows, []string{m.Name, count(f), count(c.Capacity), count(c.Replay),
				ff(c.Mpps, 2), ff(c.NsPerPkt, 1), ff(c.CPUNsPerPkt, 1), allocs(c), ff(c.NewPct, 2)})
			s.X, s.Y = append(s.X, float64(f)), append(s.Y, cpuOrWall(c))
		}
		flowsChart.Series = append(flowsChart.Series, s)
	}

	// Workers.
	scale := report.Table{
		Title:   fmt.Sprintf("Workers sharing one conntrack (%s live flows, 64-byte frames, each worker its own ring and flows)", count(h)),
		Columns: []string{"mix", "workers", "Mpps", "Mpps/core", "ns/pkt", "CPU ns/pkt", "allocs/pkt", "x 1 worker"},
	}
	workersChart := report.Chart{File: "core-workers", Title: fmt.Sprintf("Throughput against workers (%s live flows, shared conntrack, %d cores)", count(h), runtime.NumCPU()),
		Kind: "line", XLabel: "workers", YLabel: "Mpps (all workers)"}
	var linear *report.Series
	for _, m := range []flows.Mix{flows.EstablishedV4, flows.Realistic} {
		s := report.Series{Name: m.Name}
		var one float64
		for _, w := range workerCounts(res.Workers) {
			c, ok := res.find(true, m.Name, h, w, smallFrame, replayFor(h, res.Replay))
			if !ok {
				continue
			}
			if w == 1 {
				one = c.Mpps
			}
			x := ""
			if one > 0 {
				x = ff(c.Mpps/one, 2)
			}
			scale.Rows = append(scale.Rows, []string{m.Name, strconv.Itoa(c.Workers), ff(c.Mpps, 2), ff(c.MppsPerCore, 2),
				ff(c.NsPerPkt, 1), ff(c.CPUNsPerPkt, 1), allocs(c), x})
			s.X, s.Y = append(s.X, float64(c.Workers)), append(s.Y, c.Mpps)
		}
		workersChart.Series = append(workersChart.Series, s)
		if m == flows.EstablishedV4 && one > 0 && len(s.X) > 1 {
			linear = &report.Series{Name: "linear from 1 worker (" + m.Name + ")"}
			for _, x := range s.X {
				linear.X, linear.Y = append(linear.X, x), append(linear.Y, one*x)
			}
		}
	}
	if linear != nil {
		workersChart.Series = append(workersChart.Series, *linear)
	}

	// Frame sizes, with the rings alone as the baseline.
	rs := min(replayFor(h, res.Replay), res.SizeReplay)
	sizes := report.Table{
		Title:   fmt.Sprintf("Frame size (%s live flows, 1 worker, %s flows replayed); ring only = the ring's copy of each frame, no engine; 'less ring copy' is the engine's own CPU ns/pkt", count(h), count(rs)),
		Columns: []string{"case", "frame bytes", "Mpps", "ns/pkt", "CPU ns/pkt", "less ring copy", "Gbit/s", "allocs/pkt"},
	}
	sizeRow := func(name string, c Case) {
		less := ""
		if ring, ok := res.find(false, flows.EstablishedV4.Name, h, 1, c.FrameSize, rs); ok && c.Engine {
			less = ff(c.CPUNsPerPkt-ring.CPUNsPerPkt, 1)
		}
		sizes.Rows = append(sizes.Rows, []string{name, ff(c.FrameBytes, 0), ff(c.Mpps, 2), ff(c.NsPerPkt, 1), ff(c.CPUNsPerPkt, 1),
			less, ff(c.Mpps*c.FrameBytes*8/1000, 1), allocs(c)})
	}
	for _, size := range []int{smallFrame, largeFrame} {
		if c, ok := res.find(false, flows.EstablishedV4.Name, h, 1, size, rs); ok {
			sizeRow("ring only", c)
		}
	}
	for _, m := range mixes {
		for _, size := range []int{smallFrame, largeFrame} {
			if c, ok := res.find(true, m.Name, h, 1, size, rs); ok {
				sizeRow(m.Name, c)
			}
		}
	}

	lookups := report.Table{Title: "conntrack Lookup, called directly (hits; table at ~50% load)",
		Columns: []string{"case", "entries", "present", "capacity", "keys", "ns/lookup", "CPU ns/lookup", "allocs"}}
	for _, l := range res.Lookups {
		lookups.Rows = append(lookups.Rows, []string{l.Name, count(l.Entries), strconv.Itoa(l.Present), count(l.Capacity), strconv.Itoa(l.Keys),
			ff(l.NsPer, 1), ff(l.CPUNsPer, 1), strconv.FormatUint(l.Allocs, 10)})
	}

	compare := report.Table{Title: "Go map baseline: map[conntrack.Key]{16-byte payload} against conntrack and the engine, same keys, " +
		"same run, interleaved rounds (thread CPU ns, medians)",
		Columns: []string{"live flows", "keys", "rounds", "Go map ns/lookup", "conntrack ns/hit, one at a time", "x Go map",
			"conntrack ns/hit, batches of 64", "x Go map", "home lines alone ns/key", "engine ns/pkt (established-v4)", "x Go map", "allocs"}}
	for _, c := range res.Compares {
		compare.Rows = append(compare.Rows, []string{count(c.Flows), strconv.Itoa(c.Keys), strconv.Itoa(c.Rounds),
			ff(c.GoMapNs, 1), ff(c.ConntrackNs, 1), ff(c.ConntrackRatio(), 2), ff(c.ConntrackBatchNs, 1), ff(c.ConntrackBatchRatio(), 2),
			ff(c.LineNs, 1), ff(c.EngineNs, 1), ff(c.EngineRatio(), 2), strconv.FormatUint(c.Allocs, 10)})
	}

	prefills := report.Table{Title: "Tables of live flows (one SYN each through the engine, workers in parallel)",
		Columns: []string{"live flows", "capacity", "entries", "evicted (X3)", "workers", "seconds", "SYN Mpps"}}
	for _, p := range res.Prefills {
		prefills.Rows = append(prefills.Rows, []string{count(p.Flows), count(p.Capacity), strconv.Itoa(p.Entries),
			strconv.FormatUint(p.Evictions, 10), strconv.Itoa(p.Workers), ff(p.Seconds, 2), ff(float64(p.Flows)/p.Seconds/1e6, 2)})
	}

	r.Tables = append(r.Tables, sweep, scale, sizes)
	if len(res.QUIC) > 0 {
		r.Tables = append(r.Tables, res.quicTable())
	}
	if mixes, off, on := res.flowSyncPairs(); len(mixes) > 0 {
		t := report.Table{
			Title: fmt.Sprintf("Flow sync off and on (%s live flows, 1 worker, 64-byte frames; on: a ring per decider, "+
				"drained by a goroutine; records and drops in the window)", count(h)),
			Columns: []string{"mix", "CPU ns/pkt off", "CPU ns/pkt on", "change %", "records", "drops", "allocs/pkt on"},
		}
		for i, m := range mixes {
			t.Rows = append(t.Rows, []string{m, ff(cpuOrWall(off[i]), 1), ff(cpuOrWall(on[i]), 1), ff(pctMore(off[i], on[i]), 1),
				strconv.FormatUint(on[i].SyncRecords, 10), strconv.FormatUint(on[i].SyncDrops, 10), allocs(on[i])})
		}
		r.Tables = append(r.Tables, t)
	}
	if len(res.Lookups) > 0 {
		r.Tables = append(r.Tables, lookups)
	}
	if len(res.Compares) > 0 {
		r.Tables = append(r.Tables, compare)
	}
	r.Tables = append(r.Tables, prefills)
	if p := res.Profile; p != nil && len(p.Top) > 0 {
		t := report.Table{Title: "Where the time goes: " + p.Case + fmt.Sprintf(" (CPU profile, %.0f s)", p.Seconds),
			Columns: []string{"function", "flat %", "cum %"}}
		for _, l := range p.Top {
			t.Rows = append(t.Rows, []string{l.Function, ff(l.FlatPct, 1), ff(l.CumPct, 1)})
		}
		r.Tables = append(r.Tables, t)
	}
	for _, ch := range []report.Chart{workersChart, flowsChart} {
		if len(ch.Series) > 0 && len(ch.Series[0].X) > 0 {
			r.Charts = append(r.Charts, ch)
		}
	}
	r.Targets = res.targets()
	r.Notes = res.notes()
	return r
}

// targets compares the headline figures with our targets.
func (res *Result) targets() []report.Target {
	h := res.Headline
	at := count(h) + " live flows"
	if h != 1_000_000 {
		at += " (the target is at 1M: a full run)"
	}
	var ts []report.Target
	for _, m := range []flows.Mix{flows.EstablishedV4, flows.EstablishedV6} {
		if c, ok := res.find(true, m.Name, h, 1, smallFrame, replayFor(h, res.Replay)); ok {
			v := cpuOrWall(c)
			ts = append(ts, report.Target{Name: fmt.Sprintf("engine ns/pkt (thread CPU), %s, %s, 1 worker", m.Name, at),
				Want: fmt.Sprintf("<= %d", targetEngineNs), Measured: v, Unit: "ns", Met: v <= targetEngineNs})
		}
	}
	var n, pkts uint64
	cases := 0
	for _, c := range append(res.Cases[:len(res.Cases):len(res.Cases)], res.QUIC...) {
		if c.Engine {
			n, pkts, cases = n+c.Allocs, pkts+c.Packets, cases+1
		}
	}
	if pkts > 0 {
		ts = append(ts, report.Target{Name: fmt.Sprintf("engine allocations per packet, all %d engine cases", cases),
			Want: "0", Measured: float64(n) / float64(pkts), Unit: "allocs/pkt", Met: n == 0})
	}
	mixes, off, on := res.flowSyncPairs()
	for i, m := range mixes {
		v := pctMore(off[i], on[i])
		ts = append(ts, report.Target{Name: fmt.Sprintf("flow sync on against off, CPU ns/pkt, %s, %s, 1 worker", m, at),
			Want: fmt.Sprintf("<= +%d %%", targetFlowSyncPct), Measured: v, Unit: "%", Met: v <= targetFlowSyncPct})
	}
	if c, ok := res.compareHeadline(); ok {
		at := count(c.Flows) + " live flows"
		if c.Flows != 1_000_000 {
			at += " (the target is at 1M: a full run)"
		}
		r := c.ConntrackRatio()
		ts = append(ts, report.Target{Name: fmt.Sprintf("conntrack hit, one lookup at a time / one Go map hit (same keys, same run), %s", at),
			Want: fmt.Sprintf("<= %.2g x", targetLookupRatio), Measured: r, Unit: "x", Met: r <= targetLookupRatio})
		r = c.ConntrackBatchRatio()
		ts = append(ts, report.Target{Name: fmt.Sprintf("conntrack hit, batches of 64 as the engine looks up / one Go map hit (same keys, same run), %s", at),
			Want: fmt.Sprintf("<= %.2g x", targetLookupRatio), Measured: r, Unit: "x", Met: r <= targetLookupRatio})
		r = c.EngineRatio()
		ts = append(ts, report.Target{Name: fmt.Sprintf("engine per established-v4 packet / one Go map hit (same run), %s", at),
			Want: fmt.Sprintf("<= %.2g x", targetEngineRatio), Measured: r, Unit: "x", Met: r <= targetEngineRatio})
		var n uint64
		for _, c := range res.Compares {
			n += c.Allocs
		}
		ts = append(ts, report.Target{Name: "allocations in the Go map comparison (Go map, conntrack, lines, engine; every round)",
			Want: "0", Measured: float64(n), Unit: "allocs", Met: n == 0})
	}
	if b := res.InCacheBaseline; b != nil {
		if v, ok := res.InCacheNs(); ok {
			name := fmt.Sprintf("in-cache engine ns/pkt (thread CPU), established-v4, 1k live flows, against %s (%.1f ns)", b.File, b.EngineNs)
			if !b.SameMachine {
				name += "; its machine differs (" + b.Machine + "): not comparable"
			}
			want := targetInCacheRatio * b.EngineNs
			ts = append(ts, report.Target{Name: name, Want: fmt.Sprintf("<= %.1f (2/3 of it)", want), Measured: v, Unit: "ns",
				Met: v <= want && b.SameMachine})
		}
	}
	if len(res.Lookups) > 0 {
		l := res.Lookups[0]
		v := l.CPUNsPer
		if v == 0 {
			v = l.NsPer
		}
		name := fmt.Sprintf("conntrack Lookup hit (thread CPU), %s-entry table, every key", count(l.Entries))
		if l.Entries != 1_000_000 {
			name += " (the target is at 1M: a full run)"
		}
		ts = append(ts, report.Target{Name: name,
			Want: fmt.Sprintf("<= %d", targetLookupNs), Measured: v, Unit: "ns", Met: v <= targetLookupNs})
	}
	return ts
}

// compareHeadline is the comparison the ratio targets use: the largest
// size up to 1M.
func (res *Result) compareHeadline() (Compare, bool) {
	var fl []int
	for _, c := range res.Compares {
		fl = append(fl, c.Flows)
	}
	h := headline(fl)
	for _, c := range res.Compares {
		if c.Flows == h {
			return c, true
		}
	}
	return Compare{}, false
}

func (res *Result) notes() []string {
	cores := runtime.NumCPU()
	notes := []string{
		fmt.Sprintf("Multi-worker scaling is bounded by the cores: this machine has %d. Workers share them with each other, "+
			"the Go runtime and the OS (on a shared VM, with other tenants too); past the core count they time-share and "+
			"Mpps/core falls. On a 2-core VM, 2 workers is the ceiling and even that shares the cores with everything else. "+
			"Production pins one worker per dedicated core, with its NIC queue's IRQ.", cores),
		"ns/pkt is wall time per packet and worker (1000 / Mpps per core); CPU ns/pkt is the worker threads' own CPU time " +
			"(getrusage RUSAGE_THREAD), which time slices given to other processes do not inflate; the targets use it.",
		"Each worker polls its own dataplane.MemFramePort, which copies every frame into a buffer with headroom as a NIC writes " +
			"into umem: that copy is in every figure ('ring only' is the copy alone). Frames are built before the clock starts " +
			"(bench/flows); the engine's clock is read once per batch of 64.",
		fmt.Sprintf("Replay: a case replays up to %s distinct flows (half the live flows, those of one family), sampled at random "+
			"from the table's live flows and sent in random order; at 1M live flows the table lines touched exceed the last-level cache, "+
			"so lookups pay the misses they pay in production (a quick run replays fewer: its figures are a smoke test). "+
			"Workers get disjoint flows, as RSS gives them.", count(res.Replay)),
		"Mixes: established-v4/-v6 are ACKs of live TCP flows; realistic is 10% SYNs of new connections, 10% UDP (untracked), " +
			"80% established, a quarter IPv6; syn is 100% SYNs of new flows; udp-untracked is UDP to a service with session affinity " +
			"NONE (T1: no conntrack access). SYNs: the warm-up pass inserts their keys, the measured passes find them and, as CT1 " +
			"wants for any SYN, select by Maglev and rewrite the entry in place.",
		"new conn % of the established mixes: ACKs whose entry an over-full bucket evicted during the prefill (X3), re-created.",
		"Allocations: runtime.MemStats.Mallocs of the whole process across the measured window, while only the workers run.",
		"Go map baseline: absolute ns differ by 1.5x between our VMs, so the ratio targets compare with Go's built-in map " +
			"(map[conntrack.Key] of a 16-byte payload, as a conntrack slot's beside its key) in the same run: the map and a " +
			"conntrack table of twice the flows hold the same keys (IPv4 5-tuples of the live flows), both are looked up on the " +
			"keys the table kept in one random order, one lookup per key, results consumed; conntrack also in batches of 64 " +
			"consecutive keys of that order as the engine looks up (hints, home lines, lines their homes reach, lookups), and " +
			"'home lines alone' is the memory of that batch without the work: one load of each key's home line, hashed beforehand " +
			"(the floor of a lookup that reads one line, set by DRAM latency and how many misses the core keeps in flight); the engine row is the established-v4 " +
			"case on the prefilled table (1 worker, 64-byte frames, its replayed flows). Each round measures the three one after " +
			"the other; the figures are the medians of the rounds.",
		"64-byte IPv6 TCP frames are 74 bytes (headers alone); 'frame bytes' is the mean replayed.",
		"1500-byte frames: the ring's copy is most of the difference ('ring only'); the rewrite touches the headers only, so what " +
			"remains is most likely the frames streaming through the caches (tens of MB per pass) and evicting table lines.",
	}
	if mixes, _, _ := res.flowSyncPairs(); len(mixes) > 0 {
		notes = append(notes, "Flow sync (--flowsync): a record is pushed when an entry becomes established and this instance's "+
			"(a half-open entry confirmed, a peer's entry claimed, an entry replaced by a packet that is not a SYN). In these mixes "+
			"that is the established ACKs' first pass, in the warm-up: the window measures the branch and the per-batch publish, "+
			"not a push per packet; the cost of a push per new connection is `go test -bench FlowSync/handshake ./dataplane/`.")
	}
	switch p := res.Profile; {
	case p == nil:
		notes = append(notes, "No CPU profile in this run: `lbbench core --cpuprofile FILE` takes one of established-v4 at the headline "+
			"table (then `go tool pprof -top FILE`).")
	case len(p.Top) > 0:
		var parts []string
		for _, l := range p.Top[:min(8, len(p.Top))] {
			parts = append(parts, fmt.Sprintf("%s %.1f%%", l.Function, l.FlatPct))
		}
		s := fmt.Sprintf("Where the time goes (%s, %.0f s CPU profile, flat): %s.", p.Case, p.Seconds, strings.Join(parts, ", "))
		if p.File != "" {
			s += " Profile kept in " + p.File + "."
		}
		notes = append(notes, s)
	default:
		s := "CPU profile of " + p.Case + ": " + p.Error
		if p.File != "" {
			s += " (profile in " + p.File + ")"
		}
		notes = append(notes, s)
	}
	return notes
}

// quicTable is the QUIC-LB cases against plain UDP of the same run.
func (res *Result) quicTable() report.Table {
	t := report.Table{
		Title: fmt.Sprintf("QUIC-LB: short-header packets routed by the server ID in their connection ID, against plain UDP "+
			"(1 worker, %s client tuples, 64-byte UDP payloads, same run)", count(quicTuples)),
		Columns: []string{"case", "Mpps", "ns/pkt", "CPU ns/pkt", "CPU ns more than plain UDP", "routed by CID", "allocs/pkt"},
	}
	var plain float64
	for i, c := range res.QUIC {
		v := cpuOrWall(c)
		if i == 0 {
			plain = v
		}
		t.Rows = append(t.Rows, []string{strings.TrimPrefix(c.Mix, "quic-"), ff(c.Mpps, 2), ff(c.NsPerPkt, 1), ff(c.CPUNsPerPkt, 1),
			ff(v-plain, 1), strconv.FormatUint(c.CIDRouted, 10), allocs(c)})
	}
	return t
}

// AllocFree says that a measured window's allocations, if any, are too
// few to be the engine's: fewer than one per 1000 packets, where one per
// batch would be one per 64. On a loaded machine the runtime allocates
// now and then for itself in a window (an OS thread for a P when a locked
// worker is preempted); the hot path's exact zero is proven by the
// dataplane package's AllocsPerRun tests, which nothing else disturbs.
func AllocFree(allocs, packets uint64) bool { return allocs == 0 || allocs*1000 < packets }

// AllocTargetMet says an allocation target was met, or missed by no more
// than AllocFree allows: per packet below one in 1000; a count over the
// comparison's rounds (a few rounds) at most five, where an allocation per
// lookup would be thousands.
func AllocTargetMet(tg *report.Target) bool {
	switch {
	case tg.Met:
		return true
	case tg.Unit == "allocs/pkt":
		return tg.Measured < 1e-3
	default:
		return tg.Measured <= 5
	}
}

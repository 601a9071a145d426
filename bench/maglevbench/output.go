package maglevbench

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"xlb/bench/report"
)

// Our targets (docs/performance-targets.md).
const (
	targetWeightedRelError = 0.01 // weighted shares within 1 % of ideal, M ≥ 100·N
	targetRemovalRatio     = 1.5  // entries changed on one removal ≤ 1.5 × the minimum
	targetLookupNs         = 10.0 // one lookup
)

// Report turns r into lbbench's report: tables, charts, targets and notes,
// with r itself as Data.
func (r *Result) Report() report.Report {
	rep := report.Report{Data: r}
	rep.Tables = []report.Table{r.buildTable(), r.balanceTable(), r.weightedTable(), r.disruptionTable(), r.lookupTable()}
	rep.Charts = r.charts()
	rep.Targets = r.Targets()
	rep.Notes = r.notes()
	return rep
}

func (r *Result) buildTable() report.Table {
	reps := 0
	for _, b := range r.Builds {
		reps = max(reps, b.Reps)
	}
	t := report.Table{
		Title:   fmt.Sprintf("Build time: median of %d builds on one core, Builder reused", reps),
		Columns: []string{"M", "N", "median ms", "min ms", "max ms", "ns/entry", "allocs/build", "first build allocs", "first build KiB"},
	}
	for _, b := range r.Builds {
		if b.Refused != "" {
			t.Rows = append(t.Rows, []string{u(b.M), strconv.Itoa(b.N), "refused", "-", "-", "-", "-", "-", "-"})
			continue
		}
		t.Rows = append(t.Rows, []string{u(b.M), strconv.Itoa(b.N),
			f(b.MedianNs/1e6, 3), f(b.MinNs/1e6, 3), f(b.MaxNs/1e6, 3), f(b.NsPerEntry(), 1),
			strconv.FormatUint(b.AllocsPerBuild, 10), strconv.FormatUint(b.FirstAllocs, 10),
			f(float64(b.FirstBytes)/1024, 1)})
	}
	return t
}

func (r *Result) balanceTable() report.Table {
	t := report.Table{
		Title:   "Unweighted balance: entries per backend",
		Columns: []string{"M", "N", "ideal M/N", "bounds", "min", "max", "min/ideal", "max/ideal", "within bounds"},
	}
	for _, b := range r.Balance {
		t.Rows = append(t.Rows, []string{strconv.Itoa(b.M), strconv.Itoa(b.N), f(b.Ideal, 2),
			fmt.Sprintf("%d..%d", b.Floor, b.Ceil), strconv.Itoa(b.Min), strconv.Itoa(b.Max),
			f(b.MinOverIdeal, 4), f(b.MaxOverIdeal, 4), yes(b.Excess == 0)})
	}
	return t
}

func (r *Result) weightedTable() report.Table {
	t := report.Table{
		Title: "Weighted shares against weight / sum of weights",
		Columns: []string{"M", "weights", "lightest ideal entries", "max error entries",
			"max error % of ideal", "max error pp of table", "weight-0 entries", "M >= 100N"},
	}
	for _, w := range r.Weighted {
		t.Rows = append(t.Rows, []string{strconv.Itoa(w.M), w.Set, f(w.MinIdealEntries, 1),
			f(w.MaxAbsEntries, 2), f(100*w.MaxRelError, 3), f(100*w.MaxAbsShare, 4),
			strconv.Itoa(w.ZeroWeightEntries), yes(w.Dense)})
	}
	return t
}

func (r *Result) disruptionTable() report.Table {
	trials := 0
	for _, d := range r.Disruption {
		trials = max(trials, d.Trials)
	}
	t := report.Table{
		Title: fmt.Sprintf("Disruption: entries that changed owner, mean over up to %d choices of the backend", trials),
		Columns: []string{"M", "N", "change", "minimum %", "changed %", "changed/min mean", "changed/min max",
			"others moved % mean", "others moved % max"},
	}
	for _, d := range r.Disruption {
		if d.Trials == 0 {
			t.Rows = append(t.Rows, []string{strconv.Itoa(d.M), strconv.Itoa(d.N), d.Change, "-", "-", "-", "-", "-", "-"})
			continue
		}
		t.Rows = append(t.Rows, []string{strconv.Itoa(d.M), strconv.Itoa(d.N), d.Change,
			f(100*d.MinimumMean, 3), f(100*d.ChangedMean, 3), f(d.RatioMean, 2) + "x", f(d.RatioMax, 2) + "x",
			f(100*d.OthersMean, 3), f(100*d.OthersMax, 3)})
	}
	return t
}

func (r *Result) lookupTable() report.Table {
	t := report.Table{
		Title:   fmt.Sprintf("Lookup: random hashes, M=%d", LookupSize),
		Columns: []string{"case", "hashes", "memory KiB", "ns/lookup"},
	}
	for _, l := range r.Lookup {
		t.Rows = append(t.Rows, []string{l.Case, hashes(l.Dependent),
			strconv.Itoa(l.Tables * l.Entries * 2 >> 10), f(l.Ns, 2)})
	}
	return t
}

func hashes(dependent bool) string {
	if dependent {
		return "chained (latency)"
	}
	return "independent (throughput)"
}

func (r *Result) charts() []report.Chart {
	imb := report.Chart{File: "maglev-imbalance", Title: "Unweighted: entries of the fullest and emptiest backend over M/N",
		Kind: "line", XLabel: "backends N", YLabel: "entries / ideal", LogX: true}
	build := report.Chart{File: "maglev-build", Title: "Table build time (median, one core)",
		Kind: "line", XLabel: "backends N", YLabel: "ms", LogX: true}
	perEntry := report.Chart{File: "maglev-build-per-entry", Title: "Table build time per entry",
		Kind: "line", XLabel: "backends N", YLabel: "ns / entry", LogX: true}
	dis := report.Chart{File: "maglev-disruption", Title: "Entries changed on one removal over the minimum (mean)",
		Kind: "line", XLabel: "backends N", YLabel: "changed / minimum", LogX: true}
	for _, m := range r.Sizes {
		name := "M=" + u(m)
		hi, lo := report.Series{Name: name + " max"}, report.Series{Name: name + " min"}
		for _, b := range r.Balance {
			if b.M == int(m) {
				hi.X, hi.Y = append(hi.X, float64(b.N)), append(hi.Y, b.MaxOverIdeal)
				lo.X, lo.Y = append(lo.X, float64(b.N)), append(lo.Y, b.MinOverIdeal)
			}
		}
		ms, ne := report.Series{Name: name}, report.Series{Name: name}
		for _, b := range r.Builds {
			if b.M == m && b.Refused == "" {
				ms.X, ms.Y = append(ms.X, float64(b.N)), append(ms.Y, b.MedianNs/1e6)
				ne.X, ne.Y = append(ne.X, float64(b.N)), append(ne.Y, b.NsPerEntry())
			}
		}
		ds := report.Series{Name: name}
		for _, d := range r.Disruption {
			if d.M == int(m) && d.Change == ChangeRemove {
				ds.X, ds.Y = append(ds.X, float64(d.N)), append(ds.Y, d.RatioMean)
			}
		}
		imb.Series = append(imb.Series, hi, lo)
		build.Series = append(build.Series, ms)
		perEntry.Series = append(perEntry.Series, ne)
		dis.Series = append(dis.Series, ds)
	}
	return []report.Chart{imb, build, perEntry, dis}
}

// Targets compares r with our targets (docs/performance-targets.md).
func (r *Result) Targets() []report.Target {
	var ts []report.Target

	// The Maglev paper reports 1.8 ms for N=1000, M=65537.
	for _, b := range r.Builds {
		if b.M == 65537 && b.N == 1000 && b.Refused == "" {
			ts = append(ts, report.Target{Name: "build N=1000, M=65537, one core (median)",
				Want: "<= 2", Measured: b.MedianNs / 1e6, Unit: "ms", Met: b.MedianNs <= 2e6})
		}
	}

	excess := 0
	for _, b := range r.Balance {
		excess = max(excess, b.Excess)
	}
	ts = append(ts, report.Target{Name: "unweighted: every backend within floor(M/N)..ceil(M/N) entries",
		Want: "0", Measured: float64(excess), Unit: "entries outside (worst)", Met: excess == 0})

	var rel float64
	for _, w := range r.Weighted {
		if w.Dense {
			rel = max(rel, w.MaxRelError)
		}
	}
	ts = append(ts, report.Target{Name: "weighted: shares within 1 % of ideal at M >= 100*N",
		Want: "<= 1", Measured: 100 * rel, Unit: "% (worst)", Met: rel <= targetWeightedRelError})

	var s2 float64
	s2ok := true
	for _, w := range r.Weighted {
		if w.Set == "1:4" || w.Set == "0:2:6" {
			s2 = max(s2, w.MaxAbsEntries)
			s2ok = s2ok && w.ZeroWeightEntries == 0
		}
	}
	ts = append(ts, report.Target{Name: "S2 examples 1:4 and 0:2:6 within one entry, weight 0 none",
		Want: "<= 1", Measured: s2, Unit: "entries (worst)", Met: s2ok && s2 <= 1})

	var ratio float64
	for _, d := range r.Disruption {
		if d.Change == ChangeRemove {
			ratio = max(ratio, d.RatioMean)
		}
	}
	ts = append(ts, report.Target{Name: "disruption on one removal within 1.5x the minimum",
		Want: "<= 1.5", Measured: ratio, Unit: "x (worst mean)", Met: ratio <= targetRemovalRatio})

	// Both ways of counting a lookup: overlapped with the next one (as
	// consecutive packets' lookups are), and waiting for the one before.
	for _, l := range r.Lookup {
		if !l.Baseline && l.Tables == 1 {
			ts = append(ts, report.Target{Name: "maglev lookup, table in cache, " + hashes(l.Dependent) + " hashes",
				Want: "<= 10", Measured: l.Ns, Unit: "ns", Met: l.Ns <= targetLookupNs})
		}
	}
	return ts
}

func (r *Result) notes() []string {
	var ns []string
	ns = append(ns, fmt.Sprintf("Table sizes %v are primes, as maglev.NewBuilder requires (prime >= 7); "+
		"Build also refuses more than M/2 backends, so pairs with N > M/2 are not measured.", r.Sizes))
	cpu := "could not be pinned to one CPU (locked to one OS thread only)"
	if r.CPU >= 0 {
		cpu = fmt.Sprintf("was pinned to CPU %d", r.CPU)
	}
	ns = append(ns, "The measuring thread "+cpu+"; build times are medians, other processes still share the core.")

	// Where build time goes, from the figures themselves.
	lo, hi := math.Inf(1), 0.0
	var loB, hiB BuildResult
	for _, b := range r.Builds {
		if b.Refused != "" {
			continue
		}
		if e := b.NsPerEntry(); e < lo {
			lo, loB = e, b
		}
		if e := b.NsPerEntry(); e > hi {
			hi, hiB = e, b
		}
	}
	if hi > 0 {
		ns = append(ns, fmt.Sprintf("Build cost is per table entry: %.1f ns/entry (M=%d, N=%d) to %.1f ns/entry (M=%d, N=%d). "+
			"A build sorts and hashes the N keys once (O(N log N)), then fills the M entries; each fill walks the backend's "+
			"permutation past taken entries, and the last free entries take many probes, so the fill is O(M log M) random "+
			"accesses to the table: cheap while the table stays in cache (M=65537: 128 KiB), dearer beyond it (M=655373: 1.25 MiB). "+
			"A CPU profile of the builds (lbbench maglev --cpuprofile FILE; go tool pprof -top) puts nearly all the time "+
			"in maglev.populate and its step, the probe loop (one full run on a 2-core EPYC VM: 95 %% of Build; "+
			"sorting the keys 2 %%, hashing them under 1 %%).",
			lo, loB.M, loB.N, hi, hiB.M, hiB.N))
	}
	var meet []string
	for _, d := range r.Disruption {
		if d.Change == ChangeRemove && d.RatioMean <= targetRemovalRatio {
			meet = append(meet, fmt.Sprintf("M=%d N=%d", d.M, d.N))
		}
	}
	ns = append(ns, fmt.Sprintf("One removal stays within %.1fx the minimum only at: %s. Maglev moves some of the other "+
		"backends' entries on every change (others moved %%); that fraction shrinks slowly as M grows, while the minimum "+
		"(1/N of the table) shrinks with N, so the ratio grows with N at any practical M.", targetRemovalRatio, orNone(meet)))
	ns = append(ns, "Disruption: minimum = the removed backend's entries, the added backend's entries, or the change in the "+
		"re-weighted backend's entries; changed = entries whose owner differs; others moved = entries owned by neither "+
		"the affected backend before nor after that changed owner anyway, over the entries the others held. "+
		"Re-weighting 1->2 in an all-1 set raises the largest weight, which changes the rhythm in which every backend "+
		"claims entries; w->w+1 below the largest does not.")
	var hot, base float64
	for _, l := range r.Lookup {
		if l.Tables == 1 && !l.Dependent {
			if l.Baseline {
				base = l.Ns
			} else {
				hot = l.Ns
			}
		}
	}
	if hot > 0 && base > 0 {
		ns = append(ns, fmt.Sprintf("Lookup is table[h mod M]: a 64-bit division and one load. Independent lookups cost %.2f ns "+
			"against %.2f ns for the same load indexed by the hash's top bits (no division): the difference is the division.",
			hot, base))
	}
	if r.Quick {
		ns = append(ns, "--quick: fewer sizes, backend counts, builds and trials; no out-of-cache lookup.")
	}
	return ns
}

func orNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}

func f(v float64, prec int) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "-"
	}
	return strconv.FormatFloat(v, 'f', prec, 64)
}

func u(v uint32) string { return strconv.FormatUint(uint64(v), 10) }

func yes(b bool) string {
	if b {
		return "yes"
	}
	return "NO"
}

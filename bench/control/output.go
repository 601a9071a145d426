package control

import (
	"fmt"
	"strconv"

	"xlb/bench/report"
)

// Our targets (docs/performance-targets.md).
const (
	targetReloadMs       = 1000.0 // a whole reload at the largest size
	targetBeyondTablesMB = 150.0  // memory held beyond the Maglev tables
	targetGrowth         = 1.5    // cost per VIP at the largest size ÷ at the reference size
	targetEntryBytes     = 2      // one Maglev table entry (below 65,536 backends)
	targetLateShare      = 0.05   // p99 lateness of a probe, share of the interval
)

// Report turns r into lbbench's report: tables, charts, targets and notes,
// with r itself as Data.
func (r *Result) Report() report.Report {
	rep := report.Report{Data: r}
	rep.Tables = []report.Table{r.timeTable(), r.memoryTable()}
	if r.Health != nil {
		rep.Tables = append(rep.Tables, r.healthTable())
	}
	rep.Charts = r.charts()
	rep.Targets = r.Targets()
	rep.Notes = r.notes()
	return rep
}

func (r *Result) timeTable() report.Table {
	t := report.Table{
		Title: fmt.Sprintf("Control-plane time against the configuration (one service of %d backends and 2 rules per VIP, M = %d): CPU ms (wall ms), medians",
			r.per(), r.TableSize),
		Columns: []string{"VIPs", "backends", "rules", "validate", "first build (tables)", "snapshot (tables reused)",
			"health Set", "VIP map Set", "reload", "reload CPU µs/VIP"},
	}
	for _, p := range r.Points {
		t.Rows = append(t.Rows, []string{strconv.Itoa(p.VIPs), strconv.Itoa(p.Backends), strconv.Itoa(p.Rules),
			tm(p.Validate), tm(p.FirstBuild), tm(p.Snapshot), tm(p.HealthSet), tm(p.VIPMapSet), tm(p.Reload),
			f(1000*p.Reload.CPUMs/float64(p.VIPs), 1)})
	}
	return t
}

func (r *Result) memoryTable() report.Table {
	t := report.Table{
		Title:   "Memory held by the running configuration, control plane, snapshot and health checker",
		Columns: []string{"VIPs", "backends", "config KiB", "beyond tables MB", "bytes/backend", "Maglev tables MB (heap)", "of which entries MB", "entry bytes"},
	}
	for _, p := range r.Points {
		t.Rows = append(t.Rows, []string{strconv.Itoa(p.VIPs), strconv.Itoa(p.Backends), strconv.Itoa(p.ConfigBytes >> 10),
			f(p.HeapBeyondTablesMB, 1), f(p.HeapBeyondTablesMB*(1<<20)/float64(p.Backends), 0),
			f(p.TablesMB, 1), f(p.TableEntriesMB, 1), strconv.Itoa(p.TableEntryBytes)})
	}
	return t
}

func (r *Result) healthTable() report.Table {
	h := r.Health
	return report.Table{
		Title:   "Health checks: probe start against its schedule (each target's first probe + k intervals)",
		Columns: []string{"targets", "interval ms", "probes", "late p50 ms", "late p99 ms", "late max ms", "missed intervals", "CPU cores used"},
		Rows: [][]string{{strconv.Itoa(h.Targets), f(h.IntervalMs, 0), strconv.Itoa(h.Probes),
			f(h.LateP50Ms, 2), f(h.LateP99Ms, 2), f(h.LateMaxMs, 2), strconv.Itoa(h.Missed), f(h.CPUShare, 2)}},
	}
}

func (r *Result) per() int {
	if len(r.Points) == 0 || r.Points[0].VIPs == 0 {
		return 0
	}
	return r.Points[0].Backends / r.Points[0].VIPs
}

func (r *Result) charts() []report.Chart {
	tc := report.Chart{File: "control-time", Title: "Control-plane CPU time against the number of VIPs (4 backends each)",
		Kind: "line", XLabel: "VIPs", YLabel: "CPU ms"}
	mc := report.Chart{File: "control-memory", Title: "Memory against the number of VIPs (4 backends each)",
		Kind: "line", XLabel: "VIPs", YLabel: "MB"}
	series := []struct {
		name string
		get  func(p Point) float64
	}{
		{"validate", func(p Point) float64 { return p.Validate.CPUMs }},
		{"first build", func(p Point) float64 { return p.FirstBuild.CPUMs }},
		{"snapshot", func(p Point) float64 { return p.Snapshot.CPUMs }},
		{"reload", func(p Point) float64 { return p.Reload.CPUMs }},
	}
	for _, s := range series {
		sr := report.Series{Name: s.name}
		for _, p := range r.Points {
			sr.X, sr.Y = append(sr.X, float64(p.VIPs)), append(sr.Y, s.get(p))
		}
		tc.Series = append(tc.Series, sr)
	}
	beyond, tables := report.Series{Name: "beyond the tables"}, report.Series{Name: "Maglev tables"}
	for _, p := range r.Points {
		beyond.X, beyond.Y = append(beyond.X, float64(p.VIPs)), append(beyond.Y, p.HeapBeyondTablesMB)
		tables.X, tables.Y = append(tables.X, float64(p.VIPs)), append(tables.Y, p.TablesMB)
	}
	mc.Series = []report.Series{beyond, tables}
	return []report.Chart{tc, mc}
}

// reference is the point growth is measured from: 2,000 VIPs when
// measured (the smallest figure), else the smallest size.
func (r *Result) reference() (Point, bool) {
	if len(r.Points) < 2 {
		return Point{}, false
	}
	for _, p := range r.Points[:len(r.Points)-1] {
		if p.VIPs == 2000 {
			return p, true
		}
	}
	return r.Points[0], true
}

// Targets compares r with our targets (docs/performance-targets.md).
func (r *Result) Targets() []report.Target {
	var ts []report.Target
	if len(r.Points) == 0 {
		return ts
	}
	last := r.Points[len(r.Points)-1]
	at := fmt.Sprintf("%d VIPs, %d backends", last.VIPs, last.Backends)
	ts = append(ts, report.Target{Name: "reload (validate, VIP map, health-check Set, control plane), " + at + ", CPU",
		Want: "<= 1000", Measured: last.Reload.CPUMs, Unit: "ms", Met: last.Reload.CPUMs <= targetReloadMs})
	ts = append(ts, report.Target{Name: "memory beyond the Maglev tables, " + at,
		Want: "<= 150", Measured: last.HeapBeyondTablesMB, Unit: "MB", Met: last.HeapBeyondTablesMB <= targetBeyondTablesMB})
	if ref, ok := r.reference(); ok {
		for _, g := range []struct {
			name string
			get  func(p Point) float64
		}{
			{"validate", func(p Point) float64 { return p.Validate.CPUMs }},
			{"first build", func(p Point) float64 { return p.FirstBuild.CPUMs }},
			{"reload", func(p Point) float64 { return p.Reload.CPUMs }},
			{"memory", func(p Point) float64 { return p.HeapBeyondTablesMB }},
		} {
			a, b := g.get(ref)/float64(ref.VIPs), g.get(last)/float64(last.VIPs)
			ratio := 0.0
			if a > 0 {
				ratio = b / a
			}
			ts = append(ts, report.Target{Name: fmt.Sprintf("linear growth: %s per VIP at %d ÷ at %d VIPs", g.name, last.VIPs, ref.VIPs),
				Want: "<= 1.5", Measured: ratio, Unit: "x", Met: ratio > 0 && ratio <= targetGrowth})
		}
	}
	ts = append(ts, report.Target{Name: "Maglev table entry (fewer than 65,536 backends per service)",
		Want: "<= 2", Measured: float64(last.TableEntryBytes), Unit: "bytes", Met: last.TableEntryBytes <= targetEntryBytes})
	if h := r.Health; h != nil {
		ts = append(ts, report.Target{Name: fmt.Sprintf("health checks of %d targets: p99 probe start after its due time, share of the %.0f ms interval", h.Targets, h.IntervalMs),
			Want: "<= 5", Measured: 100 * h.LateP99Ms / h.IntervalMs, Unit: "%", Met: h.LateP99Ms <= targetLateShare*h.IntervalMs})
		ts = append(ts, report.Target{Name: fmt.Sprintf("health checks of %d targets: intervals without a probe", h.Targets),
			Want: "0", Measured: float64(h.Missed), Unit: "intervals", Met: h.Missed == 0})
	}
	return ts
}

func (r *Result) notes() []string {
	ns := []string{
		"Configurations from bench/control.Gen: VIP i has one TCP service of 4 endpoints (distinct addresses) and two rules, ports 80 and 443, " +
			"one HTTP health check for all. Times are the process's CPU time (every thread, the garbage collector's included), median of the repetitions, " +
			"with the wall-clock time in parentheses: on a shared machine the wall clock also counts the time other processes took the cores.",
		"first build: controlplane.New, every service's Maglev table built (M entries each, the bulk of it at large M); " +
			"snapshot: a publish with every table reused, what each health change costs; " +
			"reload: what SIGHUP does (controlplane/appliance.ReloadSteps: parse and validate, VIP list, the running checker's Set, " +
			"control plane Apply, stale VIPs) for a file that replaces one backend in 1 % of the services, whose tables are rebuilt, " +
			"and moves 1 % of the VIPs to other addresses; " +
			"health Set and VIP map Set: the checker's Set of every target, and the VIP map's SetVIPs of every VIP with 1 % of them moved, alone " +
			"(a reload sets the VIP map twice: the union of the old and new VIPs before the control plane, the new ones after).",
		"Memory: heap and goroutine stacks after a collection, once the configuration, control plane, snapshot and a running checker " +
			"of every backend (probes answered in-process) are in place, minus the heap before; the Maglev tables are counted apart, " +
			"as the heap they take: a table of 65537 entries (128 KiB) is a large object, rounded up to whole 8 KiB pages (136 KiB).",
	}
	if len(r.Points) > 0 {
		ns = append(ns, "VIP map: "+r.Points[len(r.Points)-1].VIPMap+".")
	}
	if r.Health != nil {
		ns = append(ns, "Health checks: a checker of every target with healthcheck.Options.Probe answering at once (no network), "+
			"its results applied to a control plane of the same configuration as the appliance applies them; a probe's lateness is its start "+
			"minus (the target's first probe + k intervals). It runs first, before the large configurations grow the heap; "+
			"\"CPU cores used\" is the process's CPU time over the run's wall-clock time (the first round makes every backend healthy: "+
			"a control-plane publish per batch of results).")
	}
	if r.Quick {
		ns = append(ns, "Quick run: small sizes and tables (CI); the targets at 20,000 VIPs need the full run.")
	}
	return ns
}

func tm(t Timing) string { return f(t.CPUMs, 1) + " (" + f(t.WallMs, 1) + ")" }

func f(v float64, prec int) string { return strconv.FormatFloat(v, 'f', prec, 64) }

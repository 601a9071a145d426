package xdp

import (
	"math"
	"strings"
	"testing"
	"time"

	"xlb/bench/xdp/sink"
)

// TestPairedSearch: both variants' capacities are found within the
// resolution from one starting rate, their trials alternate (xlb, xlb-ct,
// ...) while both search, a step passes on most of its trials (one
// disturbed trial of three does not fail it), and the ratio's range holds
// the true ratio.
func TestPairedSearch(t *testing.T) {
	cfg := Config{}
	if err := cfg.defaults(); err != nil {
		t.Fatal(err)
	}
	capacity := [2]float64{300e3, 280e3}
	var order []int
	disturbed := 0
	run := func(i int, rate float64) (Case, error) {
		order = append(order, i)
		c := Case{Load: "trial", RatePPS: rate, SentPPS: rate, Sent: uint64(rate / 10)}
		switch {
		case rate > capacity[i]:
			c.Loss = 0.05
		case len(order)%7 == 0:
			c.Loss = 0.02 // the machine took the core: one trial in seven
			disturbed++
		}
		return c, nil
	}
	res, err := pairedSearch(&cfg, 250e3, [2]float64{1e6, 1e6}, pairedSteps, run, nil)
	if err != nil {
		t.Fatal(err)
	}
	if disturbed == 0 {
		t.Fatal("no trial was disturbed: the test checks nothing about the majority")
	}
	for i, p := range res {
		if p.Lo > capacity[i] || p.Lo < capacity[i]/(1+cfg.Resolution) || p.Hi <= capacity[i] || len(p.Steps) > pairedSteps {
			t.Errorf("variant %d (capacity %v): found %v..%v in %d steps", i, capacity[i], p.Lo, p.Hi, len(p.Steps))
		}
		if p.Steps[0].RatePPS != 250e3 || len(p.Steps[0].Losses) != pairedTrials {
			t.Errorf("variant %d: first step %+v, want %d trials at the starting rate", i, p.Steps[0], pairedTrials)
		}
	}
	// Alternating while both search.
	both := 2 * pairedTrials * min(len(res[0].Steps), len(res[1].Steps))
	for k := 0; k < both; k++ {
		if order[k] != k%2 {
			t.Fatalf("trial %d was variant %d: not interleaved (%v)", k, order[k], order[:both])
		}
	}
	v, lo, hi, ok := pairedRatio(res[0], res[1])
	if want := capacity[1] / capacity[0]; !ok || lo > want || hi < want || math.Abs(v-want) > 2*cfg.Resolution {
		t.Errorf("ratio %v in %v..%v (ok %v), want about %v inside the range", v, lo, hi, ok, want)
	}

	// A variant that loses at every rate passes no step: no ratio. One
	// that never loses stops at the generator's rate, without a Hi.
	capacity = [2]float64{0, 2e6}
	order = nil
	res, _ = pairedSearch(&cfg, 250e3, [2]float64{400e3, 400e3}, pairedSteps, run, nil)
	if res[0].Lo != 0 || len(res[0].Steps) != pairedSteps {
		t.Errorf("always lossy: %+v", res[0])
	}
	if res[1].Lo != 400e3 || res[1].Hi != 0 {
		t.Errorf("never lossy: %+v, want lo at the generator's 400k, no hi", res[1])
	}
	if _, _, _, ok := pairedRatio(res[0], res[1]); ok {
		t.Error("a ratio without a passing step")
	}
}

// TestPairedReport: the paired cases make the xlb-ct/xlb target (not
// each variant's own search) and a table row per variant.
func TestPairedReport(t *testing.T) {
	b := &bench{cfg: Config{Sizes: []int{64}}, genCPU: 0, midCPU: 1}
	if err := b.cfg.defaults(); err != nil {
		t.Fatal(err)
	}
	pc := func(v string, lo, hi float64) Case {
		return Case{Variant: v, Size: 64, Load: "paired", RatePPS: lo, SentPPS: lo, Paired: &Paired{Lo: lo, Hi: hi,
			Steps: []PairedStep{{RatePPS: lo, Losses: []float64{0, 0.01, 0}, Pass: true}, {RatePPS: hi, Losses: []float64{0.03, 0.02, 0}, Pass: false}}}}
	}
	cs := []Case{
		{Variant: "xlb", Size: 64, Load: "lossless", SentPPS: 400e3}, {Variant: "xlb-ct", Size: 64, Load: "lossless", SentPPS: 200e3},
		pc("xlb", 400e3, 410e3), pc("xlb-ct", 380e3, 390e3),
	}
	r := b.report(cs)
	var found bool
	for _, tg := range r.Targets {
		if strings.HasPrefix(tg.Name, "xlb-ct / xlb") {
			found = true
			if !strings.Contains(tg.Name, "paired") || math.Abs(tg.Measured-0.95) > 1e-9 || !tg.Met {
				t.Errorf("target %+v, want the paired ratio 0.95, met", tg)
			}
		}
	}
	if !found {
		t.Error("no xlb-ct / xlb target")
	}
	var rows [][]string
	for _, tb := range r.Tables {
		if strings.HasPrefix(tb.Title, "xlb-ct against xlb, paired") {
			rows = tb.Rows
		}
	}
	if len(rows) != 2 || rows[1][5] != "0.95x" || rows[1][6] != "0.93-0.97" || !strings.Contains(rows[1][4], "x") {
		t.Errorf("paired rows %v", rows)
	}
	if v, ok := PairedRatio(cs, 64); !ok || math.Abs(v-0.95) > 1e-9 {
		t.Errorf("PairedRatio = %v, %v", v, ok)
	}
}

// TestParseGCTrace: the runtime's gctrace lines give each collection's
// stop-the-world time (sweep and mark termination); other lines are not
// collections.
func TestParseGCTrace(t *testing.T) {
	log := strings.Join([]string{
		"gc 1 @0.015s 3%: 0.015+1.2+0.005 ms clock, 0.031+0.95/0.24/0+0.011 ms cpu, 3->4->1 MB, 4 MB goal, 0 MB stacks, 0 MB globals, 2 P",
		`{"level":"warn","msg":"gc 2 is not a trace line"}`,
		"gc 2 @0.021s 3%: 0.063+1.1+0.2 ms clock, 0.12+0.49/0/0+0.005 ms cpu, 3->3->1 MB, 4 MB goal, 0 MB stacks, 0 MB globals, 2 P",
		"gc 3 @0.03s 1%: garbled",
	}, "\n")
	ps := parseGCTrace(log)
	if len(ps) != 2 || ps[0].stw != 20*time.Microsecond || ps[1].stw != 263*time.Microsecond {
		t.Fatalf("parsed %+v, want 20µs and 263µs", ps)
	}
	var tl Tail
	tl.gcTail(ps)
	if tl.GCs != 2 || math.Abs(tl.GCPauseMS-0.283) > 1e-9 || math.Abs(tl.GCMaxPauseMS-0.263) > 1e-9 {
		t.Errorf("tail %+v", tl)
	}
}

// TestExistingVariants: over existing ports xlb's variants or (b), not
// both, nothing else.
func TestExistingVariants(t *testing.T) {
	for _, tc := range []struct {
		want []string
		got  string // names, or "error"
	}{
		{[]string{"xlb", "xlb-ct"}, "xlb xlb-ct"},
		{[]string{"xlb-ct"}, "xlb-ct"},
		{[]string{"xdpfwd"}, "xdpfwd"},
		{[]string{"xlb", "xdpfwd"}, "error"},
		{[]string{"reflector", "nftlb"}, "error"},
	} {
		vs, err := existingVariants(tc.want)
		var names []string
		for _, v := range vs {
			names = append(names, v.name)
		}
		got := strings.Join(names, " ")
		if err != nil {
			got = "error"
		}
		if got != tc.got {
			t.Errorf("%v: %q (%v), want %q", tc.want, got, err, tc.got)
		}
	}
}

// TestTailTable: xlb's latency and lossless runs with a Tail get a row of
// the tail table, with mean waits per time on the CPU; other cases none.
func TestTailTable(t *testing.T) {
	tl := &Tail{WorkerRunMS: 400, WorkerWaitMS: 100, WorkerSlices: 1000, NAPIWaitMS: 50, NAPISlices: 2000,
		IdleSleeps: 7, RuntimeParks: 3, GCs: 1, GCPauseMS: 0.25, GCMaxPauseMS: 0.25, FramesOver1ms: 12}
	cs := []Case{{Variant: "xlb", Size: 64, Load: "half", Tail: tl}, {Variant: "xlb", Size: 64, Load: "full", Tail: tl},
		{Variant: "reflector", Size: 64, Load: "half"}}
	tb := tailTable(cs)
	if len(tb.Rows) != 1 {
		t.Fatalf("rows %v, want xlb's half run only", tb.Rows)
	}
	row := map[string]string{}
	for i, c := range tb.Columns {
		row[c] = tb.Rows[0][i]
	}
	for col, want := range map[string]string{"worker run-queue wait (mean µs)": "100.0 (100.0)", "NAPI wait (mean µs)": "50.0 (25.0)",
		"poll(2) sleeps": "7", "runtime parks": "3", "GCs": "1", "frames >= 1 ms": "12"} {
		if row[col] != want {
			t.Errorf("%s = %q, want %q", col, row[col], want)
		}
	}
}

// TestWhen: sample periods are sorted by the slowest frame sent in them; a
// tail span runs from its period's start to the first sample after that
// frame arrived, and the shares are of the spans' time.
func TestWhen(t *testing.T) {
	const ms = int64(time.Millisecond)
	// Samples every 2 ms; in 0-2 ms the worker runs all the time (calm);
	// in 2-4 ms and 4-6 ms it waits all the time while other tasks run.
	ss := []schedSample{
		{at: 0},
		{at: 2 * ms, wRun: 2 * time.Millisecond, nRun: 0},
		{at: 4 * ms, wRun: 2 * time.Millisecond, wWait: 2 * time.Millisecond},
		{at: 6 * ms, wRun: 2 * time.Millisecond, wWait: 4 * time.Millisecond},
	}
	w := &sink.Windows{Start: 0, Width: ms / 4, Max: make([]uint64, 24)}
	w.Max[1] = uint64(50 * time.Microsecond) // calm, in 0-2 ms
	w.Max[9] = uint64(3 * time.Millisecond)  // sent at 2.25 ms, took 3 ms: a tail span 2-6 ms
	r := when(ss, w)
	if r == nil || r.TailSpans != 1 || r.CalmSpans != 1 {
		t.Fatalf("when = %+v, want one tail span and one calm period", r)
	}
	if r.Tail.WorkerWait != 1 || r.Tail.WorkerRun != 0 || r.Tail.CoreOther != 1 {
		t.Errorf("tail share %+v, want the worker waiting all the time, the core to others", r.Tail)
	}
	if r.Calm.WorkerRun != 1 || r.Calm.WorkerWait != 0 || r.Calm.CoreOther != 0 {
		t.Errorf("calm share %+v, want the worker running all the time", r.Calm)
	}
	if when(ss[:1], w) != nil {
		t.Error("a share from one sample")
	}
}

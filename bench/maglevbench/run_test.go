package maglevbench

import (
	"encoding/json"
	"strings"
	"testing"

	"xlb/maglev"
)

// TestQuickRun runs the CI configuration and checks the shape of what it
// reports, and the figures that follow from Maglev's construction.
func TestQuickRun(t *testing.T) {
	cfg := Quick()
	steps := 0
	r, err := Run(cfg, func(n int) { steps += n })
	if err != nil {
		t.Fatal(err)
	}
	if steps != Steps(cfg) {
		t.Errorf("progress reported %d steps, Steps says %d", steps, Steps(cfg))
	}
	pairs := len(cfg.Sizes) * len(cfg.Backends) // every quick pair has N <= M/2
	if len(r.Builds) != pairs || len(r.Balance) != pairs || len(r.Disruption) != pairs*len(Changes) ||
		len(r.Weighted) != pairs+2*len(cfg.Sizes) || len(r.Lookup) != 4 {
		t.Fatalf("got %d builds, %d balance, %d disruption, %d weighted, %d lookup rows; want %d, %d, %d, %d, 4",
			len(r.Builds), len(r.Balance), len(r.Disruption), len(r.Weighted), len(r.Lookup),
			pairs, pairs, pairs*len(Changes), pairs+2*len(cfg.Sizes))
	}
	for _, b := range r.Builds {
		if b.Refused != "" || b.Reps != cfg.BuildReps || !(b.MinNs > 0 && b.MinNs <= b.MedianNs && b.MedianNs <= b.MaxNs) {
			t.Errorf("build M=%d N=%d: %+v", b.M, b.N, b)
		}
		// The maglev package promises a reused Builder does not allocate.
		if b.AllocsPerBuild != 0 {
			t.Errorf("build M=%d N=%d: %d allocations per build with a reused Builder", b.M, b.N, b.AllocsPerBuild)
		}
	}
	for _, b := range r.Balance {
		if b.Excess != 0 { // S2: one slot per backend per round
			t.Errorf("M=%d N=%d: entries %d..%d outside %d..%d", b.M, b.N, b.Min, b.Max, b.Floor, b.Ceil)
		}
	}
	for _, d := range r.Disruption {
		if d.Trials != cfg.Trials || d.RatioMean < 1 || d.ChangedMean < d.MinimumMean {
			t.Errorf("disruption %+v: fewer entries changed than the minimum, or trials missing", d)
		}
		// Removing one of N equal backends frees ~1/N of the table.
		if d.Change == ChangeRemove {
			if want := 1 / float64(d.N); d.MinimumMean < 0.9*want || d.MinimumMean > 1.1*want {
				t.Errorf("M=%d N=%d: removal minimum %.4f, want about 1/N = %.4f", d.M, d.N, d.MinimumMean, want)
			}
		}
	}
	for _, l := range r.Lookup {
		if l.Ns <= 0 {
			t.Errorf("lookup %q: %v ns", l.Case, l.Ns)
		}
	}

	rep := r.Report()
	rows := []int{pairs, pairs, pairs + 2*len(cfg.Sizes), pairs * len(Changes), 4}
	if len(rep.Tables) != len(rows) {
		t.Fatalf("%d tables, want %d", len(rep.Tables), len(rows))
	}
	for i, tb := range rep.Tables {
		if len(tb.Rows) != rows[i] {
			t.Errorf("table %q: %d rows, want %d", tb.Title, len(tb.Rows), rows[i])
		}
		for _, row := range tb.Rows {
			if len(row) != len(tb.Columns) {
				t.Errorf("table %q: row %v has %d cells for %d columns", tb.Title, row, len(row), len(tb.Columns))
			}
		}
	}
	// Build time (N=1000, M=65537), balance, weighted, S2, removal and
	// the lookup twice.
	if len(rep.Targets) != 7 {
		t.Errorf("%d targets, want 7", len(rep.Targets))
	} else if !strings.HasPrefix(rep.Targets[0].Name, "build N=1000, M=65537") {
		t.Errorf("first target %q, want the build time", rep.Targets[0].Name)
	}
	for _, c := range rep.Charts {
		if len(c.Series) < len(cfg.Sizes) {
			t.Errorf("chart %s: %d series, want at least one per M", c.File, len(c.Series))
		}
		for _, s := range c.Series {
			if len(s.X) != len(cfg.Backends) || len(s.Y) != len(s.X) {
				t.Errorf("chart %s, %s: %d x and %d y; want one point per N", c.File, s.Name, len(s.X), len(s.Y))
			}
		}
	}
	if _, err := json.Marshal(rep); err != nil {
		t.Errorf("report does not encode as JSON: %v", err)
	}
}

// TestRefusedAndNotPrime: pairs the builder refuses are reported as such,
// and a size that is not prime is an error.
func TestRefusedAndNotPrime(t *testing.T) {
	cfg := Config{Sizes: []uint32{11, 13}, Backends: []int{2, 6}, BuildReps: 1, Trials: 2, LookupOps: 100, LookupRuns: 1, Seed: 1}
	r, err := Run(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	var refused []string
	for _, b := range r.Builds {
		if b.Refused != "" {
			refused = append(refused, b.Refused)
			if b.M != 11 || b.N != 6 {
				t.Errorf("M=%d N=%d refused: %s", b.M, b.N, b.Refused)
			}
		}
	}
	if len(refused) != 1 || !strings.Contains(refused[0], "M/2") {
		t.Errorf("refused %q; want M=11 N=6 only (6 > 11/2)", refused)
	}
	if len(r.Balance) != 3 || len(r.Disruption) != 3*len(Changes) {
		t.Errorf("%d balance and %d disruption rows, want 3 and %d", len(r.Balance), len(r.Disruption), 3*len(Changes))
	}
	if rows := r.Report().Tables[0].Rows; len(rows) != 4 || rows[1][2] != "refused" {
		t.Errorf("build table rows %v; want 4, the second refused", rows)
	}

	cfg.Sizes = []uint32{12}
	if _, err := Run(cfg, nil); err == nil || !strings.Contains(err.Error(), "not a prime") {
		t.Errorf("size 12: err %v, want not a prime", err)
	}
}

// TestLookupLoops: the timed loops do the lookups they claim.
func TestLookupLoops(t *testing.T) {
	bld, _ := maglev.NewBuilder(LookupSize)
	a, b := make([]uint16, LookupSize), make([]uint16, LookupSize)
	if err := bld.Build(Backends(10), a); err != nil {
		t.Fatal(err)
	}
	if err := bld.Build(Backends(20), b); err != nil {
		t.Fatal(err)
	}
	const n = 1000
	h, sum := uint64(5), uint64(0)
	for range n {
		h = h*lcgMul + lcgAdd
		sum += uint64(a[h%LookupSize])
	}
	if got := lookupIndependent([][]uint16{a}, n, 5); got != sum {
		t.Errorf("lookupIndependent = %d, want %d", got, sum)
	}
	if got := coldIndependent([][]uint16{a}, n, 5); got != sum {
		t.Errorf("coldIndependent, one table = %d, want %d", got, sum)
	}
	if got, want := coldDependent([][]uint16{a}, n, 5), lookupDependent([][]uint16{a}, n, 5); got != want {
		t.Errorf("coldDependent, one table = %d, lookupDependent %d", got, want)
	}

	// Two tables: the top bit chooses.
	h, sum = 5, 0
	for range n {
		h = h*lcgMul + lcgAdd
		tb := a
		if h>>63 == 1 {
			tb = b
		}
		sum += uint64(tb[h%LookupSize])
	}
	if got := coldIndependent([][]uint16{a, b}, n, 5); got != sum {
		t.Errorf("coldIndependent, two tables = %d, want %d", got, sum)
	}
}

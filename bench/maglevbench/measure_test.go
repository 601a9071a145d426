package maglevbench

import (
	"math"
	"slices"
	"testing"
)

func TestCounts(t *testing.T) {
	got := Counts([]uint16{0, 2, 2, 1, 2, 0}, 4)
	if want := []int{2, 1, 3, 0}; !slices.Equal(got, want) {
		t.Errorf("Counts = %v, want %v", got, want)
	}
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

func TestUnweighted(t *testing.T) {
	for _, c := range []struct {
		counts       []int
		floor, ceil  int
		min, max     int
		excess       int
		maxOverIdeal float64
	}{
		// 10 entries, 3 backends: 3..4 each is the best possible.
		{counts: []int{3, 4, 3}, floor: 3, ceil: 4, min: 3, max: 4, excess: 0, maxOverIdeal: 4 / (10.0 / 3)},
		// One backend short by one entry below ⌊M/N⌋.
		{counts: []int{2, 4, 4}, floor: 3, ceil: 4, min: 2, max: 4, excess: 1, maxOverIdeal: 4 / (10.0 / 3)},
		// One backend two above ⌈M/N⌉.
		{counts: []int{6, 2, 2, 2}, floor: 3, ceil: 3, min: 2, max: 6, excess: 3, maxOverIdeal: 2},
		// Exact division.
		{counts: []int{5, 5}, floor: 5, ceil: 5, min: 5, max: 5, excess: 0, maxOverIdeal: 1},
	} {
		b := Unweighted(c.counts)
		if b.Floor != c.floor || b.Ceil != c.ceil || b.Min != c.min || b.Max != c.max || b.Excess != c.excess ||
			!near(b.MaxOverIdeal, c.maxOverIdeal) || !near(b.MinOverIdeal, float64(c.min)/b.Ideal) {
			t.Errorf("Unweighted(%v) = %+v; want floor %d ceil %d min %d max %d excess %d max/ideal %.4f",
				c.counts, b, c.floor, c.ceil, c.min, c.max, c.excess, c.maxOverIdeal)
		}
	}
}

func TestWeighted(t *testing.T) {
	for _, c := range []struct {
		name          string
		counts        []int
		weights       []uint32
		rel, absE     float64
		zero          int
		minIdealEntry float64
	}{
		{"exact 1:4", []int{2, 8}, []uint32{1, 4}, 0, 0, 0, 2},
		{"one entry off 1:4", []int{3, 7}, []uint32{1, 4}, 0.5, 1, 0, 2},
		// 0:2:6 over 10 entries: ideal 0, 2.5, 7.5; the weight-0 backend
		// holding one entry is counted, not compared.
		{"0:2:6 with a stray entry", []int{1, 2, 7}, []uint32{0, 2, 6}, 0.2, 0.5, 1, 2.5},
		// W1b: all zero shares equally.
		{"all zero", []int{4, 6}, []uint32{0, 0}, 0.2, 1, 0, 5},
	} {
		w := Weighted(c.counts, c.weights)
		if !near(w.MaxRelError, c.rel) || !near(w.MaxAbsEntries, c.absE) || w.ZeroWeightEntries != c.zero ||
			!near(w.MaxAbsShare, c.absE/10) || !near(w.MinIdealEntries, c.minIdealEntry) {
			t.Errorf("%s: Weighted = %+v; want rel %.3f abs %.2f entries, zero-weight %d, lightest ideal %.1f",
				c.name, w, c.rel, c.absE, c.zero, c.minIdealEntry)
		}
	}
}

func TestDisrupt(t *testing.T) {
	for _, c := range []struct {
		name                string
		before, after       []int32
		affected            int32
		changed, minimum    int
		othersMoved, others int
	}{
		{
			name:   "remove 2, only its entries move",
			before: []int32{0, 1, 2, 0, 1, 2, 0, 1, 2, 0}, after: []int32{0, 1, 0, 0, 1, 1, 0, 1, 1, 0},
			affected: 2, changed: 3, minimum: 3, othersMoved: 0, others: 7,
		},
		{
			name:   "remove 2, and one of 0's entries moves to 1",
			before: []int32{0, 1, 2, 0, 1, 2, 0, 1, 2, 0}, after: []int32{1, 1, 0, 0, 1, 1, 0, 1, 1, 0},
			affected: 2, changed: 4, minimum: 3, othersMoved: 1, others: 7,
		},
		{
			name:   "add 2: it takes two entries, one other moves",
			before: []int32{0, 1, 0, 1, 0, 1}, after: []int32{2, 1, 2, 0, 0, 1},
			affected: 2, changed: 3, minimum: 2, othersMoved: 1, others: 6,
		},
		{
			name:   "reweight 0 up by one entry",
			before: []int32{0, 0, 1, 1, 1, 1}, after: []int32{0, 0, 0, 1, 1, 1},
			affected: 0, changed: 1, minimum: 1, othersMoved: 0, others: 4,
		},
		{
			name:   "reweight 0 down by two entries, the others swap one",
			before: []int32{0, 0, 0, 1, 2, 1}, after: []int32{1, 2, 0, 2, 2, 1},
			affected: 0, changed: 3, minimum: 2, othersMoved: 1, others: 3,
		},
	} {
		d := Disrupt(c.before, c.after, c.affected)
		if d.Changed != c.changed || d.Minimum != c.minimum || d.OthersMoved != c.othersMoved || d.OthersHeld != c.others {
			t.Errorf("%s: %+v; want changed %d minimum %d others moved %d of %d",
				c.name, d, c.changed, c.minimum, c.othersMoved, c.others)
			continue
		}
		m := float64(len(c.before))
		if !near(d.Ratio(), float64(c.changed)/float64(c.minimum)) || !near(d.ChangedFraction(), float64(c.changed)/m) ||
			!near(d.MinimumFraction(), float64(c.minimum)/m) || !near(d.OthersFraction(), float64(c.othersMoved)/float64(c.others)) {
			t.Errorf("%s: fractions %v %v %v ratio %v", c.name, d.ChangedFraction(), d.MinimumFraction(), d.OthersFraction(), d.Ratio())
		}
	}

	// A change that needs no entry to move has no ratio.
	if d := Disrupt([]int32{0, 1, 1, 0}, []int32{1, 0, 1, 0}, 0); d.Minimum != 0 || d.Changed != 2 || !math.IsNaN(d.Ratio()) {
		t.Errorf("swap: %+v ratio %v; want minimum 0, changed 2, ratio NaN", d, d.Ratio())
	}
}

func TestSummarise(t *testing.T) {
	ds := []Disruption{
		{M: 10, Changed: 4, Minimum: 2, OthersMoved: 2, OthersHeld: 8},
		{M: 10, Changed: 2, Minimum: 2, OthersMoved: 0, OthersHeld: 8},
		{M: 10, Changed: 2, Minimum: 0, OthersMoved: 2, OthersHeld: 10}, // no ratio
	}
	s := summarise(10, 3, ChangeRemove, ds)
	if s.Trials != 3 || !near(s.RatioMean, 1.5) || !near(s.RatioMax, 2) || !near(s.ChangedMean, 0.8/3) ||
		!near(s.MinimumMean, 0.4/3) || !near(s.OthersMax, 0.25) || !near(s.OthersMean, (0.25+0+0.2)/3) {
		t.Errorf("summarise = %+v", s)
	}
}

func TestOwners(t *testing.T) {
	// Backend 1 of the slice was removed: slice index 1 is ID 2.
	got := Owners(nil, []uint16{0, 1, 1, 0}, []int32{0, 2})
	if want := []int32{0, 2, 2, 0}; !slices.Equal(got, want) {
		t.Errorf("Owners = %v, want %v", got, want)
	}
}

func TestRandomWeights(t *testing.T) {
	a, b := RandomWeights(7, 500), RandomWeights(7, 500)
	if !slices.Equal(a, b) {
		t.Fatal("RandomWeights differs for the same seed")
	}
	seen := map[uint32]bool{}
	for _, w := range a {
		if w < 1 || w > 10 {
			t.Fatalf("weight %d outside 1..10", w)
		}
		seen[w] = true
	}
	if len(seen) != 10 {
		t.Errorf("500 draws cover %d of the 10 weights", len(seen))
	}
}

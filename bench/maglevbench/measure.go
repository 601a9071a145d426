package maglevbench

import "math"

// Counts returns how many table entries each of n backends owns; table[i] is
// an index in [0, n).
func Counts(table []uint16, n int) []int {
	c := make([]int, n)
	for _, b := range table {
		c[b]++
	}
	return c
}

// Balance is how evenly an unweighted table of M entries is shared by N
// backends.
type Balance struct {
	M, N int
	// Ideal is M/N entries; Floor and Ceil are ⌊M/N⌋ and ⌈M/N⌉, the best a
	// table of whole entries can do.
	Ideal       float64
	Floor, Ceil int
	Min, Max    int // fewest and most entries of any backend
	// MaxOverIdeal and MinOverIdeal are Max/Ideal and Min/Ideal: 1 is
	// perfect balance.
	MaxOverIdeal, MinOverIdeal float64
	// Excess is how many entries the worst backend lies outside
	// [Floor, Ceil]; 0 when every backend is within table granularity.
	Excess int
}

// Unweighted measures the balance of counts (one per backend) over a table
// of sum(counts) entries.
func Unweighted(counts []int) Balance {
	b := Balance{N: len(counts)}
	if b.N == 0 {
		return b
	}
	b.Min, b.Max = counts[0], counts[0]
	for _, c := range counts {
		b.M += c
		b.Min, b.Max = min(b.Min, c), max(b.Max, c)
	}
	b.Ideal = float64(b.M) / float64(b.N)
	b.Floor = b.M / b.N
	b.Ceil = (b.M + b.N - 1) / b.N
	b.MaxOverIdeal = float64(b.Max) / b.Ideal
	b.MinOverIdeal = float64(b.Min) / b.Ideal
	b.Excess = max(0, b.Max-b.Ceil, b.Floor-b.Min)
	return b
}

// WeightedBalance is how closely a weighted table's shares follow
// weight / Σ weights.
type WeightedBalance struct {
	M, N int
	// MaxRelError is the largest |share − ideal| / ideal over the backends
	// of non-zero weight (0.01 is 1 % of the ideal share).
	MaxRelError float64
	// MaxAbsEntries is the largest |entries − ideal entries|: 1 means the
	// table is as close as whole entries allow.
	MaxAbsEntries float64
	// MaxAbsShare is the largest |share − ideal| as a fraction of the table
	// (0.01 is one percentage point).
	MaxAbsShare float64
	// ZeroWeightEntries counts the entries held by weight-0 backends, which
	// must hold none unless every weight is 0.
	ZeroWeightEntries int
	// MinIdealEntries is the ideal entry count of the lightest backend of
	// non-zero weight: below ~100 a single entry is over 1 % of its share.
	MinIdealEntries float64
}

// Weighted compares counts with weights (same order). When every weight is 0
// the backends share equally (W1b).
func Weighted(counts []int, weights []uint32) WeightedBalance {
	wb := WeightedBalance{N: len(counts), MinIdealEntries: math.Inf(1)}
	var sum float64
	for i, c := range counts {
		wb.M += c
		sum += float64(weights[i])
	}
	allZero := sum == 0
	if allZero {
		sum = float64(len(weights))
	}
	for i, c := range counts {
		w := float64(weights[i])
		if allZero {
			w = 1
		}
		if w == 0 {
			wb.ZeroWeightEntries += c
			continue
		}
		ideal := float64(wb.M) * w / sum
		d := math.Abs(float64(c) - ideal)
		wb.MaxAbsEntries = max(wb.MaxAbsEntries, d)
		wb.MaxRelError = max(wb.MaxRelError, d/ideal)
		wb.MinIdealEntries = min(wb.MinIdealEntries, ideal)
	}
	if wb.M > 0 {
		wb.MaxAbsShare = wb.MaxAbsEntries / float64(wb.M)
	}
	return wb
}

// Disruption is what one change to a backend set did to a table: owners
// are compared by a stable backend ID, not by index into the builder's
// slice (which shifts when a backend is removed).
type Disruption struct {
	M int
	// Changed is the number of entries whose owner changed.
	Changed int
	// Minimum is the fewest entries any table could change: the affected
	// backend's entries on removal, its new entries on addition, the
	// difference of its entry counts on a re-weight.
	Minimum int
	// OthersMoved counts the entries owned neither before nor after by the
	// affected backend that changed owner anyway; OthersHeld is the
	// entries not owned by the affected backend before.
	OthersMoved, OthersHeld int
}

// ChangedFraction is Changed over the table size.
func (d Disruption) ChangedFraction() float64 { return float64(d.Changed) / float64(d.M) }

// MinimumFraction is Minimum over the table size.
func (d Disruption) MinimumFraction() float64 { return float64(d.Minimum) / float64(d.M) }

// OthersFraction is the fraction of the other backends' entries that moved
// to yet another backend (S4's "small fraction").
func (d Disruption) OthersFraction() float64 {
	if d.OthersHeld == 0 {
		return 0
	}
	return float64(d.OthersMoved) / float64(d.OthersHeld)
}

// Ratio is Changed/Minimum: 1 is the least any table can do; NaN when the
// change needed no entry to move.
func (d Disruption) Ratio() float64 {
	if d.Minimum == 0 {
		return math.NaN()
	}
	return float64(d.Changed) / float64(d.Minimum)
}

// Disrupt compares two tables given as the owner ID of every entry, before
// and after a change to backend affected. The tables must have the same
// length.
func Disrupt(before, after []int32, affected int32) Disruption {
	d := Disruption{M: len(before)}
	var nBefore, nAfter int
	for i, b := range before {
		a := after[i]
		if b == affected {
			nBefore++
		} else {
			d.OthersHeld++
		}
		if a == affected {
			nAfter++
		}
		if a == b {
			continue
		}
		d.Changed++
		if a != affected && b != affected {
			d.OthersMoved++
		}
	}
	d.Minimum = nAfter - nBefore
	if d.Minimum < 0 {
		d.Minimum = -d.Minimum
	}
	return d
}

// Owners translates table (indexes into a backend slice) into stable IDs:
// ids[i] is the ID of the slice's backend i. dst is reused when large enough.
func Owners(dst []int32, table []uint16, ids []int32) []int32 {
	if cap(dst) < len(table) {
		dst = make([]int32, len(table))
	}
	dst = dst[:len(table)]
	for i, b := range table {
		dst[i] = ids[b]
	}
	return dst
}

package maglev

import (
	"fmt"
	"testing"
)

// backendsN returns n backends of weight w, keyed "web/10.0.<i/256>.<i%256>".
func backendsN(n int, w uint32) []Backend {
	bs := make([]Backend, n)
	for i := range bs {
		bs[i] = Backend{Key: fmt.Sprintf("web/10.0.%d.%d", i/256, i%256), Weight: w}
	}
	return bs
}

// weighted returns one backend per weight, keyed "b0", "b1", ….
func weighted(ws ...uint32) []Backend {
	bs := make([]Backend, len(ws))
	for i, w := range ws {
		bs[i] = Backend{Key: fmt.Sprintf("b%d", i), Weight: w}
	}
	return bs
}

// build builds a table of size m, failing the test on error.
func build(tb testing.TB, m uint32, bs []Backend) []uint16 {
	tb.Helper()
	b, err := NewBuilder(m)
	if err != nil {
		tb.Fatalf("NewBuilder(%d): %v", m, err)
	}
	table := make([]uint16, m)
	if err := b.Build(bs, table); err != nil {
		tb.Fatalf("Build(%d backends, M=%d): %v", len(bs), m, err)
	}
	return table
}

// owners maps each slot to its backend's Key, which is what must be stable
// across input orders and instances.
func owners(table []uint16, bs []Backend) []string {
	keys := make([]string, len(table))
	for i, idx := range table {
		keys[i] = bs[idx].Key
	}
	return keys
}

// shares returns each backend's fraction of the table, in input order.
func shares(table []uint16, n int) []float64 {
	counts := make([]int, n)
	for _, idx := range table {
		counts[idx]++
	}
	s := make([]float64, n)
	for i, c := range counts {
		s[i] = float64(c) / float64(len(table))
	}
	return s
}

// checkShares fails unless every share is within tolerance (a fraction) of
// want.
func checkShares(tb testing.TB, got, want []float64, tolerance float64) {
	tb.Helper()
	for i := range want {
		if d := got[i] - want[i]; d > tolerance || d < -tolerance {
			tb.Errorf("backend %d: share %.4f%%, want %.4f%% ± %.2fpp", i, 100*got[i], 100*want[i], 100*tolerance)
		}
	}
	tb.Logf("shares: %.3f%%", percent(got))
}

func percent(fs []float64) []float64 {
	p := make([]float64, len(fs))
	for i, f := range fs {
		p[i] = 100 * f
	}
	return p
}

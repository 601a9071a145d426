package maglevbench

import (
	"fmt"
	"math/bits"
	"slices"
	"time"

	"xlb/maglev"
)

// Hashes come from a 64-bit LCG (Knuth's MMIX constants): one multiply and
// one add, so the generator costs little next to the lookup. Its low bits
// are poor, but h mod M (M prime) depends on every bit, and the baseline
// uses the top bits.
const (
	lcgMul = 6364136223846793005
	lcgAdd = 1442695040888963407
)

// lookupCase is one lookup loop over tables.
type lookupCase struct {
	name      string
	dependent bool
	baseline  bool
	cold      bool
	loop      func(tables [][]uint16, n int, seed uint64) uint64
}

func lookupCases(cfg Config) []lookupCase {
	cs := []lookupCase{
		{name: "maglev.Lookup, table in cache", loop: lookupIndependent},
		{name: "maglev.Lookup, table in cache", dependent: true, loop: lookupDependent},
		{name: "baseline: h>>48 into 65536 entries, in cache", baseline: true, loop: maskIndependent},
		{name: "baseline: h>>48 into 65536 entries, in cache", baseline: true, dependent: true, loop: maskDependent},
	}
	if cfg.ColdTables > 0 {
		name := fmt.Sprintf("maglev.Lookup, out of cache (%d tables, %d MiB)", cfg.ColdTables, cfg.ColdTables*LookupSize*2>>20)
		cs = append(cs,
			lookupCase{name: name, cold: true, loop: coldIndependent},
			lookupCase{name: name, cold: true, dependent: true, loop: coldDependent},
		)
	}
	return cs
}

// measureLookups times every lookup case: the median ns per lookup over
// cfg.LookupRuns runs of cfg.LookupOps lookups.
func measureLookups(cfg Config, progress func(int)) ([]LookupResult, error) {
	bld, err := maglev.NewBuilder(LookupSize)
	if err != nil {
		return nil, err
	}
	hot := make([]uint16, LookupSize)
	if err := bld.Build(Backends(100), hot); err != nil {
		return nil, err
	}
	mask := make([]uint16, 1<<16)
	for i := range mask {
		mask[i] = hot[i]
	}
	var cold [][]uint16
	if cfg.ColdTables > 0 {
		if bits.OnesCount(uint(cfg.ColdTables)) != 1 {
			return nil, fmt.Errorf("ColdTables %d is not a power of two", cfg.ColdTables)
		}
		// Separate allocations, each a copy: the lookups touch
		// ColdTables × 128 KiB at random.
		cold = make([][]uint16, cfg.ColdTables)
		for i := range cold {
			cold[i] = slices.Clone(hot)
		}
	}

	var out []LookupResult
	times := make([]float64, cfg.LookupRuns)
	for _, c := range lookupCases(cfg) {
		tables := [][]uint16{hot}
		switch {
		case c.baseline:
			tables = [][]uint16{mask}
		case c.cold:
			tables = cold
		}
		ops := cfg.LookupOps
		if c.cold {
			ops /= 20 // misses cost ~20x a hit: as long a run, still 100k samples at full
		}
		c.loop(tables, ops/10, 1) // warm caches and TLB
		for i := range times {
			t := time.Now()
			c.loop(tables, ops, uint64(i)+2) // noinline, returning its result: nothing is optimised away
			times[i] = float64(time.Since(t)) / float64(ops)
		}
		slices.Sort(times)
		out = append(out, LookupResult{
			Case: c.name, Tables: len(tables), Entries: len(tables[0]),
			Dependent: c.dependent, Baseline: c.baseline, Ns: median(times),
		})
		progress(1)
	}
	return out, nil
}

// lookupIndependent looks up n hashes that do not depend on the results, so
// that the CPU overlaps lookups: throughput.
//
//go:noinline
func lookupIndependent(tables [][]uint16, n int, seed uint64) uint64 {
	t, h, sum := tables[0], seed, uint64(0)
	for range n {
		h = h*lcgMul + lcgAdd
		sum += uint64(maglev.Lookup(t, h))
	}
	return sum
}

// lookupDependent derives each hash from the previous result, so that each
// lookup waits for the one before: latency.
//
//go:noinline
func lookupDependent(tables [][]uint16, n int, seed uint64) uint64 {
	t, h := tables[0], seed
	for range n {
		h = (h^uint64(maglev.Lookup(t, h)))*lcgMul + lcgAdd
	}
	return h
}

// coldIndependent is lookupIndependent over many tables, the top bits of
// the hash choosing one (len(tables) is a power of two).
//
//go:noinline
func coldIndependent(tables [][]uint16, n int, seed uint64) uint64 {
	sh, h, sum := uint(64-bits.TrailingZeros(uint(len(tables)))), seed, uint64(0)
	for range n {
		h = h*lcgMul + lcgAdd
		sum += uint64(maglev.Lookup(tables[h>>sh], h))
	}
	return sum
}

// coldDependent is lookupDependent over many tables.
//
//go:noinline
func coldDependent(tables [][]uint16, n int, seed uint64) uint64 {
	sh, h := uint(64-bits.TrailingZeros(uint(len(tables)))), seed
	for range n {
		h = (h^uint64(maglev.Lookup(tables[h>>sh], h)))*lcgMul + lcgAdd
	}
	return h
}

// maskIndependent is lookupIndependent with the division replaced by the
// top 16 bits: the cost of the memory access alone.
//
//go:noinline
func maskIndependent(tables [][]uint16, n int, seed uint64) uint64 {
	t, h, sum := tables[0][:1<<16], seed, uint64(0)
	for range n {
		h = h*lcgMul + lcgAdd
		sum += uint64(t[h>>48])
	}
	return sum
}

// maskDependent is lookupDependent without the division.
//
//go:noinline
func maskDependent(tables [][]uint16, n int, seed uint64) uint64 {
	t, h := tables[0][:1<<16], seed
	for range n {
		h = (h^uint64(t[h>>48]))*lcgMul + lcgAdd
	}
	return h
}

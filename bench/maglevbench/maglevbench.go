// Package maglevbench measures our Maglev tables (package maglev) for
// `lbbench maglev`: build time and allocations over a grid of backend counts
// and table sizes, load imbalance unweighted and weighted, disruption when
// one backend is removed, added or re-weighted against the least any table
// could change, and the cost of a lookup in and out of cache.
package maglevbench

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"time"

	"xlb/maglev"
)

// Config says what to measure.
type Config struct {
	Quick bool
	// Sizes are the table sizes M (primes) and Backends the backend counts
	// N; every pair is measured where the builder accepts it (N ≤ M/2).
	Sizes    []uint32
	Backends []int
	// BuildReps is the number of timed builds per (M, N) pair.
	BuildReps int
	// Trials is how many different backends are removed, added or
	// re-weighted per (M, N) pair; disruption figures average over them.
	Trials int
	// LookupOps is the number of lookups per timed run, LookupRuns the
	// number of runs (the median is kept).
	LookupOps, LookupRuns int
	// ColdTables is how many 65537-entry tables the out-of-cache lookup
	// spreads over (a power of two); 0 skips it.
	ColdTables int
	// Seed makes the weights and the choice of affected backends
	// reproducible.
	Seed uint64
}

// LookupSize is the table size the lookup is measured on: the default.
const LookupSize = maglev.DefaultSize

// Full is the full run: about 15 s on a 2-core machine.
func Full() Config {
	return Config{
		Sizes:      []uint32{16381, 65537, 655373},
		Backends:   []int{10, 100, 1000, 10000},
		BuildReps:  21,
		Trials:     8,
		LookupOps:  2_000_000,
		LookupRuns: 7,
		ColdTables: 1024, // 128 MiB: well beyond any last-level cache
		Seed:       1,
	}
}

// Quick is the short run CI makes once: two sizes, three backend counts,
// no out-of-cache lookup.
func Quick() Config {
	return Config{
		Quick:      true,
		Sizes:      []uint32{16381, 65537},
		Backends:   []int{10, 100, 1000},
		BuildReps:  5,
		Trials:     3,
		LookupOps:  500_000,
		LookupRuns: 3,
		Seed:       1,
	}
}

// Result is everything measured, in the order of the report's tables. It
// is the report's Data for --json.
type Result struct {
	Quick bool `json:"quick"`
	// CPU is the CPU the measuring thread was pinned to; -1 if pinning
	// failed (the thread was still locked to one OS thread).
	CPU        int                `json:"cpu"`
	Seed       uint64             `json:"seed"`
	Sizes      []uint32           `json:"sizes"`
	Backends   []int              `json:"backends"`
	Builds     []BuildResult      `json:"builds"`
	Balance    []BalanceResult    `json:"balance"`
	Weighted   []WeightedResult   `json:"weighted"`
	Disruption []DisruptionResult `json:"disruption"`
	Lookup     []LookupResult     `json:"lookup"`
	Elapsed    time.Duration      `json:"elapsed_ns"`
}

// BuildResult is the build time of one (M, N) pair.
type BuildResult struct {
	M uint32 `json:"m"`
	N int    `json:"n"`
	// Refused is why the builder refused the pair; the figures are zero.
	Refused  string  `json:"refused,omitempty"`
	Reps     int     `json:"reps,omitempty"`
	MedianNs float64 `json:"median_ns,omitempty"`
	MinNs    float64 `json:"min_ns,omitempty"`
	MaxNs    float64 `json:"max_ns,omitempty"`
	// AllocsPerBuild is the fewest allocations of one build by a Builder
	// that built before (the control plane's case); FirstAllocs and
	// FirstBytes are for a new Builder's first build (NewBuilder
	// included, the table not).
	AllocsPerBuild uint64 `json:"allocs_per_build"`
	FirstAllocs    uint64 `json:"first_build_allocs"`
	FirstBytes     uint64 `json:"first_build_bytes"`
}

// NsPerEntry is the median build time per table entry.
func (b BuildResult) NsPerEntry() float64 { return b.MedianNs / float64(b.M) }

// BalanceResult is the unweighted balance of one (M, N) pair.
type BalanceResult struct {
	Balance
}

// WeightedResult is the weighted balance of one set at one size.
type WeightedResult struct {
	// Set names the weights: "1..10 random" (N backends), "1:4", "0:2:6".
	Set     string   `json:"set"`
	Weights []uint32 `json:"-"`
	WeightedBalance
	// Dense says M ≥ 100·N, where our target wants shares within 1 %
	// (docs/performance-targets.md).
	Dense bool `json:"dense"`
}

// DisruptionResult is one kind of change at one (M, N) pair, over Trials
// choices of the affected backend. Fractions are of the whole table.
type DisruptionResult struct {
	M      int    `json:"m"`
	N      int    `json:"n"` // backends before the change
	Change string `json:"change"`
	Trials int    `json:"trials"`
	// MinimumMean and ChangedMean: fraction of entries that had to change
	// and that did, averaged.
	MinimumMean float64 `json:"minimum_mean"`
	ChangedMean float64 `json:"changed_mean"`
	// RatioMean and RatioMax: Changed/Minimum per trial.
	RatioMean float64 `json:"ratio_mean"`
	RatioMax  float64 `json:"ratio_max"`
	// OthersMean and OthersMax: the fraction of the other backends'
	// entries that moved to yet another backend.
	OthersMean float64 `json:"others_mean"`
	OthersMax  float64 `json:"others_max"`
}

// The changes measured for disruption.
const (
	ChangeRemove      = "remove one"
	ChangeAdd         = "add one"
	ChangeReweight12  = "reweight 1->2 (all 1)"
	ChangeReweightInc = "reweight w->w+1 (w 1..10)"
)

// Changes lists them in report order.
var Changes = []string{ChangeRemove, ChangeAdd, ChangeReweight12, ChangeReweightInc}

// LookupResult is one lookup measurement.
type LookupResult struct {
	Case string `json:"case"`
	// Tables × Entries is the memory the lookups spread over.
	Tables  int `json:"tables"`
	Entries int `json:"entries"`
	// Dependent: each hash is computed from the previous lookup's result,
	// so this is latency; otherwise lookups overlap (throughput).
	Dependent bool    `json:"dependent"`
	Baseline  bool    `json:"baseline"` // not maglev.Lookup: the reference
	Ns        float64 `json:"ns"`
}

// Steps is how many progress steps Run reports for cfg.
func Steps(cfg Config) int {
	return 2*len(cfg.Sizes)*len(cfg.Backends) + len(lookupCases(cfg))
}

// Run measures cfg on one core: the measuring goroutine is locked to its OS
// thread and that thread pinned to one CPU. progress, if not nil, is
// called with the number of steps done since the last call.
func Run(cfg Config, progress func(int)) (Result, error) {
	if progress == nil {
		progress = func(int) {}
	}
	type outcome struct {
		r   Result
		err error
	}
	ch := make(chan outcome, 1)
	go func() {
		// Never unlocked: the thread, and the CPU affinity set on it,
		// end with this goroutine instead of returning to the pool.
		runtime.LockOSThread()
		cpu := pinOneCPU()
		r, err := run(cfg, progress)
		r.CPU = cpu
		ch <- outcome{r, err}
	}()
	o := <-ch
	return o.r, o.err
}

func run(cfg Config, progress func(int)) (Result, error) {
	start := time.Now()
	r := Result{Quick: cfg.Quick, Seed: cfg.Seed, Sizes: cfg.Sizes, Backends: cfg.Backends}
	for _, m := range cfg.Sizes {
		if !maglev.IsPrime(m) {
			return r, fmt.Errorf("table size %d is not a prime (the builder takes primes >= 7)", m)
		}
	}
	for _, m := range cfg.Sizes {
		bld, err := maglev.NewBuilder(m)
		if err != nil {
			return r, err
		}
		table := make([]uint16, m)
		scratch := &scratch{bld: bld, table: table}
		for _, n := range cfg.Backends {
			if uint64(n) > uint64(m/2) {
				r.Builds = append(r.Builds, BuildResult{M: m, N: n,
					Refused: fmt.Sprintf("N > M/2 = %d (maglev.ErrTooManyBackends)", m/2)})
				progress(2)
				continue
			}
			bs := Backends(n)
			b, err := measureBuild(m, bs, cfg.BuildReps)
			if err != nil {
				return r, err
			}
			r.Builds = append(r.Builds, b)
			progress(1)

			if err := scratch.analyse(&r, cfg, bs); err != nil {
				return r, err
			}
			progress(1)
		}
		for _, ws := range [][]uint32{{1, 4}, {0, 2, 6}} {
			if err := bld.Build(weighted(ws), table); err != nil {
				return r, err
			}
			r.Weighted = append(r.Weighted, WeightedResult{
				Set: joinWeights(ws), Weights: ws,
				WeightedBalance: Weighted(Counts(table, len(ws)), ws),
				Dense:           uint64(m) >= 100*uint64(len(ws)),
			})
		}
	}
	lookups, err := measureLookups(cfg, progress)
	if err != nil {
		return r, err
	}
	r.Lookup = lookups
	r.Elapsed = time.Since(start)
	return r, nil
}

// Backends returns n backends of weight 1 keyed like the control plane's
// (the backend's address): 10.0.0.1, 10.0.0.2, ….
func Backends(n int) []maglev.Backend {
	bs := make([]maglev.Backend, n)
	for i := range bs {
		bs[i] = maglev.Backend{Key: ipKey(10, i+1), Weight: 1}
	}
	return bs
}

// ipKey is the address a.x.y.z with x.y.z = i in base 256.
func ipKey(a, i int) string {
	return fmt.Sprintf("%d.%d.%d.%d", a, i>>16&255, i>>8&255, i&255)
}

// RandomWeights returns n weights drawn from 1..10, the same for the same
// seed and n.
func RandomWeights(seed uint64, n int) []uint32 {
	rng := rand.New(rand.NewPCG(seed, uint64(n)))
	ws := make([]uint32, n)
	for i := range ws {
		ws[i] = 1 + uint32(rng.IntN(10))
	}
	return ws
}

func weighted(ws []uint32) []maglev.Backend {
	bs := make([]maglev.Backend, len(ws))
	for i, w := range ws {
		bs[i] = maglev.Backend{Key: ipKey(10, i+1), Weight: w}
	}
	return bs
}

func joinWeights(ws []uint32) string {
	s := ""
	for i, w := range ws {
		if i > 0 {
			s += ":"
		}
		s += fmt.Sprint(w)
	}
	return s
}

// measureBuild times reps builds of bs at size m with one reused Builder,
// after a first build with a new one.
func measureBuild(m uint32, bs []maglev.Backend, reps int) (BuildResult, error) {
	b := BuildResult{M: m, N: len(bs), Reps: reps}
	table := make([]uint16, m)
	times := make([]float64, reps)
	runtime.GC()

	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	bld, err := maglev.NewBuilder(m)
	if err != nil {
		return b, err
	}
	if err := bld.Build(bs, table); err != nil {
		return b, err
	}
	runtime.ReadMemStats(&after)
	b.FirstAllocs = after.Mallocs - before.Mallocs
	b.FirstBytes = after.TotalAlloc - before.TotalAlloc

	for i := range times {
		t := time.Now()
		if err := bld.Build(bs, table); err != nil {
			return b, err
		}
		times[i] = float64(time.Since(t))
	}
	// Counted apart from the timed loop, one build at a time, and the
	// fewest kept: Mallocs counts the whole process, so a goroutine of
	// the runtime or the race detector allocating during one build must
	// not read as the Builder's, while an allocation of the Builder's
	// own shows in every build.
	b.AllocsPerBuild = ^uint64(0)
	for range reps {
		runtime.ReadMemStats(&before)
		if err := bld.Build(bs, table); err != nil {
			return b, err
		}
		runtime.ReadMemStats(&after)
		b.AllocsPerBuild = min(b.AllocsPerBuild, after.Mallocs-before.Mallocs)
	}

	slices.Sort(times)
	b.MedianNs = median(times)
	b.MinNs, b.MaxNs = times[0], times[len(times)-1]
	return b, nil
}

// median of sorted xs.
func median(xs []float64) float64 {
	n := len(xs)
	if n%2 == 1 {
		return xs[n/2]
	}
	return (xs[n/2-1] + xs[n/2]) / 2
}

// scratch holds one size's builder and buffers for the balance and
// disruption measurements.
type scratch struct {
	bld                 *maglev.Builder
	table               []uint16
	before, after       []int32
	ids, idsAfter       []int32
	beforeBs, changedBs []maglev.Backend
}

// analyse adds the unweighted and weighted balance of bs (all weight 1) and
// the disruption of each change, at the scratch's size.
func (s *scratch) analyse(r *Result, cfg Config, bs []maglev.Backend) error {
	m, n := int(s.bld.Size()), len(bs)
	s.ids = s.ids[:0]
	for i := range bs {
		s.ids = append(s.ids, int32(i))
	}

	// Unweighted.
	if err := s.bld.Build(bs, s.table); err != nil {
		return err
	}
	r.Balance = append(r.Balance, BalanceResult{Unweighted(Counts(s.table, n))})
	s.before = Owners(s.before, s.table, s.ids)
	equalOwners := slices.Clone(s.before)

	rng := rand.New(rand.NewPCG(cfg.Seed, uint64(m)<<32|uint64(n)))
	order := rng.Perm(n)
	trials := min(cfg.Trials, n)

	// Remove one: entries of the removed backend must move.
	var remove, add, rw12, rwInc []Disruption
	for _, k := range order[:trials] {
		s.changedBs = append(append(s.changedBs[:0], bs[:k]...), bs[k+1:]...)
		s.idsAfter = append(append(s.idsAfter[:0], s.ids[:k]...), s.ids[k+1:]...)
		d, err := s.change(equalOwners, int32(k))
		if err != nil {
			return err
		}
		remove = append(remove, d)
	}
	// Add one: a new address (the build order is by Key, not position).
	// None when N+1 would exceed what the builder takes.
	addTrials := trials
	if 2*(n+1) > m {
		addTrials = 0
	}
	for t := range addTrials {
		s.changedBs = append(append(s.changedBs[:0], bs...), maglev.Backend{Key: ipKey(192, t+1), Weight: 1})
		s.idsAfter = append(append(s.idsAfter[:0], s.ids...), int32(n))
		d, err := s.change(equalOwners, int32(n))
		if err != nil {
			return err
		}
		add = append(add, d)
	}
	// Re-weight 1 -> 2 in an all-1 set: raises the largest weight.
	s.idsAfter = append(s.idsAfter[:0], s.ids...)
	for _, k := range order[:trials] {
		s.changedBs = append(s.changedBs[:0], bs...)
		s.changedBs[k].Weight = 2
		d, err := s.change(equalOwners, int32(k))
		if err != nil {
			return err
		}
		rw12 = append(rw12, d)
	}

	// Weighted 1..10: balance, and w -> w+1 below the largest weight.
	ws := RandomWeights(cfg.Seed, n)
	s.beforeBs = append(s.beforeBs[:0], bs...)
	maxW := slices.Max(ws)
	for i := range s.beforeBs {
		s.beforeBs[i].Weight = ws[i]
	}
	if err := s.bld.Build(s.beforeBs, s.table); err != nil {
		return err
	}
	r.Weighted = append(r.Weighted, WeightedResult{
		Set: fmt.Sprintf("1..10 random, N=%d", n), Weights: ws,
		WeightedBalance: Weighted(Counts(s.table, n), ws),
		Dense:           m >= 100*n,
	})
	weightedOwners := Owners(nil, s.table, s.ids)
	done := 0
	for _, k := range order {
		if done == trials {
			break
		}
		if ws[k] >= maxW {
			continue
		}
		done++
		s.changedBs = append(s.changedBs[:0], s.beforeBs...)
		s.changedBs[k].Weight++
		d, err := s.change(weightedOwners, int32(k))
		if err != nil {
			return err
		}
		rwInc = append(rwInc, d)
	}

	for i, ds := range [][]Disruption{remove, add, rw12, rwInc} {
		r.Disruption = append(r.Disruption, summarise(m, n, Changes[i], ds))
	}
	return nil
}

// change builds s.changedBs (IDs s.idsAfter) and compares it with before.
func (s *scratch) change(before []int32, affected int32) (Disruption, error) {
	if err := s.bld.Build(s.changedBs, s.table); err != nil {
		return Disruption{}, err
	}
	s.after = Owners(s.after, s.table, s.idsAfter)
	return Disrupt(before, s.after, affected), nil
}

// summarise averages ds, the trials of one change.
func summarise(m, n int, change string, ds []Disruption) DisruptionResult {
	r := DisruptionResult{M: m, N: n, Change: change, Trials: len(ds)}
	if len(ds) == 0 {
		return r
	}
	ratios := 0
	for _, d := range ds {
		r.MinimumMean += d.MinimumFraction()
		r.ChangedMean += d.ChangedFraction()
		r.OthersMean += d.OthersFraction()
		r.OthersMax = max(r.OthersMax, d.OthersFraction())
		if q := d.Ratio(); q == q { // not NaN
			r.RatioMean += q
			r.RatioMax = max(r.RatioMax, q)
			ratios++
		}
	}
	k := float64(len(ds))
	r.MinimumMean /= k
	r.ChangedMean /= k
	r.OthersMean /= k
	if ratios > 0 {
		r.RatioMean /= float64(ratios)
	}
	return r
}

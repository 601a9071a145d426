package core

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"time"

	"xlb/bench/flows"
	"xlb/conntrack"
)

// Absolute nanoseconds differ by 1.5x between our VMs, so some targets are
// ratios to Go's built-in map with the same 40-byte keys, walked the same
// way and measured in the same run.

// mapEntry is the payload of a Go-map entry: the size of a conntrack slot's
// payload beside its key (packed value and last-used time, 16 bytes).
type mapEntry struct {
	val, last uint64
}

// Compare is, at one table size, a Go map hit, a conntrack hit (the same
// keys, the same order: one lookup at a time, and in batches of 64 as the
// engine looks up), the table's lines alone, and the engine per
// established-v4 packet, each the median of rounds interleaved with the
// others.
type Compare struct {
	Flows  int `json:"live_flows"` // keys in the map and the table (and live flows of the engine's table)
	Keys   int `json:"keys"`       // keys looked up (those the table kept, X3), in one random order
	Rounds int `json:"rounds"`
	// Thread CPU ns per lookup or packet (wall where the platform has no
	// thread CPU time), medians of the rounds.
	GoMapNs     float64 `json:"gomap_ns_per_lookup"`
	ConntrackNs float64 `json:"conntrack_ns_per_lookup"`
	// ConntrackBatchNs: the same lookups in batches of 64 consecutive keys,
	// the engine's way: every key's hint, then a load of every key's home
	// line, then of the lines its home reaches where the home holds
	// another key, then the lookups (conntrack Prefetch, PrefetchSlot,
	// LookupHint).
	ConntrackBatchNs float64 `json:"conntrack_batch_ns_per_lookup"`
	// LineNs is the memory alone: one load of each key's home line, in
	// batches of 64, hints computed before the clock starts: the floor of
	// a lookup that reads one line.
	LineNs   float64 `json:"line_ns_per_key"`
	EngineNs float64 `json:"engine_ns_per_pkt"`
	// The rounds' figures, in order.
	GoMapRounds     []float64 `json:"gomap_rounds"`
	ConntrackRounds []float64 `json:"conntrack_rounds"`
	BatchRounds     []float64 `json:"conntrack_batch_rounds"`
	LineRounds      []float64 `json:"line_rounds"`
	EngineRounds    []float64 `json:"engine_rounds"`
	EngineReplay    int       `json:"engine_replay_frames"`
	// Allocations in every measured window, all rounds.
	Allocs uint64 `json:"allocs"`
}

// ConntrackRatio and EngineRatio are the figures of the ratio targets.
// ConntrackBatchRatio is the batched lookup's.
func (c Compare) ConntrackRatio() float64      { return c.ConntrackNs / c.GoMapNs }
func (c Compare) ConntrackBatchRatio() float64 { return c.ConntrackBatchNs / c.GoMapNs }
func (c Compare) EngineRatio() float64         { return c.EngineNs / c.GoMapNs }

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	n := len(s)
	if n == 0 {
		return 0
	}
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

func perOp(l Lookup) float64 {
	if l.CPUNsPer > 0 {
		return l.CPUNsPer
	}
	return l.NsPer
}

// measureCompare fills a conntrack table of twice flows and a Go map with
// the keys of flows live IPv4 flows, then measures rounds of: Go map hits,
// conntrack hits (the keys the table kept, in the same random order), and
// the engine's established-v4 case on b (whose table holds the same live
// flows), one after the other in each round.
func measureCompare(b *bed, flowsN, rounds int, c caseKey, getSet func(caseKey) (*flows.Set, error), dur time.Duration) (Compare, error) {
	t, err := conntrack.New(max(2*flowsN, conntrack.MinCapacity))
	if err != nil {
		return Compare{}, err
	}
	m := make(map[conntrack.Key]mapEntry, flowsN)
	keys := make([]conntrack.Key, 0, flowsN)
	for i := range flowsN {
		k := lookupKey(i)
		t.Upsert(&k, conntrack.Value{Backend: uint32(i), IdleSec: conntrack.MaxIdleSec}, 1)
		m[k] = mapEntry{val: uint64(i), last: 1}
		keys = append(keys, k)
	}
	hits := keys[:0]
	for _, k := range keys {
		if _, ok := t.Lookup(&k, 1); ok {
			hits = append(hits, k)
		}
	}
	rng := rand.New(rand.NewPCG(uint64(flowsN), 11))
	rng.Shuffle(len(hits), func(i, j int) { hits[i], hits[j] = hits[j], hits[i] })
	hints := make([]conntrack.Hint, len(hits))
	for i := range hits {
		hints[i] = t.Hint(&hits[i])
	}
	cmp := Compare{Flows: flowsN, Keys: len(hits), Rounds: rounds, EngineReplay: c.frame}
	for range rounds {
		g, err := timeMap(m, hits, dur)
		if err != nil {
			return Compare{}, err
		}
		l, err := timeLookups(t, hits, dur)
		if err != nil {
			return Compare{}, err
		}
		lb, err := timeBatchLookups(t, hits, dur)
		if err != nil {
			return Compare{}, err
		}
		ln := timeLines(t, hints, dur)
		e, err := measureCase(b, c, getSet, dur, false)
		if err != nil {
			return Compare{}, err
		}
		cmp.GoMapRounds = append(cmp.GoMapRounds, perOp(g))
		cmp.ConntrackRounds = append(cmp.ConntrackRounds, perOp(l))
		cmp.BatchRounds = append(cmp.BatchRounds, perOp(lb))
		cmp.LineRounds = append(cmp.LineRounds, perOp(ln))
		cmp.EngineRounds = append(cmp.EngineRounds, cpuOrWall(e))
		cmp.Allocs += g.Allocs + l.Allocs + lb.Allocs + ln.Allocs + e.Allocs
	}
	cmp.GoMapNs, cmp.ConntrackNs, cmp.EngineNs = median(cmp.GoMapRounds), median(cmp.ConntrackRounds), median(cmp.EngineRounds)
	cmp.ConntrackBatchNs, cmp.LineNs = median(cmp.BatchRounds), median(cmp.LineRounds)
	return cmp, nil
}

// timeMap is timeLookups for the Go map: one lookup per key, round-robin,
// each result consumed.
func timeMap(m map[conntrack.Key]mapEntry, keys []conntrack.Key, dur time.Duration) (Lookup, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	cpu0 := threadCPU()
	t0 := time.Now()
	var n, miss, sum uint64
	i := 0
	for time.Since(t0) < dur {
		for range 1024 {
			e, ok := m[keys[i]]
			if !ok {
				miss++
			}
			sum += e.val
			if i++; i == len(keys) {
				i = 0
			}
		}
		n += 1024
	}
	wall, cpu := time.Since(t0), threadCPU()-cpu0
	runtime.ReadMemStats(&m1)
	runtime.KeepAlive(sum) // the values are used: the lookups cannot be dropped
	if miss > 0 {
		return Lookup{}, fmt.Errorf("lookups in the Go map: %d of %d missed", miss, n)
	}
	return Lookup{Keys: len(keys), Lookups: n, NsPer: float64(wall.Nanoseconds()) / float64(n),
		CPUNsPer: float64(cpu.Nanoseconds()) / float64(n), Allocs: m1.Mallocs - m0.Mallocs}, nil
}

// inCacheFlows is the table of the in-cache reference: at 1k live flows
// everything the engine touches stays in cache.
const inCacheFlows = 1_000

// InCacheRef is the in-cache engine cost of a saved run (`lbbench core
// --json`), the reference of the target "in-cache cost down by a third on
// the same machine".
type InCacheRef struct {
	File     string  `json:"file"`
	Started  string  `json:"started,omitempty"`
	Machine  string  `json:"machine,omitempty"`
	EngineNs float64 `json:"engine_ns_per_pkt"`
	// SameMachine: the saved run's machine description is this one's.
	SameMachine bool `json:"same_machine"`
}

// InCacheNs is the engine's CPU ns per established-v4 packet at 1k live
// flows: the Go map comparison's median where there is one, else the
// sweep's case.
func (res *Result) InCacheNs() (float64, bool) {
	for _, c := range res.Compares {
		if c.Flows == inCacheFlows {
			return c.EngineNs, true
		}
	}
	if c, ok := res.find(true, flows.EstablishedV4.Name, inCacheFlows, 1, smallFrame, replayFor(inCacheFlows, res.Replay)); ok {
		return cpuOrWall(c), true
	}
	return 0, false
}

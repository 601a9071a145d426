package core

import (
	"fmt"
	"runtime"
	"time"

	"xlb/bench/flows"
	"xlb/conntrack"
	"xlb/dataplane/packet"
)

// Lookup is conntrack.Table.Lookup measured directly, on hits.
type Lookup struct {
	Name     string  `json:"name"`
	Entries  int     `json:"entries"`  // keys inserted
	Present  int     `json:"present"`  // of those, still in the table (over-full buckets evict, X3)
	Capacity int     `json:"capacity"` // table capacity
	Keys     int     `json:"keys"`     // distinct keys looked up, round-robin
	Lookups  uint64  `json:"lookups"`
	NsPer    float64 `json:"ns_per_lookup"`     // wall
	CPUNsPer float64 `json:"cpu_ns_per_lookup"` // thread CPU time
	Allocs   uint64  `json:"allocs"`
}

// lookupKey is the engine's tracking key of live IPv4 flow i (5-tuple,
// scoped by service 1).
func lookupKey(i int) conntrack.Key {
	src, sport := flows.Client(i, false)
	return conntrack.Key{
		Src: src.As16(), Dst: flows.DefaultTargets.VIP4.As16(),
		SrcPort: sport, DstPort: flows.DefaultTargets.TCPPort,
		Proto: uint8(packet.ProtoTCP), Kind: conntrack.Kind5T, Service: 1,
	}
}

// measureLookups fills a table of twice entries with entries keys, then
// times lookups of all of them (walked in insertion order, which the hash
// scatters over the table: each one pays the misses it pays in production)
// and of 1024 of them (the table lines stay in cache: the lookup's own
// cost).
func measureLookups(entries int, dur time.Duration) ([]Lookup, error) {
	t, err := conntrack.New(2 * entries)
	if err != nil {
		return nil, err
	}
	keys := make([]conntrack.Key, 0, entries)
	for i := range entries {
		k := lookupKey(i)
		t.Upsert(&k, conntrack.Value{Backend: uint32(i), IdleSec: conntrack.MaxIdleSec}, 1)
		keys = append(keys, k)
	}
	// Over-full buckets displaced a few keys (X3); hits are those present.
	hits := keys[:0]
	for _, k := range keys {
		if _, ok := t.Lookup(&k, 1); ok {
			hits = append(hits, k)
		}
	}
	var out []Lookup
	for _, c := range []struct {
		name string
		keys []conntrack.Key
	}{
		{"hit, every key", hits},
		{"hit, 1024 keys (cache-hot)", hits[:min(1024, len(hits))]},
	} {
		l, err := timeLookups(t, c.keys, dur)
		if err != nil {
			return nil, err
		}
		l.Name, l.Entries, l.Present, l.Capacity = c.name, entries, t.Len(), t.Capacity()
		out = append(out, l)
	}
	return out, nil
}

func timeLookups(t *conntrack.Table, keys []conntrack.Key, dur time.Duration) (Lookup, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	cpu0 := threadCPU()
	t0 := time.Now()
	var n, miss uint64
	i := 0
	for time.Since(t0) < dur {
		for range 1024 {
			if _, ok := t.Lookup(&keys[i], 2); !ok {
				miss++
			}
			if i++; i == len(keys) {
				i = 0
			}
		}
		n += 1024
	}
	wall, cpu := time.Since(t0), threadCPU()-cpu0
	runtime.ReadMemStats(&m1)
	if miss > 0 {
		return Lookup{}, fmt.Errorf("conntrack lookups: %d of %d missed", miss, n)
	}
	return Lookup{Keys: len(keys), Lookups: n, NsPer: float64(wall.Nanoseconds()) / float64(n),
		CPUNsPer: float64(cpu.Nanoseconds()) / float64(n), Allocs: m1.Mallocs - m0.Mallocs}, nil
}

// lookupBatch is the engine's batch: lookups in groups of this many keys.
const lookupBatch = 64

// timeBatchLookups is timeLookups in batches of lookupBatch consecutive
// keys, looked up as the engine does: every key's hint, a load of every
// home line, of the lines a home reaches when it holds another key, then
// the lookups, whose lines have arrived meanwhile.
func timeBatchLookups(t *conntrack.Table, keys []conntrack.Key, dur time.Duration) (Lookup, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	keys = keys[:len(keys)/lookupBatch*lookupBatch]
	if len(keys) == 0 {
		return Lookup{}, fmt.Errorf("conntrack batch lookups: fewer than %d keys", lookupBatch)
	}
	var hints [lookupBatch]conntrack.Hint
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	cpu0 := threadCPU()
	t0 := time.Now()
	var n, miss, sink uint64
	i := 0
	for time.Since(t0) < dur {
		for range 1024 / lookupBatch {
			b := keys[i : i+lookupBatch]
			for j := range b {
				hints[j] = t.Hint(&b[j])
			}
			for j := range b {
				sink += t.Prefetch(hints[j])
			}
			for j := range b {
				sink += t.PrefetchSlot(&b[j], hints[j])
			}
			for j := range b {
				if _, ok := t.LookupHint(&b[j], hints[j], 2); !ok {
					miss++
				}
			}
			if i += lookupBatch; i == len(keys) {
				i = 0
			}
		}
		n += 1024
	}
	wall, cpu := time.Since(t0), threadCPU()-cpu0
	runtime.ReadMemStats(&m1)
	runtime.KeepAlive(sink)
	if miss > 0 {
		return Lookup{}, fmt.Errorf("conntrack batch lookups: %d of %d missed", miss, n)
	}
	return Lookup{Keys: len(keys), Lookups: n, NsPer: float64(wall.Nanoseconds()) / float64(n),
		CPUNsPer: float64(cpu.Nanoseconds()) / float64(n), Allocs: m1.Mallocs - m0.Mallocs}, nil
}

// timeLines is the memory under a batched lookup alone: one load of each
// key's home line (conntrack Prefetch), the hints computed beforehand, in
// the keys' order, lookupBatch loads in flight at most.
func timeLines(t *conntrack.Table, hints []conntrack.Hint, dur time.Duration) Lookup {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	hints = hints[:len(hints)/lookupBatch*lookupBatch]
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	cpu0 := threadCPU()
	t0 := time.Now()
	var n, sink uint64
	i := 0
	for len(hints) > 0 && time.Since(t0) < dur {
		for range 1024 / lookupBatch {
			for _, h := range hints[i : i+lookupBatch] {
				sink += t.Prefetch(h)
			}
			if i += lookupBatch; i == len(hints) {
				i = 0
			}
		}
		n += 1024
	}
	wall, cpu := time.Since(t0), threadCPU()-cpu0
	runtime.ReadMemStats(&m1)
	runtime.KeepAlive(sink)
	if n == 0 {
		return Lookup{}
	}
	return Lookup{Keys: len(hints), Lookups: n, NsPer: float64(wall.Nanoseconds()) / float64(n),
		CPUNsPer: float64(cpu.Nanoseconds()) / float64(n), Allocs: m1.Mallocs - m0.Mallocs}
}

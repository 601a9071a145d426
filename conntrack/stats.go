package conntrack

import "sync/atomic"

// Stats are cumulative counters since New, or since Open, which counts
// the entries it found in its file as inserts.
type Stats struct {
	Inserts   uint64 // new keys stored (Upsert returned Inserted or Evicted)
	Updates   uint64 // live entries overwritten in place (Updated)
	Evictions uint64 // live entries displaced because their bucket was full (X3)
	Reclaimed uint64 // expired entries whose slot was reused
	Deletes   uint64 // entries removed by Delete
}

// statStripes spreads the counters so that writers of different buckets
// rarely touch the same cache line.
const statStripes = 64

// stripe holds the counters of the buckets with index ≡ stripe (mod
// statStripes), padded to a cache line.
type stripe struct {
	inserts, updates, evictions, reclaimed, deletes atomic.Uint64
	_                                               [24]byte
}

// Stats returns the counters, summed over stripes (not an atomic snapshot).
func (t *Table) Stats() Stats {
	var s Stats
	for i := range t.stats {
		st := &t.stats[i]
		s.Inserts += st.inserts.Load()
		s.Updates += st.updates.Load()
		s.Evictions += st.evictions.Load()
		s.Reclaimed += st.reclaimed.Load()
		s.Deletes += st.deletes.Load()
	}
	return s
}

// Len returns the number of stored entries: live, possibly expired but not
// yet reclaimed. Exact when no writer runs, approximate otherwise.
func (t *Table) Len() int {
	n := 0
	for i := range t.stats {
		st := &t.stats[i]
		// Reading deletes etc. before inserts keeps a concurrent sum from
		// going below zero within a stripe.
		gone := st.deletes.Load() + st.evictions.Load() + st.reclaimed.Load()
		n += int(st.inserts.Load() - gone)
	}
	return min(max(n, 0), t.Capacity())
}

package conntrack

import "sync/atomic"

// Stats are cumulative counters since New, or since Open, which counts
// the entries it found in its file as inserts.
type Stats struct {
	Inserts   uint64 // new keys stored (Upsert returned Inserted or Evicted)
	Updates   uint64 // live entries overwritten in place (Updated)
	Evictions uint64 // live entries displaced because both their buckets were full (X3)
	// EvictionsHalfOpen counts the Evictions of half-open entries (Value.HalfOpen);
	// Evictions - EvictionsHalfOpen displaced established ones.
	EvictionsHalfOpen uint64
	Spills            uint64 // new keys stored in their second bucket (their first was full)
	Moves             uint64 // keys moved to their other bucket to make room instead of evicting
	Reclaimed         uint64 // expired entries whose slot was reused
	Deletes           uint64 // entries removed by Delete
	// Refused counts new half-open keys not stored because both their
	// buckets held only live established entries (Upsert returned Refused).
	Refused uint64
	// MergeRefused counts peer records not stored because both their
	// buckets held only live established entries of this instance's own
	// (Merge returned MergeRefused).
	MergeRefused uint64
}

// statStripes spreads the counters so that writers of different buckets
// rarely touch the same cache line.
const statStripes = 64

// stripe holds the counters of the buckets with index ≡ stripe (mod
// statStripes), padded to two cache lines.
type stripe struct {
	inserts, updates, evictions, reclaimed, deletes atomic.Uint64
	evictionsHalfOpen, spills, moves, refused       atomic.Uint64
	mergeRefused                                    atomic.Uint64
	// roomless: how many more full pairs of this stripe skip makeRoom. A
	// search that found no key to move says the table is about full; the
	// next ones would likely fail too, at 16 hashes and up to 128
	// header reads each, so only one pair in roomSkip+1 searches until one
	// succeeds again.
	roomless atomic.Uint64
	_        [40]byte
}

const roomSkip = 3

// tryRoom reports whether a full pair should search for a key to move.
func (st *stripe) tryRoom() bool {
	n := st.roomless.Load()
	if n == 0 {
		return true
	}
	st.roomless.Store(n - 1) // racy on purpose: an estimate is enough
	return false
}

// evicted counts a live eviction, of a half-open entry or not.
func (st *stripe) evicted(half bool) {
	st.evictions.Add(1)
	if half {
		st.evictionsHalfOpen.Add(1)
	}
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
		s.EvictionsHalfOpen += st.evictionsHalfOpen.Load()
		s.Spills += st.spills.Load()
		s.Moves += st.moves.Load()
		s.Refused += st.refused.Load()
		s.MergeRefused += st.mergeRefused.Load()
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

package conntrack

import (
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
)

// peerVal is a peer record's value for backend b.
func peerVal(b uint32) Value {
	return Value{Backend: b, Side: 1, IdleSec: 60, Peer: true}
}

func mustMerge(tb testing.TB, tab *Table, k Key, v Value, lastUse, now int64, want MergeResult) {
	tb.Helper()
	if r := tab.Merge(&k, v, lastUse, now); r != want {
		tb.Fatalf("Merge(%v, %+v, last %d) at %d = %v, want %v", k, v, lastUse, now, r, want)
	}
}

// TestMerge_StoresWhereAbsent: a record of a key the table lacks is stored
// as an established peer entry last used when the record says, not now
// (the flow is as idle here as there); a last use ahead of now (the
// sender's clock) is taken as now.
func TestMerge_StoresWhereAbsent(t *testing.T) {
	tab := mustNew(t, 1024)
	k := key5(1)
	v := peerVal(7)
	v.HalfOpen = true // a record is of an established flow whatever it says
	mustMerge(t, tab, k, v, 4000, 5000, MergeStored)
	e := mustFind(t, tab, k, 5000)
	if e.Value != peerVal(7) || e.LastUse != 4000 {
		t.Errorf("stored %+v, want %+v last used at 4000", e, peerVal(7))
	}
	k2 := key5(2)
	mustMerge(t, tab, k2, peerVal(8), 9000, 5000, MergeStored)
	if e := mustFind(t, tab, k2, 5000); e.LastUse != 5000 {
		t.Errorf("record from the future stored last used at %d, want 5000", e.LastUse)
	}
	if s := tab.Stats(); s.Inserts != 2 || tab.Len() != 2 {
		t.Errorf("stats %+v, Len %d", s, tab.Len())
	}
}

// TestMerge_RefreshRaisesLastUse: a record for the backend the table has
// raises the entry's last use to the record's and never lowers it; the
// entry stays what it was (own or peer).
func TestMerge_RefreshRaisesLastUse(t *testing.T) {
	for _, peer := range []bool{false, true} {
		tab := mustNew(t, 1024)
		k := key5(1)
		own := Value{Backend: 7, Side: 0, IdleSec: 30, Peer: peer}
		tab.Upsert(&k, own, 1000)
		mustMerge(t, tab, k, peerVal(7), 3000, 4000, MergeRefreshed)
		if e := mustFind(t, tab, k, 4000); e.Value != own || e.LastUse != 3000 {
			t.Errorf("peer %v: after a later record: %+v, want %+v last used at 3000", peer, e, own)
		}
		mustMerge(t, tab, k, peerVal(7), 2000, 4000, MergeRefreshed)
		if e := mustFind(t, tab, k, 4000); e.Value != own || e.LastUse != 3000 {
			t.Errorf("peer %v: after an older record: %+v, want last use kept at 3000", peer, e)
		}
		if s := tab.Stats(); s.Inserts != 1 || tab.Len() != 1 {
			t.Errorf("peer %v: stats %+v, Len %d", peer, s, tab.Len())
		}
	}
}

// TestMerge_HalfOpenSameBackendConfirmed: a record for the backend of a
// half-open entry confirms it: established, with the record's value, last
// used at the later of the two, and still this instance's own (its
// packets came here).
func TestMerge_HalfOpenSameBackendConfirmed(t *testing.T) {
	tab := mustNew(t, 1024)
	for i, lastUse := range []int64{500, 1500} {
		k := key5(i)
		tab.Upsert(&k, Value{Backend: 7, IdleSec: 5, HalfOpen: true}, 1000)
		mustMerge(t, tab, k, peerVal(7), lastUse, 2000, MergeRefreshed)
		want := peerVal(7)
		want.Peer = false
		if e := mustFind(t, tab, k, 2000); e.Value != want || e.LastUse != max(1000, lastUse) {
			t.Errorf("record last used at %d: entry %+v, want %+v last used at %d", lastUse, e, want, max(1000, lastUse))
		}
	}
}

// TestMerge_HalfOpenOtherBackendReplaced: a half-open entry proves less
// than a peer's established flow: the record replaces it.
func TestMerge_HalfOpenOtherBackendReplaced(t *testing.T) {
	tab := mustNew(t, 1024)
	k := key5(1)
	tab.Upsert(&k, Value{Backend: 3, IdleSec: 5, HalfOpen: true}, 1000)
	mustMerge(t, tab, k, peerVal(7), 900, 1100, MergeStored)
	if e := mustFind(t, tab, k, 1100); e.Value != peerVal(7) || e.LastUse != 900 {
		t.Errorf("entry %+v, want %+v last used at 900", e, peerVal(7))
	}
	if tab.Len() != 1 {
		t.Errorf("Len = %d", tab.Len())
	}
}

// TestMerge_ConflictKeepsEntry: a record for another backend than a live
// established entry's (own or peer) changes nothing.
func TestMerge_ConflictKeepsEntry(t *testing.T) {
	for _, peer := range []bool{false, true} {
		tab := mustNew(t, 1024)
		k := key5(1)
		own := Value{Backend: 3, Side: 0, IdleSec: 30, Peer: peer}
		tab.Upsert(&k, own, 1000)
		mustMerge(t, tab, k, peerVal(7), 1500, 2000, MergeConflict)
		if e := mustFind(t, tab, k, 2000); e.Value != own || e.LastUse != 1000 {
			t.Errorf("peer %v: entry %+v, want %+v last used at 1000", peer, e, own)
		}
	}
}

// TestMerge_Expired: a record already idle for its timeout is not stored
// (M1: gone at exactly IdleSec*1000 ms); a record over the table's own
// expired entry is stored in its place, a reclaimed slot.
func TestMerge_Expired(t *testing.T) {
	tab := mustNew(t, 1024)
	k := key5(1)
	now := int64(100_000)
	mustMerge(t, tab, k, peerVal(7), now-60_000, now, MergeExpired)
	mustMiss(t, tab, k, now)
	if s := tab.Stats(); s.Inserts != 0 || tab.Len() != 0 {
		t.Errorf("stats %+v, Len %d after an expired record", s, tab.Len())
	}
	mustMerge(t, tab, k, peerVal(7), now-59_999, now, MergeStored)

	k2 := key5(2)
	tab.Upsert(&k2, Value{Backend: 3, IdleSec: 1}, 0)
	mustMerge(t, tab, k2, peerVal(7), now-10, now, MergeStored)
	if e := mustFind(t, tab, k2, now); e.Value != peerVal(7) || e.LastUse != now-10 {
		t.Errorf("entry %+v over an expired one", e)
	}
	if s := tab.Stats(); s.Inserts != 3 || s.Reclaimed != 1 || tab.Len() != 2 {
		t.Errorf("stats %+v, Len %d", s, tab.Len())
	}
}

// TestMerge_FullBucketDisplaces: into a full bucket a record displaces the
// half-open entry first, then the least recently used peer entry, never an
// established entry of this instance's own, even older ones.
func TestMerge_FullBucketDisplaces(t *testing.T) {
	tab := oneBucket(t)
	const now = 10_000
	k := key5(0)
	tab.Upsert(&k, Value{Backend: 0, IdleSec: 60, HalfOpen: true}, 500)
	mustMerge(t, tab, key5(1), peerVal(1), 300, now, MergeStored)
	mustMerge(t, tab, key5(2), peerVal(2), 400, now, MergeStored)
	for i := 3; i < slotsPerBucket; i++ {
		k := key5(i)
		tab.Upsert(&k, val(i), int64(100+i)) // own, and older than all
	}
	before := tab.Stats()
	// Each record displaces the key named, in this order: the half-open
	// entry, then the peer entries by last use (records too).
	for j, gone := range []int{0, 1, 2, 100} {
		k := key5(100 + j)
		mustMerge(t, tab, k, peerVal(uint32(100+j)), int64(600+100*j), now, MergeStored)
		mustMiss(t, tab, key5(gone), now)
		for i := 3; i < slotsPerBucket; i++ {
			mustFind(t, tab, key5(i), now)
		}
	}
	s := tab.Stats()
	if s.Evictions-before.Evictions != 4 || s.EvictionsHalfOpen-before.EvictionsHalfOpen != 1 ||
		s.MergeRefused != 0 || tab.Len() != slotsPerBucket {
		t.Errorf("stats %+v since %+v, Len %d: want 4 evictions, 1 half-open", s, before, tab.Len())
	}
}

// TestMerge_FullOfOwnRefused: a record whose buckets hold only live
// established entries of this instance's own is not stored and displaces
// nothing (counted); once one of them expires, the record takes its slot.
// With one bucket, and with a table whose every pair is full.
func TestMerge_FullOfOwnRefused(t *testing.T) {
	t.Run("one bucket", func(t *testing.T) {
		tab := oneBucket(t)
		for i := range slotsPerBucket {
			v := val(i)
			if i == 0 {
				v.IdleSec = 1
			}
			k := key5(i)
			tab.Upsert(&k, v, 0)
		}
		k := key5(100)
		mustMerge(t, tab, k, peerVal(100), 500, 500, MergeRefused)
		mustMiss(t, tab, k, 500)
		for i := range slotsPerBucket {
			mustFind(t, tab, key5(i), 500)
		}
		if s := tab.Stats(); s.MergeRefused != 1 || s.Refused != 0 || s.Evictions != 0 || s.Inserts != slotsPerBucket {
			t.Errorf("stats %+v", s)
		}
		mustMerge(t, tab, k, peerVal(100), 1500, 1500, MergeStored)
		mustMiss(t, tab, key5(0), 1500)
		if s := tab.Stats(); s.Reclaimed != 1 || s.Evictions != 0 || tab.Len() != slotsPerBucket {
			t.Errorf("stats %+v, Len %d", s, tab.Len())
		}
	})
	t.Run("two buckets", func(t *testing.T) {
		tab := newTable(2)
		for i := 0; tab.Len() < tab.Capacity(); i++ {
			k := key5(i)
			tab.Upsert(&k, val(i), 100)
		}
		var stored []Key
		tab.Range(200, func(k Key, e Entry) bool { stored = append(stored, k); return true })
		before := tab.Stats()
		for j := range 50 {
			mustMerge(t, tab, key5(1000+j), peerVal(uint32(j)), 150, 200, MergeRefused)
			mustMiss(t, tab, key5(1000+j), 200)
		}
		for _, k := range stored {
			mustFind(t, tab, k, 200)
		}
		if s := tab.Stats(); s.MergeRefused != 50 || s.Evictions != before.Evictions || s.Inserts != before.Inserts {
			t.Errorf("stats %+v, want 50 refused merges and nothing stored since %+v", s, before)
		}
	})
}

// TestValuePeerRoundTrip: the peer mark survives packing beside the
// half-open mark and the largest idle timeout, leaves the timeout alone,
// and reads back through Lookup and Range as stored by Upsert and Merge.
func TestValuePeerRoundTrip(t *testing.T) {
	for _, v := range []Value{
		{Backend: 7, Side: 1, IdleSec: MaxIdleSec, Peer: true},
		{Backend: 7, Side: 1, IdleSec: MaxIdleSec, Peer: true, HalfOpen: true},
		{Backend: 1<<32 - 1, Side: 255, IdleSec: 1, Peer: true},
		{Backend: 3, IdleSec: 5},
	} {
		if got := unpack(v.pack()); got != v {
			t.Errorf("unpack(pack(%+v)) = %+v", v, got)
		}
	}
	p := Value{IdleSec: 5, Peer: true}.pack()
	if expired(p, 0, 4999) || !expired(p, 0, 5000) {
		t.Error("a peer entry's timeout is not its IdleSec")
	}

	tab := mustNew(t, 1024)
	a, b := key5(1), key5(2)
	tab.Upsert(&a, Value{Backend: 1, IdleSec: 60, Peer: true}, 0)
	mustMerge(t, tab, b, peerVal(2), 0, 0, MergeStored)
	for _, k := range []Key{a, b} {
		if e := mustFind(t, tab, k, 1); !e.Peer {
			t.Errorf("Lookup %v: %+v, want a peer entry", k, e)
		}
	}
	n := 0
	tab.Range(1, func(k Key, e Entry) bool {
		if n++; !e.Peer {
			t.Errorf("Range %v: %+v, want a peer entry", k, e)
		}
		return true
	})
	if n != 2 {
		t.Errorf("Range visited %d entries, want 2", n)
	}
	tab.Upsert(&a, Value{Backend: 1, IdleSec: 60}, 2) // the flow moved here
	if e := mustFind(t, tab, a, 2); e.Peer {
		t.Errorf("entry rewritten without the mark: %+v", e)
	}
}

// TestMerge_Concurrent: Merge alongside Upsert, Delete, Lookup, Touch and
// RangeBuckets on a tiny table (keys spill, move and are evicted): every
// value read belongs to its key, no key is stored twice, and Len matches
// the entries at rest.
func TestMerge_Concurrent(t *testing.T) {
	ops := 20000
	if testing.Short() || raceBuild {
		ops = 5000
	}
	tab := newTable(4)
	nkeys := 2 * 4 * slotsPerBucket
	keys := make([]Key, nkeys)
	for i := range keys {
		keys[i] = key5(i)
	}
	check := func(k Key, e Entry) bool {
		i := keyIndex(k)
		if i >= nkeys || k != keys[i] {
			t.Errorf("a key never written: %v", k)
			return false
		}
		checkVal(t, i, e.Value)
		return true
	}
	var results [MergeRefused + 1]atomic.Int64
	var wg sync.WaitGroup
	for g := range 6 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 19))
			for n := range ops {
				now := int64(100 + n)
				idx := rng.IntN(nkeys)
				k := &keys[idx]
				switch r := rng.IntN(100); {
				case r < 40:
					if e, ok := tab.Lookup(k, now); ok {
						checkVal(t, idx, e.Value)
						tab.Touch(&e, now)
					}
				case r < 60:
					v := concVal(idx, g, n)
					v.HalfOpen = rng.IntN(4) == 0
					tab.Upsert(k, v, now)
				case r < 90:
					v := concVal(idx, g, n%4) // a few backends per key: conflicts and refreshes
					v.Peer = true
					res := tab.Merge(k, v, now-int64(rng.IntN(100)), now)
					if res < MergeStored || res > MergeRefused {
						t.Errorf("Merge = %v", res)
						continue
					}
					results[res].Add(1)
				case r < 98:
					tab.Delete(k)
				default:
					from := rng.IntN(tab.Buckets())
					tab.RangeBuckets(from, from+2, now, check)
				}
			}
		})
	}
	wg.Wait()
	seen := map[Key]bool{}
	tab.Range(0, func(k Key, e Entry) bool {
		if seen[k] {
			t.Errorf("key %v stored twice", k)
		}
		seen[k] = true
		return check(k, e)
	})
	if len(seen) != tab.Len() {
		t.Errorf("Range counts %d entries, Len %d", len(seen), tab.Len())
	}
	if s := tab.Stats(); s.Spills == 0 {
		t.Errorf("stats %+v: no key went to its second bucket", s)
	}
	for _, r := range []MergeResult{MergeStored, MergeRefreshed, MergeConflict} {
		if results[r].Load() == 0 {
			t.Errorf("no Merge was %v", r)
		}
	}
}

// TestRangeBuckets: walking the table in slices of buckets visits what
// Range visits, each entry once and only in the slice of a bucket of its
// key; bounds outside [0, Buckets()) are clamped, and fn's false stops
// the walk.
func TestRangeBuckets(t *testing.T) {
	tab := mustNew(t, 4096)
	for i := range 3000 {
		k := key5(i)
		v := val(i)
		if i%5 == 0 {
			v.IdleSec = 1 // expired at now
		}
		tab.Upsert(&k, v, int64(i%100))
	}
	const now = 5000
	all := map[Key]Entry{}
	tab.Range(now, func(k Key, e Entry) bool { all[k] = e; return true })
	if len(all) == 0 {
		t.Fatal("Range found nothing")
	}
	got := map[Key]Entry{}
	const slice = 7 // not a divisor of the bucket count
	for from := -slice; from < tab.Buckets()+slice; from += slice {
		tab.RangeBuckets(from, from+slice, now, func(k Key, e Entry) bool {
			if _, ok := got[k]; ok {
				t.Errorf("%v visited twice", k)
			}
			if h := tab.Hint(&k); (int(h.bi) < from || int(h.bi) >= from+slice) && (int(h.bi2) < from || int(h.bi2) >= from+slice) {
				t.Errorf("%v (buckets %d, %d) visited in [%d, %d)", k, h.bi, h.bi2, from, from+slice)
			}
			got[k] = e
			return true
		})
	}
	if len(got) != len(all) {
		t.Errorf("slices visited %d entries, Range %d", len(got), len(all))
	}
	for k, e := range all {
		if g, ok := got[k]; !ok || g.Value != e.Value || g.LastUse != e.LastUse {
			t.Errorf("%v: slices %+v (%v), Range %+v", k, g, ok, e)
		}
	}
	for _, b := range [][2]int{{5, 5}, {10, 3}, {tab.Buckets(), tab.Buckets() + 10}, {-10, 0}} {
		tab.RangeBuckets(b[0], b[1], now, func(k Key, e Entry) bool {
			t.Errorf("RangeBuckets(%d, %d) visited %v", b[0], b[1], k)
			return false
		})
	}
	n := 0
	tab.RangeBuckets(0, tab.Buckets(), now, func(Key, Entry) bool { n++; return n < 3 })
	if n != 3 {
		t.Errorf("walk went on for %d entries after fn returned false at 3", n)
	}
}

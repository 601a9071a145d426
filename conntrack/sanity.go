package conntrack

import (
	"runtime"
	"sync"
	"sync/atomic"
)

// dropMisplaced clears every used slot of a table another process left
// whose key could not have been stored there: its hash, under the table's
// seed, names another bucket or home than the slot records. The header's
// checksum covers no slot (too costly on every store), so this is what
// tells damaged or foreign bytes over the slots from entries: a slot of
// random bytes passes with odds of one in the table's capacity. Slots a
// writer was inside (odd sequence) are repair's. It returns how many it
// cleared; repair then fits reaches and recounts. No concurrent use.
func (t *Table) dropMisplaced() int {
	// Buckets are independent: one range of them per CPU, so that a
	// large table's walk (memory bound) does not lengthen a restart's gap
	// more than it must.
	n := len(t.buckets)
	parts := max(1, min(runtime.GOMAXPROCS(0), n/4096))
	per := (n + parts - 1) / parts
	var cleared atomic.Int64
	var wg sync.WaitGroup
	for lo := 0; lo < n; lo += per {
		wg.Go(func() { cleared.Add(int64(t.dropMisplacedIn(lo, min(n, lo+per)))) })
	}
	wg.Wait()
	return int(cleared.Load())
}

// dropMisplacedIn is dropMisplaced for buckets [lo, hi).
func (t *Table) dropMisplacedIn(lo, hi int) (cleared int) {
	for bi := lo; bi < hi; bi++ {
		b := &t.buckets[bi]
		for i := range slotsPerBucket {
			s := &b.slots[i]
			h := s.hdr.Load()
			if h&hdrUsed == 0 || hdrSeq(h)&1 != 0 {
				continue
			}
			var w keyWords
			for j := range w {
				w[j] = s.key[j].Load()
			}
			hint := t.hint(hash(&w, &t.seed))
			want, home := hint.bi, int(hint.home)
			if h&altBit != 0 {
				want, home = hint.bi2, int(hint.home2)
			}
			if uint64(bi) != want || hdrHome(h) != home {
				b.clear(i)
				cleared++
			}
		}
	}
	return cleared
}

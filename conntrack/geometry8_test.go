//go:build !xlb_ct_layout_alt

package conntrack

import "testing"

// Tests of what the shipped geometry (eight slots per bucket) achieves; the
// test build xlb_ct_layout_alt's four-slot buckets are not held to it.

// TestX3_FewLiveEvictionsAt90Percent: filling a table to 90 % of its
// capacity with live entries evicts at most 0.1 % of the inserts (each key
// has two buckets, and a key of a full pair moves to its other bucket
// before anything is evicted); every key not evicted is found.
func TestX3_FewLiveEvictionsAt90Percent(t *testing.T) {
	tab := mustNew(t, 1<<16)
	n := tab.Capacity() * 9 / 10
	for i := range n {
		k := key5(i)
		tab.Upsert(&k, val(i), 0)
	}
	s := tab.Stats()
	if s.Evictions*1000 > uint64(n) {
		t.Errorf("%d live evictions in %d inserts (%.3f %%), want at most 0.1 %%", s.Evictions, n, 100*float64(s.Evictions)/float64(n))
	}
	if s.Spills == 0 || s.Moves == 0 {
		t.Errorf("stats %+v: no key went to its second bucket or moved", s)
	}
	found := 0
	for i := range n {
		k := key5(i)
		if _, ok := tab.Lookup(&k, 0); ok {
			found++
		}
	}
	if found != n-int(s.Evictions) || tab.Len() != found {
		t.Errorf("%d keys found, Len %d, want %d - %d evicted", found, tab.Len(), n, s.Evictions)
	}
	t.Logf("%d inserts: %d spilled, %d moves, %d evictions", n, s.Spills, s.Moves, s.Evictions)
}

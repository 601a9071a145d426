package conntrack

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"testing"
)

// BenchmarkTable measures the hot-path operations on tables of 1M and 4M
// entries prefilled to 75 %. Keys of hits are walked in insertion order,
// which the hash scatters over the whole table, so each lookup pays the
// cache misses it would pay in production. Insert keeps adding new keys on
// top of the prefill, so long runs measure a table that is full and
// evicting (X3), the steady state under churn. Delete runs last, on the
// keys then present.
func BenchmarkTable(b *testing.B) {
	benchTable(b, []int{1 << 20, 1 << 22}, func(size int) *Table { return mustNew(b, size) })
}

// benchTable runs BenchmarkTable's operations on tables of the given sizes
// that mk makes.
func benchTable(b *testing.B, sizes []int, mk func(size int) *Table) {
	for _, size := range sizes {
		b.Run(fmt.Sprintf("%dM", size>>20), func(b *testing.B) {
			tab := mk(size)
			filled := size / 4 * 3
			hits := make([]Key, 0, filled)
			for i := range filled {
				k := key5(i)
				tab.Upsert(&k, val(i), 0)
				hits = append(hits, k)
			}
			// Full buckets evicted a few keys during the prefill; hits
			// are the keys still present.
			hits = slices.DeleteFunc(hits, func(k Key) bool {
				_, ok := tab.Lookup(&k, 0)
				return !ok
			})
			b.Logf("prefilled %d keys, %d present (%.1f%% of capacity), %d evictions",
				filled, len(hits), 100*float64(len(hits))/float64(tab.Capacity()), tab.Stats().Evictions)
			misses := make([]Key, 1<<16)
			for i := range misses {
				misses[i] = key5(filled + i)
			}
			b.Run("hit", func(b *testing.B) {
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					if _, ok := tab.Lookup(&hits[i], 1); !ok {
						b.Fatal("miss")
					}
					if i++; i == len(hits) {
						i = 0
					}
				}
			})
			b.Run("hit-touch", func(b *testing.B) {
				b.ReportAllocs()
				i, now := 0, int64(1)
				for b.Loop() {
					e, _ := tab.Lookup(&hits[i], now)
					tab.Touch(&e, now)
					if i++; i == len(hits) {
						i, now = 0, now+1
					}
				}
			})
			b.Run("hit-parallel", func(b *testing.B) {
				b.ReportAllocs()
				var start atomic.Uint64
				b.RunParallel(func(pb *testing.PB) {
					i := rand.New(rand.NewPCG(start.Add(1), 1)).IntN(len(hits))
					for pb.Next() {
						e, _ := tab.Lookup(&hits[i], 1)
						tab.Touch(&e, 2)
						if i++; i == len(hits) {
							i = 0
						}
					}
				})
			})
			b.Run("miss", func(b *testing.B) {
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					if _, ok := tab.Lookup(&misses[i&(len(misses)-1)], 1); ok {
						b.Fatal("hit")
					}
					i++
				}
			})
			b.Run("insert", func(b *testing.B) {
				b.ReportAllocs()
				i := filled + len(misses)
				for b.Loop() {
					k := key5(i)
					tab.Upsert(&k, val(i), 2)
					i++
				}
			})
			b.Run("delete", func(b *testing.B) {
				// Every key present is deleted once; when all were, they
				// are put back, untimed, and deleted again.
				var present []Key
				tab.Range(2, func(k Key, _ Entry) bool { present = append(present, k); return true })
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					if !tab.Delete(&present[i]) {
						b.Fatal("not found")
					}
					if i++; i == len(present) {
						b.StopTimer()
						for j := range present {
							tab.Upsert(&present[j], val(j), 2)
						}
						present = slices.DeleteFunc(present, func(k Key) bool {
							_, ok := tab.Lookup(&k, 2)
							return !ok
						})
						i = 0
						b.StartTimer()
					}
				}
			})
		})
	}
}

// BenchmarkFill reports how many inserts of new keys evict a live entry
// while a 1M table fills to 50, 90 and 100 % of its capacity (the share of
// live evictions among inserts made between the previous mark and this
// one), with every entry live (nothing expires). One iteration fills a
// fresh table; the figures are the metrics, not the time.
func BenchmarkFill(b *testing.B) {
	const size = 1 << 20
	for b.Loop() {
		tab := mustNew(b, size)
		c := tab.Capacity()
		prev, prevEv := 0, uint64(0)
		for _, pct := range []int{50, 90, 100} {
			n := c * pct / 100
			for i := prev; i < n; i++ {
				k := key5(i)
				tab.Upsert(&k, val(i), 0)
			}
			ev := tab.Stats().Evictions
			b.ReportMetric(100*float64(ev-prevEv)/float64(n-prev), fmt.Sprintf("%%evict-to-%d", pct))
			prev, prevEv = n, ev
		}
		// Steady churn at 90 %: the oldest connection closes, a new one
		// opens, as many times as a tenth of the capacity.
		for i := c * 9 / 10; i < c; i++ {
			k := key5(i)
			tab.Delete(&k)
		}
		ev := tab.Stats().Evictions
		for i := range c / 10 {
			k := key5(i)
			tab.Delete(&k)
			k = key5(c + i)
			tab.Upsert(&k, val(i), 0)
		}
		b.ReportMetric(100*float64(tab.Stats().Evictions-ev)/float64(c/10), "%evict-churn-90")
		if tab.unmap != nil {
			tab.unmap()
		}
	}
}

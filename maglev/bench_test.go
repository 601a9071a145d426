package maglev

import (
	"fmt"
	"testing"
)

func BenchmarkBuild(b *testing.B) {
	for _, n := range []int{10, 100, 1000} {
		for _, w := range []string{"equal", "weighted"} {
			bs := backendsN(n, 1)
			if w == "weighted" {
				for i := range bs {
					bs[i].Weight = uint32(i%10*100 + 1) // 1..901
				}
			}
			b.Run(fmt.Sprintf("N=%d/%s", n, w), func(b *testing.B) {
				bld, _ := NewBuilder(DefaultSize)
				table := make([]uint16, DefaultSize)
				_ = bld.Build(bs, table) // warm-up: buffers sized
				b.ReportAllocs()
				for b.Loop() {
					if err := bld.Build(bs, table); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

func BenchmarkLookup(b *testing.B) {
	table := build(b, DefaultSize, backendsN(100, 1))
	b.ReportAllocs()
	var h, sink uint64
	for b.Loop() {
		h += 0x9e3779b97f4a7c15
		sink += uint64(Lookup(table, h))
	}
	_ = sink
}

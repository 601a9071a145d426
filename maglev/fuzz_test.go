package maglev

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// fuzzSizes are the table sizes FuzzBuild picks from: small, so that
// ErrTooManyBackends and crowded tables are reached.
var fuzzSizes = []uint32{7, 11, 13, 17, 31, 61, 251, 257, 1009, 4099}

// fuzzBackends decodes 3 bytes per backend: a 2-byte key id (collisions give
// duplicate keys) and a weight byte (< 32 → 0, 255 → MaxUint32 to probe
// overflow, else ×4, i.e. up to ~1000).
func fuzzBackends(data []byte) []Backend {
	var bs []Backend
	for ; len(data) >= 3; data = data[3:] {
		w := uint32(data[2]) * 4
		switch {
		case data[2] < 32:
			w = 0
		case data[2] == 255:
			w = ^uint32(0)
		}
		bs = append(bs, Backend{Key: fmt.Sprintf("k%d", binary.LittleEndian.Uint16(data)), Weight: w})
	}
	return bs
}

func FuzzBuild(f *testing.F) {
	f.Add([]byte{}, uint8(0))
	f.Add([]byte{1, 0, 40, 2, 0, 160}, uint8(6))
	f.Add([]byte{1, 0, 0, 2, 0, 0, 3, 0, 0}, uint8(0))
	f.Add([]byte{1, 0, 255, 2, 0, 33, 3, 0, 0, 4, 0, 200}, uint8(9))
	f.Add([]byte{1, 0, 40, 1, 0, 40}, uint8(3))
	f.Fuzz(func(t *testing.T, data []byte, sizeSel uint8) {
		m := fuzzSizes[int(sizeSel)%len(fuzzSizes)]
		bs := fuzzBackends(data)
		b, err := NewBuilder(m)
		if err != nil {
			t.Fatal(err)
		}
		table := make([]uint16, m)
		err = b.Build(bs, table)

		keys := map[string]bool{}
		dup := false
		var maxW uint32
		for _, be := range bs {
			dup = dup || keys[be.Key]
			keys[be.Key] = true
			maxW = max(maxW, be.Weight)
		}
		var want error
		switch {
		case len(bs) == 0:
			want = ErrNoBackends
		case len(bs) > int(m/2):
			want = ErrTooManyBackends
		case dup:
			want = ErrDuplicateKey
		}
		if !errors.Is(err, want) || (want == nil) != (err == nil) {
			t.Fatalf("%d backends, M=%d: error %v, want %v", len(bs), m, err, want)
		}
		if err != nil {
			return
		}

		counts := make([]int, len(bs))
		for i, idx := range table {
			if int(idx) >= len(bs) {
				t.Fatalf("slot %d holds %d, only %d backends", i, idx, len(bs))
			}
			if maxW > 0 && bs[idx].Weight == 0 {
				t.Fatalf("slot %d held by weight-0 backend %q", i, bs[idx].Key)
			}
			counts[idx]++
		}
		// Backends of equal weight claim in the same rounds, so their counts
		// differ by at most one; the largest weight claims every round, so
		// each such backend holds a slot.
		for i := range bs {
			if (bs[i].Weight == maxW) && counts[i] == 0 {
				t.Fatalf("max-weight backend %q holds no slot", bs[i].Key)
			}
			for j := range i {
				if bs[i].Weight == bs[j].Weight && (counts[i]-counts[j] > 1 || counts[j]-counts[i] > 1) {
					t.Fatalf("equal weights, counts %d and %d", counts[i], counts[j])
				}
			}
		}

		// S5: the slice order does not matter, and the builder's reused
		// buffers do not either.
		want2 := owners(table, bs)
		rng := rand.New(rand.NewPCG(uint64(len(data)), uint64(sizeSel)))
		for range 3 {
			shuffled := slices.Clone(bs)
			rng.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
			if err := b.Build(shuffled, table); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(owners(table, shuffled), want2) {
				t.Fatal("shuffled input gives a different table")
			}
		}
	})
}

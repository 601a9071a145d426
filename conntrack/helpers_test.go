package conntrack

import (
	"errors"
	"testing"
)

// key5 is a distinct TCP 5-tuple key for every i in [0, 2^24): a client
// 10.x.y.z with a port derived from i, towards one VIP and service 1.
func key5(i int) Key {
	k := Key{
		Src:     [16]byte{10: 0xff, 11: 0xff, 12: 10, 13: byte(i >> 16), 14: byte(i >> 8), 15: byte(i)},
		Dst:     [16]byte{10: 0xff, 11: 0xff, 12: 192, 13: 0, 14: 2, 15: 1},
		SrcPort: uint16(1024 + i%50000),
		DstPort: 443,
		Proto:   6,
		Kind:    Kind5T,
		Service: 1,
	}
	return k
}

// val is a value that names the key index it was written for.
func val(i int) Value {
	return Value{Backend: uint32(i), Side: uint8(i), IdleSec: 60}
}

// oneBucket returns a table of a single bucket in which every key has the
// same home slot, so every lookup meets every collision there is (T3).
func oneBucket(tb testing.TB) *Table {
	tb.Helper()
	t := newTable(1)
	t.homeMask = 0
	return t
}

func mustNew(tb testing.TB, capacity int) *Table {
	tb.Helper()
	t, err := New(capacity)
	if err != nil {
		tb.Fatalf("New(%d): %v", capacity, err)
	}
	return t
}

func mustFind(tb testing.TB, t *Table, k Key, now int64) Entry {
	tb.Helper()
	e, ok := t.Lookup(&k, now)
	if !ok {
		tb.Fatalf("Lookup(%v) at %d: missing", k, now)
	}
	return e
}

func mustMiss(tb testing.TB, t *Table, k Key, now int64) {
	tb.Helper()
	if e, ok := t.Lookup(&k, now); ok {
		tb.Fatalf("Lookup(%v) at %d: found %+v, want none", k, now, e)
	}
}

func TestNewCapacity(t *testing.T) {
	for _, tc := range []struct{ in, want int }{
		{1024, 1024},
		{1025, 2048},
		{3_000_000, 1 << 22},
	} {
		tab := mustNew(t, tc.in)
		if got := tab.Capacity(); got != tc.want {
			t.Errorf("New(%d).Capacity() = %d, want %d", tc.in, got, tc.want)
		}
		if tab.Len() != 0 {
			t.Errorf("New(%d).Len() = %d", tc.in, tab.Len())
		}
	}
	for _, bad := range []int{-1, 0, 1023, MaxCapacity + 1} {
		if _, err := New(bad); !errors.Is(err, ErrCapacity) {
			t.Errorf("New(%d) error = %v, want ErrCapacity", bad, err)
		}
	}
}

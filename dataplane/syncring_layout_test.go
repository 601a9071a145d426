package dataplane

import (
	"testing"
	"unsafe"
)

// TestSyncRing_Layout: the read-only fields, the producer's and the
// consumer's are at least a cache line apart from each other and from
// whatever lies before and after the ring, so that they are on lines of
// their own wherever it starts.
func TestSyncRing_Layout(t *testing.T) {
	var r SyncRing
	for _, gap := range []struct {
		what       string
		last, next uintptr
	}{
		{"before the ring", 0, unsafe.Offsetof(r.buf) + 8}, // the word before the ring at -8
		{"read-only, producer", unsafe.Offsetof(r.mask), unsafe.Offsetof(r.head)},
		{"producer, consumer", unsafe.Offsetof(r.dropsNext), unsafe.Offsetof(r.tail)},
		{"after the ring", unsafe.Offsetof(r.headSeen), unsafe.Sizeof(r)},
	} {
		if gap.next-gap.last < cacheLine {
			t.Errorf("%s: fields %d bytes apart, want at least %d", gap.what, gap.next-gap.last, cacheLine)
		}
	}
}

//go:build !linux

package conntrack

import (
	"time"
	"unsafe"
)

// allocBuckets returns n zeroed buckets from the Go heap, every page
// touched.
func allocBuckets(t *Table, n int) []bucket {
	b := make([]bucket, n)
	size := n * int(unsafe.Sizeof(bucket{}))
	start := time.Now()
	m := unsafe.Slice((*byte)(unsafe.Pointer(&b[0])), size)
	for i := 0; i < size; i += 4096 {
		m[i] = 0
	}
	t.mem = Memory{Bytes: size, Populate: "touch", PopulateTime: time.Since(start)}
	return b
}

// Lock does nothing here: the table lives on the Go heap.
func (t *Table) Lock() error { return nil }

//go:build !linux

package conntrack

// allocBuckets returns n zeroed buckets from the Go heap.
func allocBuckets(_ *Table, n int) []bucket { return make([]bucket, n) }

//go:build linux

package conntrack

import (
	"runtime"
	"syscall"
	"unsafe"
)

// hugeThreshold: tables at least this large live in their own mapping,
// advised to use transparent huge pages. A 1M-entry table spans 64 MiB; with
// 4 KiB pages nearly every lookup also misses the TLB and walks page tables,
// which costs as much as the cache miss itself.
const (
	hugePage      = 2 << 20
	hugeThreshold = 4 << 20
)

// allocBuckets returns n zeroed buckets. Large tables are mapped outside the
// Go heap (buckets hold no pointers, so the collector need not see them) and
// unmapped when the Table is collected.
func allocBuckets(t *Table, n int) []bucket {
	size := n * int(unsafe.Sizeof(bucket{}))
	if size < hugeThreshold {
		return make([]bucket, n)
	}
	mem, err := syscall.Mmap(-1, 0, size+hugePage, syscall.PROT_READ|syscall.PROT_WRITE,
		syscall.MAP_PRIVATE|syscall.MAP_ANONYMOUS)
	if err != nil {
		return make([]bucket, n)
	}
	off := (hugePage - int(uintptr(unsafe.Pointer(&mem[0]))%hugePage)) % hugePage
	aligned := mem[off : off+size]
	_ = syscall.Madvise(aligned, syscall.MADV_HUGEPAGE) // best effort: THP may be off
	runtime.AddCleanup(t, func(m []byte) { _ = syscall.Munmap(m) }, mem)
	return unsafe.Slice((*bucket)(unsafe.Pointer(&aligned[0])), n)
}

//go:build linux

package conntrack

import (
	"errors"
	"fmt"
	"runtime"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// hugeThreshold: tables at least this large live in their own mapping,
// advised to use transparent huge pages. A 1M-entry table spans 64 MiB; with
// 4 KiB pages nearly every lookup also misses the TLB and walks page tables,
// which costs as much as the cache miss itself.
const (
	hugePage      = 2 << 20
	hugeThreshold = 4 << 20
	pageSize      = 4096
)

// allocBuckets returns n zeroed buckets, every page of them already
// faulted in (populate). Large tables are mapped outside the Go heap
// (buckets hold no pointers, so the collector need not see them), advised
// to use huge pages before they are populated, and unmapped when the Table
// is collected.
func allocBuckets(t *Table, n int) []bucket {
	size := n * int(unsafe.Sizeof(bucket{}))
	t.mem.Bytes = size
	if size < hugeThreshold {
		b := make([]bucket, n)
		// The Go heap hands out fresh memory from the OS without
		// writing it: touch it here, not in a worker.
		start := time.Now()
		touch(unsafe.Slice((*byte)(unsafe.Pointer(&b[0])), size))
		t.mem.Populate, t.mem.PopulateTime = "touch", time.Since(start)
		return b
	}
	mem, err := unix.Mmap(-1, 0, size+hugePage, unix.PROT_READ|unix.PROT_WRITE,
		unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		b := make([]bucket, n)
		start := time.Now()
		touch(unsafe.Slice((*byte)(unsafe.Pointer(&b[0])), size))
		t.mem.Populate, t.mem.PopulateTime = "touch", time.Since(start)
		return b
	}
	off := (hugePage - int(uintptr(unsafe.Pointer(&mem[0]))%hugePage)) % hugePage
	aligned := mem[off : off+size]
	// Best effort: THP may be off. The advice comes first: populating
	// first would fault in 4 KiB pages (MAP_POPULATE likewise).
	t.mem.HugeAdvice = unix.Madvise(aligned, unix.MADV_HUGEPAGE) == nil
	start := time.Now()
	t.mem.Populate = populate(aligned)
	t.mem.PopulateTime = time.Since(start)
	t.mem.Mapped = true
	t.mapping = aligned
	c := runtime.AddCleanup(t, func(m []byte) { _ = unix.Munmap(m) }, mem)
	t.unmap = func() {
		c.Stop()
		_ = unix.Munmap(mem)
	}
	return unsafe.Slice((*bucket)(unsafe.Pointer(&aligned[0])), n)
}

// populate faults in every page of b now, so that no worker takes a
// first-touch fault (zeroing a page, a 2 MiB one under THP, maybe
// compacting memory for it) inside its packet loop: MADV_POPULATE_WRITE
// (Linux 5.14), else a write to one byte of every page. It returns how.
func populate(b []byte) string {
	if err := unix.Madvise(b, unix.MADV_POPULATE_WRITE); err == nil {
		return "madvise"
	}
	// EINVAL before 5.14; anything else (ENOMEM, EINTR) also falls back:
	// touching faults in what it can, or fails as any write would.
	touch(b)
	return "touch"
}

// touch writes a zero to the first byte of every page of b (all zero
// already, so nothing changes but the page tables).
func touch(b []byte) {
	for i := 0; i < len(b); i += pageSize {
		b[i] = 0
	}
	if len(b) > 0 {
		b[len(b)-1] = 0
	}
}

// Lock keeps the table's memory resident (mlock): never swapped out or
// reclaimed, so that a worker never waits for a page to come back. It
// raises the soft RLIMIT_MEMLOCK to the hard limit when the lock needs it
// (root, or CAP_IPC_LOCK, is not limited at all). Tables below 4 MiB live
// on the Go heap and are not locked (Lock returns nil). An error leaves
// the table working as before, unlocked; callers log it.
func (t *Table) Lock() error {
	if t.mapping == nil || t.mem.Locked {
		return nil
	}
	err := unix.Mlock(t.mapping)
	if errors.Is(err, unix.ENOMEM) || errors.Is(err, unix.EPERM) {
		var lim unix.Rlimit
		if unix.Getrlimit(unix.RLIMIT_MEMLOCK, &lim) == nil && lim.Cur < lim.Max {
			lim.Cur = lim.Max
			if unix.Setrlimit(unix.RLIMIT_MEMLOCK, &lim) == nil {
				err = unix.Mlock(t.mapping)
			}
		}
	}
	if err != nil {
		var lim unix.Rlimit
		_ = unix.Getrlimit(unix.RLIMIT_MEMLOCK, &lim)
		return fmt.Errorf("mlock of the %d MiB conntrack table: %w (RLIMIT_MEMLOCK %s; raise it, e.g. LimitMEMLOCK=infinity, or grant CAP_IPC_LOCK)",
			len(t.mapping)>>20, err, limString(lim.Cur))
	}
	t.mem.Locked = true
	return nil
}

func limString(v uint64) string {
	if v == unix.RLIM_INFINITY {
		return "unlimited"
	}
	return fmt.Sprintf("%d KiB", v>>10)
}

//go:build linux

package conntrack

import (
	"errors"
	"os"
	"path/filepath"
	"runtime/debug"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// TestGuard_TruncatedFile: a table file truncated under the process that
// maps it (to nothing, then to half its buckets) makes every access past the new end
// a fault, and Guard turns it into an error wrapping ErrFault, naming the
// file, instead of the SIGBUS crash it is without SetPanicOnFault. After
// truncation to half, keys whose buckets lie in the first half are still
// read. The test would die of the SIGBUS if any access escaped Guard.
func TestGuard_TruncatedFile(t *testing.T) {
	for _, tc := range []struct {
		name string
		size func(full int64) int64
	}{
		{"to zero", func(int64) int64 { return 0 }},
		{"to half its buckets", func(full int64) int64 { return fileHeaderSpan + (full-fileHeaderSpan)/2 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "ct")
			tb, _ := openT(t, path, 16384)
			defer tb.unmap()
			for i := range 2000 {
				k := key5(i)
				tb.Upsert(&k, val(i), 1)
			}
			fi, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			size := tc.size(fi.Size())
			if err := os.Truncate(path, size); err != nil {
				t.Fatal(err)
			}
			// Bytes of buckets still in the file (the buckets start at
			// fileHeaderSpan).
			left := max(size-fileHeaderSpan, 0)
			faults, found := 0, 0
			for i := range 2000 {
				k := key5(i)
				h := tb.Hint(&k)
				var e Entry
				var ok bool
				err := Guard(tb, func() { e, ok = tb.LookupHint(&k, h, 2) })
				// A lookup reads the home line of its first bucket
				// always, of its second bucket sometimes.
				first, second := h.Offsets()
				bsize := int64(unsafe.Sizeof(bucket{}))
				inFirst := int64(first)+bsize <= left
				switch {
				case err != nil:
					if !errors.Is(err, ErrFault) {
						t.Fatalf("key %d: Guard error %v, want ErrFault", i, err)
					}
					if inFirst && int64(second)+bsize <= left {
						t.Fatalf("key %d: fault although both its buckets are in the file: %v", i, err)
					}
					faults++
				case !inFirst:
					t.Fatalf("key %d: its bucket %d is past the file's end, yet no fault (found %v)", i, h.bi, ok)
				case ok && e.Value == val(i):
					found++
				}
			}
			if faults == 0 {
				t.Fatal("no access faulted: the truncation did not reach the mapping")
			}
			if left > 0 && found == 0 {
				t.Fatal("truncated to half, yet no key of the first half was found")
			}
			t.Logf("%d lookups faulted and were contained, %d found their entry", faults, found)
			// Writers fault as readers do.
			k := key5(1999)
			for i := 0; tb.hintBucketBytes(&k) <= left; i++ {
				k = key5(2000 + i)
			}
			err = Guard(tb, func() { tb.Upsert(&k, val(1), 3) })
			if !errors.Is(err, ErrFault) {
				t.Fatalf("Upsert into a truncated bucket: %v, want ErrFault", err)
			}
		})
	}
}

// hintBucketBytes is how far into the buckets k's first bucket ends.
func (t *Table) hintBucketBytes(k *Key) int64 {
	return int64((t.Hint(k).bi + 1) * uint64(unsafe.Sizeof(bucket{})))
}

// TestFaultAt_OnlyTheTablesMapping: FaultAt recognises a fault only
// inside the table's own file mapping: a fault in another mapping, a
// plain panic and a table in anonymous memory are not the table's, and
// Guard lets them go on.
func TestFaultAt_OnlyTheTablesMapping(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ct")
	tb, _ := openT(t, path, 16384)
	defer tb.unmap()

	// Another file mapping of its own, truncated: its fault is not the
	// table's.
	f, err := os.Create(filepath.Join(t.TempDir(), "other"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(1 << 16); err != nil {
		t.Fatal(err)
	}
	mem, err := unix.Mmap(int(f.Fd()), 0, 1<<16, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(mem)
	if err := f.Truncate(0); err != nil {
		t.Fatal(err)
	}
	r := recovered(func() {
		old := debug.SetPanicOnFault(true)
		defer debug.SetPanicOnFault(old)
		mem[100] = 1
	})
	if r == nil {
		t.Fatal("a write past a truncated file's end did not fault")
	}
	if _, ok := tb.FaultAt(r); ok {
		t.Errorf("FaultAt(%v) in another mapping = true", r)
	}
	if r := recovered(func() { _ = Guard(tb, func() { mem[100] = 1 }) }); r == nil {
		t.Error("Guard swallowed a fault outside the table's mapping")
	}
	if r := recovered(func() { _ = Guard(tb, func() { panic("not a fault") }) }); r != "not a fault" {
		t.Errorf("Guard let %v through, want the plain panic", r)
	}
	anon := mustNew(t, 1<<17) // 8 MiB: its own anonymous mapping
	if !anon.mem.Mapped {
		t.Fatal("an 8 MiB table is not its own mapping")
	}
	fake := fakeFault(uintptr(unsafe.Pointer(&anon.mapping[64])))
	if _, ok := anon.FaultAt(fake); ok {
		t.Error("FaultAt = true for a table in anonymous memory")
	}
	if off, ok := tb.FaultAt(fakeFault(uintptr(unsafe.Pointer(&tb.mapping[64])))); !ok || off != 64 {
		t.Errorf("FaultAt inside the file table's mapping = %d %v, want offset 64", off, ok)
	}
	end := uintptr(unsafe.Pointer(&tb.mapping[0])) + uintptr(len(tb.mapping))
	if _, ok := tb.FaultAt(fakeFault(end)); ok {
		t.Error("FaultAt = true for the first byte past the mapping")
	}
	if _, ok := tb.FaultAt(errors.New("x")); ok {
		t.Error("FaultAt = true for an error without an address")
	}
}

func recovered(fn func()) (r any) {
	defer func() { r = recover() }()
	fn()
	return nil
}

// fakeFault is a value shaped as the runtime's fault panic.
type fakeFault uintptr

func (f fakeFault) Error() string { return "fake fault" }
func (f fakeFault) RuntimeError() {}
func (f fakeFault) Addr() uintptr { return uintptr(f) }

// TestAbandon_WaitersPanic: in a table given up after a fault, a writer
// waiting for a bucket lock and a reader waiting for a slot that a
// faulted writer left held (lock bit set, odd sequence: it will never
// finish) panic out with ErrAbandoned, which WaitedIn recognises as this
// table's, instead of waiting forever.
func TestAbandon_WaitersPanic(t *testing.T) {
	tb := mustNew(t, 1024)
	other := mustNew(t, 1024)
	// The reader's key, its slot left mid-write.
	kr := key5(1)
	tb.Upsert(&kr, val(1), 1)
	hr := tb.Hint(&kr)
	var w keyWords
	w.from(&kr)
	br := &tb.buckets[hr.bi]
	i := br.find(int(hr.home), 0, &w)
	if i < 0 {
		t.Fatal("the reader's key is not in its first bucket")
	}
	br.slots[i].hdr.Add(1 << 32) // odd sequence: a writer inside
	// The writer's key, in a bucket locked by a writer that died.
	var kw Key
	for j := 2; ; j++ {
		kw = key5(j)
		if tb.Hint(&kw).bi != hr.bi {
			break
		}
	}
	tb.buckets[tb.Hint(&kw).bi].lock(tb)

	got := make(chan any, 2)
	go func() { got <- recovered(func() { tb.Lookup(&kr, 2) }) }()
	go func() { got <- recovered(func() { tb.Upsert(&kw, val(2), 2) }) }()
	tb.Abandon()
	if !tb.Abandoned() {
		t.Fatal("Abandoned() = false after Abandon")
	}
	for range 2 {
		select {
		case r := <-got:
			err, _ := r.(error)
			if !tb.WaitedIn(r) || !errors.Is(err, ErrAbandoned) {
				t.Errorf("a waiter ended with %v, want ErrAbandoned of this table", r)
			}
			if other.WaitedIn(r) {
				t.Error("WaitedIn = true for another table")
			}
			if _, ok := tb.FaultAt(r); ok {
				t.Error("FaultAt = true for a waiter's panic")
			}
		case <-time.After(time.Minute): // against a hang only
			t.Fatal("a waiter still waits a minute after Abandon")
		}
	}
}

//go:build linux

package conntrack

import (
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// openT opens a table file in a test's directory (tmpfs or not: the file
// is what is tested, not the memory behind it).
func openT(t *testing.T, path string, capacity int) (*Table, OpenInfo) {
	t.Helper()
	tb, info, err := Open(path, capacity, 0)
	if err != nil {
		t.Fatalf("Open(%s): %v", path, err)
	}
	return tb, info
}

// TestOpen_RoundTrip: entries written through one mapping are found, with
// their values and last-use times, by the next Open of the file (a process
// restart), and the table keeps its seed and id.
func TestOpen_RoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ct")
	a, info := openT(t, path, 16384) // 6 % full: no geometry evicts
	if info.Kept || info.Refused != nil {
		t.Fatalf("first Open: %+v, want a new table", info)
	}
	for i := range 1000 {
		k := key5(i)
		a.Upsert(&k, val(i), int64(1000+i))
	}
	id := a.FileID()
	a.unmap()

	b, info := openT(t, path, 16384)
	defer b.unmap()
	if !info.Kept || info.Entries != 1000 || info.Torn != 0 {
		t.Fatalf("second Open: %+v, want kept with 1000 entries", info)
	}
	if b.Len() != 1000 {
		t.Fatalf("Len() = %d after Open, want the 1000 entries found", b.Len())
	}
	if a.Memory().File != path || b.Memory().File != path {
		t.Errorf("Memory().File %q (new file) and %q (kept), want %q", a.Memory().File, b.Memory().File, path)
	}
	if b.FileID() != id || id == 0 {
		t.Fatalf("FileID %x, want %x (non-zero)", b.FileID(), id)
	}
	for i := range 1000 {
		k := key5(i)
		e, ok := b.Lookup(&k, 2000)
		if !ok || e.Value != val(i) || e.LastUse != int64(1000+i) {
			t.Fatalf("key %d: %+v %v, want %+v last %d", i, e, ok, val(i), 1000+i)
		}
	}
}

// TestOpen_Refused: a file of another magic, of a layout this binary
// does not read, of another boot, or with a corrupt header, is moved aside
// and the table starts empty (no error, no panic). (Another capacity is
// migrated: TestOpen_MigratesCapacity.)
func TestOpen_Refused(t *testing.T) {
	cases := map[string]struct {
		edit     func(b []byte)
		capacity int
	}{
		"magic":    {edit: func(b []byte) { copy(b, "notxlb!!") }},
		"layout":   {edit: func(b []byte) { relayout(b, fileLayout+1) }},
		"checksum": {edit: func(b []byte) { b[40] ^= 1 }},
		"boot":     {edit: func(b []byte) { b[80] ^= 1; reseal(b) }},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "ct")
			a, _ := openT(t, path, 4096)
			k := key5(1)
			a.Upsert(&k, val(1), 5)
			a.unmap()
			if c.edit != nil {
				f, err := os.OpenFile(path, os.O_RDWR, 0)
				if err != nil {
					t.Fatal(err)
				}
				b := make([]byte, fileHeaderSize)
				f.ReadAt(b, 0)
				c.edit(b)
				f.WriteAt(b, 0)
				f.Close()
			}
			capacity := 4096
			if c.capacity != 0 {
				capacity = c.capacity
			}
			tb, info := openT(t, path, capacity)
			defer tb.unmap()
			if info.Kept || !errors.Is(info.Refused, ErrForeignFile) || info.RefusedAs != path+".refused" {
				t.Fatalf("Open: %+v, want refused with ErrForeignFile", info)
			}
			if _, err := os.Stat(info.RefusedAs); err != nil {
				t.Fatalf("refused file not moved aside: %v", err)
			}
			if _, ok := tb.Lookup(&k, 5); ok {
				t.Fatal("refused table's entry found: want an empty start")
			}
			n := 0
			tb.Range(5, func(Key, Entry) bool { n++; return true })
			if n != 0 {
				t.Fatalf("%d entries after a refused file, want 0", n)
			}
			// The new file is good for the next process.
			tb.unmap()
			tb2, info := openT(t, path, capacity)
			defer tb2.unmap()
			if !info.Kept {
				t.Fatalf("reopening the new file: %+v, want kept", info)
			}
		})
	}
}

// relayout writes layout l into header b and reseals its checksum: a
// well-formed file of another layout version (another binary's).
func relayout(b []byte, l uint32) {
	binary.LittleEndian.PutUint32(b[8:], l)
	reseal(b)
}

func reseal(b []byte) {
	binary.LittleEndian.PutUint32(b[124:], crc32Castagnoli(b[:124]))
}

// TestOpen_TornSlotCleared: a slot a killed writer left with an odd
// sequence (and a bucket left locked) is cleared at Open; the other
// entries of its bucket stay and new keys go in.
func TestOpen_TornSlotCleared(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ct")
	a, _ := openT(t, path, 1024)
	// Keys of one bucket: find three.
	var keys []Key
	var hint Hint
	for i := 0; len(keys) < 3; i++ {
		k := key5(i)
		h := a.Hint(&k)
		if len(keys) == 0 {
			hint = h
		}
		if h.bi == hint.bi {
			keys = append(keys, k)
		}
	}
	for i := range keys {
		a.Upsert(&keys[i], val(i), 7)
	}
	b := &a.buckets[hint.bi]
	torn := -1
	for i := range slotsPerBucket {
		s := &b.slots[i]
		if h := s.hdr.Load(); h&hdrUsed != 0 && s.holds(wordsOf(&keys[1])) {
			s.hdr.Store(h + 1<<32) // a writer inside, then SIGKILL
			torn = i
		}
	}
	b.slots[0].hdr.Store(b.slots[0].hdr.Load() | lockBit)
	if torn < 0 {
		t.Fatal("key not found in its bucket")
	}
	a.unmap()

	tb, info := openT(t, path, 1024)
	defer tb.unmap()
	if !info.Kept || info.Torn != 1 || info.Entries != 2 {
		t.Fatalf("Open: %+v, want kept, 1 torn, 2 entries", info)
	}
	if _, ok := tb.Lookup(&keys[1], 7); ok {
		t.Fatal("torn entry found after Open")
	}
	for _, i := range []int{0, 2} {
		if e, ok := tb.Lookup(&keys[i], 7); !ok || e.Value != val(i) {
			t.Fatalf("key %d: %+v %v, want kept", i, e, ok)
		}
	}
	if tb.Len() != 2 {
		t.Fatalf("Len() = %d, want 2", tb.Len())
	}
	// Unlocked: a writer gets in (it would spin forever otherwise).
	if r := tb.Upsert(&keys[1], val(9), 8); r != Inserted {
		t.Fatalf("Upsert after repair: %v, want inserted", r)
	}
}

// TestOpen_Locked: a second Open of a file in use fails; the first table
// is untouched.
func TestOpen_Locked(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ct")
	a, _ := openT(t, path, 1024)
	defer a.unmap()
	if _, _, err := Open(path, 1024, 0); err == nil {
		t.Fatal("second Open of a file in use succeeded")
	}
}

// TestReset: Reset empties a table.
func TestReset(t *testing.T) {
	tb := mustNew(t, 1024)
	k := key5(3)
	tb.Upsert(&k, val(3), 1)
	tb.Reset()
	if _, ok := tb.Lookup(&k, 1); ok || tb.Len() != 0 {
		t.Fatalf("after Reset: entry found %v, Len %d; want none, 0", ok, tb.Len())
	}
}

func wordsOf(k *Key) *keyWords {
	var w keyWords
	w.from(k)
	return &w
}

// TestOpen_ReachRepaired: an entry stored beyond its home's reach (a
// writer killed between storing it and widening the reach) is found again
// after Open.
func TestOpen_ReachRepaired(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ct")
	a, _ := openT(t, path, 1024)
	var keys []Key
	var first Hint
	for i := 0; len(keys) < 2; i++ {
		k := key5(i)
		h := a.Hint(&k)
		if len(keys) == 0 {
			first = h
		}
		if h == first {
			keys = append(keys, k)
		}
	}
	for i := range keys {
		a.Upsert(&keys[i], val(i), 7)
	}
	b := &a.buckets[first.bi]
	if hdrReach(b.slots[first.home].hdr.Load()) == 0 {
		t.Fatal("two keys of one home, reach 0: setup wrong")
	}
	b.setReach(int(first.home), 0)
	if _, ok := a.Lookup(&keys[1], 7); ok {
		t.Fatal("entry beyond its reach found before repair: setup wrong")
	}
	a.unmap()

	tb, _ := openT(t, path, 1024)
	defer tb.unmap()
	for i := range keys {
		if e, ok := tb.Lookup(&keys[i], 7); !ok || e.Value != val(i) {
			t.Fatalf("key %d after Open: %+v %v, want found", i, e, ok)
		}
	}
}

// BenchmarkTableFile is BenchmarkTable's 4M table kept in a file (Open) in
// $XLB_CT_BENCH_DIR, by default /dev/shm (tmpfs, like /run): a shared
// mapping of the page cache, whose pages are huge only where the tmpfs
// allows it (mount option huge=), next to the anonymous mapping of New.
func BenchmarkTableFile(b *testing.B) {
	dir := os.Getenv("XLB_CT_BENCH_DIR")
	if dir == "" {
		dir = "/dev/shm"
	}
	benchTable(b, []int{1 << 22}, func(size int) *Table {
		d, err := os.MkdirTemp(dir, "xlb-ct-bench")
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { os.RemoveAll(d) })
		tb, _, err := Open(filepath.Join(d, "ct"), size, 0)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(tb.unmap)
		b.Logf("memory %+v", tb.Memory())
		return tb
	})
}

// TestOpen_RepairLeavesBucketsUnlocked: a bucket left locked by a killed
// writer, whose slot 0 reach the repair must change, is unlocked after
// Open (fitting the reach rewrites slot 0's header as a lock holder does,
// which once left the lock set and every writer of that bucket spinning).
func TestOpen_RepairLeavesBucketsUnlocked(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ct")
	a, _ := openT(t, path, 1024)
	b := &a.buckets[0]
	b.lock(a)
	b.setReach(0, slotMask) // no key of home 0 that far: repair lowers it
	a.unmap()

	tb, _ := openT(t, path, 1024)
	defer tb.unmap()
	for bi := range tb.buckets {
		if h := tb.buckets[bi].slots[0].hdr.Load(); h&lockBit != 0 || bi == 0 && hdrReach(h) != 0 {
			t.Fatalf("bucket %d after Open: slot 0 header %#x, want unlocked (reach 0)", bi, h)
		}
	}
}

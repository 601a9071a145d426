//go:build linux

package conntrack

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"xlb/internal/nettest"
)

// otherLayout is the layout and slots per bucket of the build this one is
// not: a file the other binary writes. Run with and without the tag
// xlb_ct_layout_alt, the migration tests cover both directions.
func otherLayout() (layout, perBucket uint32) {
	if fileLayout == layout2 {
		return layoutTest4, 4
	}
	return layout2, 8
}

// editHeader reads the header of the file at path, lets edit change it,
// reseals its checksum and writes it back.
func editHeader(t testing.TB, path string, edit func(h *fileHeader)) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, fileHeaderSize)
	if _, err := f.ReadAt(b, 0); err != nil {
		t.Fatal(err)
	}
	h, err := unmarshalHeader(b)
	if err != nil {
		t.Fatal(err)
	}
	edit(&h)
	if _, err := f.WriteAt(h.marshal(), 0); err != nil {
		t.Fatal(err)
	}
}

// relabel makes the table file at path one of the other build's layout:
// the slots are encoded alike in both, so the same bytes read as that
// layout's table of as many slots in buckets of its size.
func relabel(t testing.TB, path string) {
	t.Helper()
	layout, per := otherLayout()
	editHeader(t, path, func(h *fileHeader) {
		h.buckets = h.buckets * uint64(h.perBucket) / uint64(per)
		h.layout, h.perBucket = layout, per
	})
}

// migrationValue is what the migration tests store for key i: values
// with and without the half-open mark, distinct last uses.
func migrationValue(i int) (Value, int64) {
	v := val(i)
	v.HalfOpen = i%3 == 0
	v.IdleSec = 600
	return v, int64(10_000 + i)
}

// TestOpen_MigratesLayout: a table file of the other build's layout (4
// slots per bucket for this one, 8 for the test build) is migrated into a
// new file of this binary's layout: every live entry with its value, its
// half-open mark and its last use; its table ID kept; a torn slot and an
// expired entry left behind. The next Open keeps the new file as it is.
func TestOpen_MigratesLayout(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ct")
	a, _ := openT(t, path, 4096)
	const n = 400 // a tenth: neither geometry evicts but rarely
	for i := range n {
		k := key5(i)
		v, last := migrationValue(i)
		a.Upsert(&k, v, last)
	}
	// What the old table holds (four-slot buckets may have evicted a
	// half-open entry or two).
	held := make([]bool, n)
	live := 0
	for i := range n {
		k := key5(i)
		_, held[i] = a.Lookup(&k, 20_000)
		if held[i] && i != 7 {
			live++
		}
	}
	expiredKey := key5(n)
	a.Upsert(&expiredKey, Value{Backend: 1, IdleSec: 1}, 100) // gone at 1100
	// A writer inside key 7's slot when it was killed.
	tornKey := key5(7)
	if !tear(a, &tornKey) {
		t.Fatal("key 7 not found to tear")
	}
	id := a.FileID()
	a.unmap()
	relabel(t, path)
	from, _ := otherLayout()

	b, info, err := Open(path, 4096, 20_000)
	if err != nil {
		t.Fatal(err)
	}
	if !info.Migrated || info.Kept || info.Refused != nil || info.FromLayout != from ||
		info.FromCapacity != 4096 || info.Entries != live || info.Torn != 1 || info.Dropped != 0 {
		t.Fatalf("Open: %+v, want migrated from layout %#x, %d entries, 1 torn, none dropped", info, from, live)
	}
	if b.FileID() != id {
		t.Errorf("FileID %x after migration, want the old table's %x", b.FileID(), id)
	}
	if b.Len() != live {
		t.Errorf("Len %d after migration, want %d", b.Len(), live)
	}
	for i := range n {
		k := key5(i)
		e, ok := b.Lookup(&k, 20_000)
		if i == 7 || !held[i] {
			if ok {
				t.Errorf("key %d migrated, torn or not in the old table: %+v", i, e)
			}
			continue
		}
		v, last := migrationValue(i)
		if !ok || e.Value != v || e.LastUse != last {
			t.Fatalf("key %d after migration: %+v %v, want %+v last use %d", i, e, ok, v, last)
		}
	}
	if _, ok := b.Lookup(&expiredKey, 100); ok {
		t.Error("an entry expired at the migration was carried")
	}
	if _, err := os.Stat(path + ".new"); !os.IsNotExist(err) {
		t.Errorf("%s.new left behind: %v", path, err)
	}
	b.unmap()

	c, info := openT(t, path, 4096)
	defer c.unmap()
	if !info.Kept || info.Entries != live || c.FileID() != id {
		t.Fatalf("Open after the migration: %+v, id %x; want kept with %d entries, id %x", info, c.FileID(), live, id)
	}
}

// tear makes k's slot look like one a killed writer was inside (odd
// sequence) and reports whether k was found.
func tear(tb *Table, k *Key) bool {
	h := tb.Hint(k)
	for _, bi := range []uint64{h.bi, h.bi2} {
		bk := &tb.buckets[bi]
		for i := range slotsPerBucket {
			s := &bk.slots[i]
			if hd := s.hdr.Load(); hd&hdrUsed != 0 && s.holds(wordsOf(k)) {
				s.hdr.Store(hd + 1<<32)
				return true
			}
		}
	}
	return false
}

// TestOpen_MigratesCapacity: a file of this layout and another capacity
// (conntrack_capacity changed across a restart) is migrated: a larger
// table carries every entry; a smaller one that holds them all carries
// every entry; a smaller one they overflow carries what fits and counts
// the rest, every carried entry intact.
func TestOpen_MigratesCapacity(t *testing.T) {
	for _, c := range []struct {
		name        string
		from, to, n int
		wantAll     bool
	}{
		{"grow", 4096, 65536, 2000, true},
		{"shrink, fits", 65536, 4096, 300, true}, // 7 %: no geometry evicts
		{"shrink, overflows", 65536, 1024, 20000, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "ct")
			a, _ := openT(t, path, c.from)
			for i := range c.n {
				k := key5(i)
				v, last := migrationValue(i)
				a.Upsert(&k, v, last)
			}
			id, before := a.FileID(), a.Len() // the old table may have evicted a few
			a.unmap()
			b, info, err := Open(path, c.to, 20_000)
			if err != nil {
				t.Fatal(err)
			}
			defer b.unmap()
			if !info.Migrated || info.FromLayout != fileLayout || info.FromCapacity != c.from || b.Capacity() != c.to || b.FileID() != id {
				t.Fatalf("Open: %+v, capacity %d, id %x; want migrated from capacity %d to %d, id %x", info, b.Capacity(), b.FileID(), c.from, c.to, id)
			}
			if info.Entries+info.Dropped != before || b.Len() != info.Entries {
				t.Errorf("Open: %+v, Len %d; want entries + dropped = %d, Len = entries", info, b.Len(), before)
			}
			if c.wantAll && info.Entries != before {
				t.Errorf("Open: %+v, want all %d entries carried", info, before)
			}
			if !c.wantAll && (info.Entries > c.to || info.Dropped < before-c.to) {
				t.Errorf("Open: %+v, want at most %d entries carried, at least %d dropped", info, c.to, before-c.to)
			}
			found := 0
			for i := range c.n {
				k := key5(i)
				e, ok := b.Lookup(&k, 20_000)
				if !ok {
					continue
				}
				found++
				if v, last := migrationValue(i); e.Value != v || e.LastUse != last {
					t.Fatalf("key %d: %+v, want %+v last use %d", i, e, v, last)
				}
			}
			if found != info.Entries {
				t.Errorf("%d keys found, want the %d carried", found, info.Entries)
			}
			if s := b.Stats(); s.Inserts != uint64(info.Entries) || s.Evictions != 0 {
				t.Errorf("stats after migration %+v: want the %d carried entries as inserts, nothing else", s, info.Entries)
			}
		})
	}
}

// TestOpen_HostileHeaders: a header with a good checksum whose fields
// describe no table in the file (geometry out of bounds, overflowing,
// not the file's size, unknown layout or clock) is refused and the table
// starts empty; nothing is read out of range, nothing panics. Headers
// whose odd but consistent geometry the reader can follow (one slot per
// bucket, 64) migrate.
func TestOpen_HostileHeaders(t *testing.T) {
	const capacity = 1024 // buckets * perBucket of the file Open makes
	slots := uint64(capacity)
	refused := map[string]func(h *fileHeader){
		"layout 0":                    func(h *fileHeader) { h.layout = 0 },
		"layout 3":                    func(h *fileHeader) { h.layout = 3 },
		"clock":                       func(h *fileHeader) { h.clock = 2 },
		"slot size 32":                func(h *fileHeader) { h.slotSize = 32; h.buckets *= 2 },
		"slot size 2^31":              func(h *fileHeader) { h.slotSize = 1 << 31 },
		"no slots per bucket":         func(h *fileHeader) { h.perBucket = 0 },
		"3 slots per bucket":          func(h *fileHeader) { h.perBucket = 3 },
		"2^31 slots per bucket":       func(h *fileHeader) { h.perBucket = 1 << 31; h.buckets = 1 },
		"no buckets":                  func(h *fileHeader) { h.buckets = 0 },
		"3 buckets":                   func(h *fileHeader) { h.buckets = 3 },
		"2^40 buckets":                func(h *fileHeader) { h.buckets = 1 << 40 },
		"2^63 buckets":                func(h *fileHeader) { h.buckets = 1 << 63 },
		"overflowing product":         func(h *fileHeader) { h.buckets, h.perBucket = 1<<58, 64 },
		"more slots than the file":    func(h *fileHeader) { h.buckets *= 2 },
		"fewer slots than the file":   func(h *fileHeader) { h.buckets /= 2 },
		"capacity beyond MaxCapacity": func(h *fileHeader) { h.buckets, h.perBucket = MaxCapacity/4, 8 },
	}
	for name, edit := range refused {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "ct")
			a, _ := openT(t, path, capacity)
			a.unmap()
			editHeader(t, path, edit)
			b, info := openT(t, path, capacity)
			defer b.unmap()
			if info.Kept || info.Migrated || !errors.Is(info.Refused, ErrForeignFile) {
				t.Fatalf("Open: %+v, want refused", info)
			}
			if b.Len() != 0 {
				t.Errorf("Len %d, want an empty start", b.Len())
			}
		})
	}
	for _, per := range []uint32{1, 64} {
		t.Run("consistent geometry", func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "ct")
			a, _ := openT(t, path, capacity)
			k := key5(3)
			a.Upsert(&k, val(3), 50)
			a.unmap()
			editHeader(t, path, func(h *fileHeader) { h.perBucket, h.buckets = per, slots/uint64(per) })
			b, info := openT(t, path, capacity)
			defer b.unmap()
			if !info.Migrated || info.Entries != 1 {
				t.Fatalf("%d slots per bucket: Open %+v, want migrated with 1 entry", per, info)
			}
			if e, ok := b.Lookup(&k, 50); !ok || e.Value != val(3) {
				t.Errorf("%d slots per bucket: %+v %v after migration, want the entry", per, e, ok)
			}
		})
	}
	// 2^58 buckets of 64 slots of 64 bytes: a size that wraps to 0 in 64
	// bits, in a file of just the header span.
	t.Run("overflowing product, file of its wrapped size", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "ct")
		a, _ := openT(t, path, capacity)
		a.unmap()
		editHeader(t, path, func(h *fileHeader) { h.buckets, h.perBucket = 1<<58, 64 })
		if err := os.Truncate(path, fileHeaderSpan); err != nil {
			t.Fatal(err)
		}
		b, info := openT(t, path, capacity)
		defer b.unmap()
		if info.Migrated || !errors.Is(info.Refused, ErrForeignFile) {
			t.Fatalf("Open: %+v, want refused", info)
		}
	})
	t.Run("truncated", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "ct")
		a, _ := openT(t, path, capacity)
		a.unmap()
		if err := os.Truncate(path, fileHeaderSpan+100); err != nil {
			t.Fatal(err)
		}
		b, info := openT(t, path, capacity)
		defer b.unmap()
		if !errors.Is(info.Refused, ErrForeignFile) {
			t.Fatalf("Open: %+v, want refused", info)
		}
	})
}

// FuzzOpenHeader: whatever a header with a good checksum and this boot
// says, over whatever bytes follow it, Open refuses or migrates; it never
// fails, panics or reads beyond the file.
func FuzzOpenHeader(f *testing.F) {
	f.Add(uint32(layout2), uint32(64), uint32(8), uint32(1), uint64(2), int64(0), []byte{2, 0, 0, 0, 2})
	f.Add(uint32(layoutTest4), uint32(64), uint32(4), uint32(1), uint64(4), int64(0), []byte{0xff})
	f.Add(uint32(layout2), uint32(64), uint32(1), uint32(1), uint64(1<<20), int64(-64), []byte{})
	f.Add(uint32(layout2), uint32(1<<31), uint32(1<<31), uint32(1), uint64(1<<63), int64(64), []byte{1})
	dir := f.TempDir()
	boot := bootID()
	f.Fuzz(func(t *testing.T, layout, slotSize, perBucket, clock uint32, buckets uint64, delta int64, body []byte) {
		h := fileHeader{layout: layout, slotSize: slotSize, perBucket: perBucket, clock: clock, buckets: buckets, boot: boot, id: 7}
		// The file: the header, then as many bytes as it claims (up to
		// 1 MiB), off by delta (within ±1 MiB), the first filled with body.
		claimed := min(buckets, 1<<20) * min(uint64(perBucket), 1<<20) * min(uint64(slotSize), 1<<20)
		size := int64(fileHeaderSpan) + int64(min(claimed, 1<<20)) + max(min(delta, 1<<20), -(1<<20))
		size = max(size, fileHeaderSize)
		path := filepath.Join(dir, "ct")
		os.Remove(path)
		os.Remove(path + ".refused")
		file, err := os.Create(path)
		if err != nil {
			t.Fatal(err)
		}
		file.WriteAt(h.marshal(), 0)
		if len(body) > 0 && size > fileHeaderSpan {
			file.WriteAt(body[:min(int64(len(body)), size-fileHeaderSpan)], fileHeaderSpan)
		}
		if err := file.Truncate(size); err != nil {
			t.Fatal(err)
		}
		file.Close()
		tb, info, err := Open(path, MinCapacity, 1000)
		if err != nil {
			t.Fatalf("Open: %v (%+v)", err, info)
		}
		defer tb.unmap()
		if info.Refused == nil && !info.Migrated && !info.Kept {
			t.Fatalf("Open of an existing file: %+v, want refused, migrated or kept", info)
		}
	})
}

// TestOpen_MigrationWithoutRoom: when the file system cannot hold the old
// file and the new one together (a 3 MiB tmpfs: the old file, 2 MiB of
// header span and 256 KiB of buckets, fits; a second does not), the old
// file is refused for lack of room, moved aside, and Open reports it;
// nothing is left half made.
func TestOpen_MigrationWithoutRoom(t *testing.T) {
	nettest.RequireRootTo(t, "mount a tmpfs of a given size")
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=3m"); err != nil {
		t.Fatalf("mounting a tmpfs on %s: %v", dir, err)
	}
	t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
	path := filepath.Join(dir, "ct")
	a, _ := openT(t, path, 4096) // 2 MiB header span + 256 KiB
	k := key5(1)
	a.Upsert(&k, val(1), 5)
	a.unmap()
	tb, info, err := Open(path, 8192, 5) // needs 2.5 MiB more
	if err == nil {
		tb.unmap()
	}
	if info.Migrated || !errors.Is(info.Refused, ErrForeignFile) || !errors.Is(info.Refused, unix.ENOSPC) || info.RefusedAs != path+".refused" {
		t.Fatalf("Open: %+v, want refused for lack of room (ENOSPC)", info)
	}
	if _, err := os.Stat(info.RefusedAs); err != nil {
		t.Errorf("old file not moved aside: %v", err)
	}
	if _, err := os.Stat(path + ".new"); !os.IsNotExist(err) {
		t.Errorf("half-made %s.new left behind: %v", path, err)
	}
	// The old file aside keeps its memory: a new one does not fit beside
	// it either, and Open says so (the caller then keeps its table in
	// anonymous memory). Once it is removed, a start gets its file.
	if err == nil {
		t.Fatalf("Open: a new table fitted beside the refused file in a 3 MiB tmpfs: setup wrong")
	}
	if err := os.Remove(info.RefusedAs); err != nil {
		t.Fatal(err)
	}
	tb, info = openT(t, path, 8192)
	defer tb.unmap()
	if info.Refused != nil || info.Kept || info.Migrated {
		t.Errorf("Open after the refused file was removed: %+v, want a new file", info)
	}
}

// BenchmarkOpenMigrate: Open migrating a table file of the other build's
// layout holding 1M live entries (2M capacity, half full) into this
// binary's layout, in $XLB_CT_BENCH_DIR (default /dev/shm, tmpfs): what a
// start after an upgrade that changes the layout adds. Each round opens a
// fresh copy of the old file (copied outside the timing).
func BenchmarkOpenMigrate(b *testing.B) {
	dir := os.Getenv("XLB_CT_BENCH_DIR")
	if dir == "" {
		dir = "/dev/shm"
	}
	d, err := os.MkdirTemp(dir, "xlb-ct-migrate")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(d) })
	const capacity, entries = 1 << 21, 1 << 20
	tmpl := filepath.Join(d, "template")
	a, _, err := Open(tmpl, capacity, 0)
	if err != nil {
		b.Fatal(err)
	}
	for i := range entries {
		k := key5(i)
		a.Upsert(&k, val(i), entries)
	}
	held := a.Len()
	a.unmap()
	relabel(b, tmpl)
	path := filepath.Join(d, "ct")
	var info OpenInfo
	for b.Loop() {
		b.StopTimer()
		os.Remove(path)
		if err := copyFile(tmpl, path); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		var tb *Table
		tb, info, err = Open(path, capacity, entries)
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		tb.unmap()
		b.StartTimer()
	}
	if !info.Migrated || info.Entries+info.Dropped != held {
		b.Fatalf("Open: %+v, want migrated with %d entries", info, held)
	}
	b.ReportMetric(float64(info.Entries), "entries")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(info.Entries), "ns/entry")
}

func copyFile(from, to string) error {
	b, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	return os.WriteFile(to, b, 0o600)
}

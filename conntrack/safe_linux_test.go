//go:build linux

package conntrack

import (
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// outsideFile is a file outside the table's directory with content the
// test checks stays.
func outsideFile(t *testing.T, dir, name string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte("root's own"), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func untouched(t *testing.T, p string) {
	t.Helper()
	if b, err := os.ReadFile(p); err != nil || string(b) != "root's own" {
		t.Errorf("%s was written through a link: %.40q, %v", p, b, err)
	}
}

// regularOwn asserts that p is a regular 0600 file of the process's uid.
func regularOwn(t *testing.T, p string) {
	t.Helper()
	fi, err := os.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	if !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o600 || int(st.Uid) != os.Geteuid() {
		t.Errorf("%s is %s of uid %d, want a regular 0600 file of uid %d", p, fi.Mode(), st.Uid, os.Geteuid())
	}
}

// TestOpen_LinksNotFollowed: links planted as the table file and as its
// temporary (path.new), pointing at files outside the directory, leave
// those files as they were: the link at path is refused (ErrUnsafe) and
// moved aside as itself, the one at path.new is replaced, and the table
// file is a regular 0600 file of the process's own, good for the next
// Open. (Before, the first was opened through the link and the second
// truncated.)
func TestOpen_LinksNotFollowed(t *testing.T) {
	out, dir := t.TempDir(), t.TempDir()
	viaTable := outsideFile(t, out, "shadow")
	viaNew := outsideFile(t, out, "passwd")
	path := filepath.Join(dir, "conntrack")
	if err := os.Symlink(viaTable, path); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(viaNew, path+".new"); err != nil {
		t.Fatal(err)
	}
	tb, info, err := Open(path, 1024, 0)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	untouched(t, viaTable)
	untouched(t, viaNew)
	if !errors.Is(info.Refused, ErrUnsafeFile) || info.RefusedAs != path+".refused" {
		t.Errorf("Open: %+v, want the link refused as unsafe and moved aside", info)
	}
	if fi, err := os.Lstat(info.RefusedAs); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("%s: %v, want the link itself moved there", info.RefusedAs, err)
	}
	regularOwn(t, path)
	tb.unmap()
	tb, info = openT(t, path, 1024)
	tb.unmap()
	if !info.Kept {
		t.Errorf("reopening: %+v, want kept", info)
	}

	// A fresh directory, a link only at path.new: the new file is made
	// beside it, the link's target stays.
	dir = t.TempDir()
	path = filepath.Join(dir, "conntrack")
	if err := os.Symlink(viaNew, path+".new"); err != nil {
		t.Fatal(err)
	}
	tb, _ = openT(t, path, 1024)
	tb.unmap()
	untouched(t, viaNew)
	regularOwn(t, path)
	if _, err := os.Lstat(path + ".new"); !os.IsNotExist(err) {
		t.Errorf("%s.new left: %v", path, err)
	}
}

// TestOpen_UnsafeFileRefused: a table file that is in every other way
// one to keep is refused, moved aside and never mapped when group or
// others may write it, or (as root) when another uid owns it.
func TestOpen_UnsafeFileRefused(t *testing.T) {
	edits := map[string]func(p string) error{
		"mode 0666": func(p string) error { return os.Chmod(p, 0o666) },
		"mode 0620": func(p string) error { return os.Chmod(p, 0o620) },
	}
	if os.Geteuid() == 0 {
		edits["owned by 65534"] = func(p string) error { return os.Chown(p, 65534, 65534) }
	}
	for name, edit := range edits {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "conntrack")
			a, _ := openT(t, path, 1024)
			k := key5(1)
			a.Upsert(&k, val(1), 5)
			a.unmap()
			if err := edit(path); err != nil {
				t.Fatal(err)
			}
			tb, info := openT(t, path, 1024)
			defer tb.unmap()
			if info.Kept || !errors.Is(info.Refused, ErrUnsafeFile) {
				t.Fatalf("Open: %+v, want refused as unsafe", info)
			}
			if _, ok := tb.Lookup(&k, 5); ok {
				t.Error("the refused file's entry is in the table")
			}
			regularOwn(t, path)
		})
	}
}

// TestOpen_RandomSlotsCleared: random bytes over half the slot region of
// a kept table (its header intact) leave no entry there: every used slot
// whose key could not be where it is is cleared (Misplaced) or torn; the
// entries of the untouched half are all kept. (Before, thousands of the
// random slots were kept as live entries.)
func TestOpen_RandomSlotsCleared(t *testing.T) {
	path := filepath.Join(t.TempDir(), "conntrack")
	const capacity = 16384
	a, _ := openT(t, path, capacity)
	n := uint64(len(a.buckets))
	var keep []Key
	for i := range 2000 {
		k := key5(i)
		a.Upsert(&k, val(i), 5)
		if h := a.Hint(&k); h.bi >= n/2 && h.bi2 >= n/2 {
			keep = append(keep, k)
		}
	}
	// The entries stored in the second half, wherever their keys' other
	// bucket is: those the damage leaves.
	survivors := 0
	a.Range(5, func(_ Key, e Entry) bool {
		if uint64(e.ref-1)/slotsPerBucket >= n/2 {
			survivors++
		}
		return true
	})
	a.unmap()
	if len(keep) < 100 {
		t.Fatalf("only %d keys wholly in the second half", len(keep))
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	junk := make([]byte, int(n/2)*int(slotsPerBucket)*fileSlotSize)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range junk {
		junk[i] = byte(r.Uint32())
	}
	if _, err := f.WriteAt(junk, fileHeaderSpan); err != nil {
		t.Fatal(err)
	}
	f.Close()

	tb, info := openT(t, path, capacity)
	defer tb.unmap()
	if !info.Kept {
		t.Fatalf("Open: %+v, want kept (the header is intact)", info)
	}
	for i, k := range keep {
		if _, ok := tb.Lookup(&k, 5); !ok {
			t.Fatalf("key %d of the untouched half lost", i)
		}
	}
	// About half the random slots are used, half of those torn; a random
	// slot is where its key hashes with odds of 1 in 16384.
	junkSlots := len(junk) / fileSlotSize
	if info.Misplaced < junkSlots/8 {
		t.Errorf("%d misplaced slots cleared of %d random ones", info.Misplaced, junkSlots)
	}
	if extra := info.Entries - survivors; extra > 8 || extra < 0 {
		t.Errorf("%d entries kept, %d beyond the %d of the untouched half (random slots kept as entries; %+v)", info.Entries, extra, survivors, info)
	}
}

//go:build linux

package conntrack

import (
	"encoding/binary"
	"fmt"
	"io"
	"os"
)

// migrate copies the live entries of old, a checked table file of another
// layout or capacity (header oh), into a new file of this binary's layout
// with n buckets, which keeps oh's table ID (the control plane's state
// names the table by it, and its refs are what the entries record). The
// new file is made beside the old one (path+".new") and renamed over it
// once full, so a process killed meanwhile leaves the old file in place
// for the next. When the new file cannot be made (no room for both) or
// the old one cannot be read, the old one is refused as any other.
func migrate(path string, old *os.File, oh fileHeader, n, size int, boot [16]byte, now int64, info OpenInfo) (*Table, OpenInfo, error) {
	from := fmt.Sprintf("layout %d (%#x), %d entries", oh.layout, oh.layout, oh.buckets*uint64(oh.perBucket))
	tmp := path + ".new"
	f, hdr, err := create(tmp, n, size, boot, oh.id)
	if err != nil {
		return refuse(path, old, n, size, boot, info, fmt.Errorf("%w: cannot migrate its %s: %w", ErrForeignFile, from, err))
	}
	t, err := mapFile(f, n, size, hdr)
	if err != nil {
		os.Remove(tmp)
		return refuse(path, old, n, size, boot, info, fmt.Errorf("%w: cannot migrate its %s: %w", ErrForeignFile, from, err))
	}
	live := 0
	var torn int
	if gerr := Guard(t, func() {
		torn, err = readSlots(old, oh, func(k *Key, val uint64, last int64) {
			if expired(val, last, now) {
				return
			}
			live++
			t.Upsert(k, unpack(val), last)
		})
	}); gerr != nil {
		err = gerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		t.unmap()
		os.Remove(tmp)
		return refuse(path, old, n, size, boot, info, fmt.Errorf("%w: cannot migrate its %s: %w", ErrForeignFile, from, err))
	}
	// The old file is unlinked by the rename; its lock goes with it.
	old.Close()
	t.mem.File = path
	info.Migrated, info.FromLayout, info.FromCapacity = true, oh.layout, int(oh.buckets*uint64(oh.perBucket))
	info.Torn = torn
	if err := Guard(t, func() {
		t.recount()
		t.Range(now, func(Key, Entry) bool { info.Entries++; return true })
	}); err != nil {
		t.unmap()
		return nil, info, err
	}
	info.Dropped = max(live-info.Entries, 0)
	return t, info, nil
}

// readSlots calls fn with every used slot of a table file of header h
// (checked: its size is what h says) whose writer had finished (even
// sequence), and returns how many it skipped as torn. It reads with plain
// reads, a chunk at a time, never through a mapping: the file's size
// bounds every read, and a damaged file is an error, not a fault.
//
// A slot of every layout this binary reads is eight little-endian words:
// header (seq:32 in the high half, used bit 1), five key words, the packed
// value, the last use in ms. Which bucket a slot is in does not matter
// here: every key is hashed anew into the new table.
func readSlots(f *os.File, h fileHeader, fn func(k *Key, val uint64, last int64)) (torn int, err error) {
	const chunk = 1 << 20 // a multiple of every slot size
	total := int64(h.buckets) * int64(h.perBucket) * int64(h.slotSize)
	buf := make([]byte, min(chunk, total))
	le := binary.LittleEndian
	for off := int64(0); off < total; {
		b := buf[:min(int64(len(buf)), total-off)]
		if _, err := f.ReadAt(b, fileHeaderSpan+off); err == io.EOF {
			return torn, fmt.Errorf("%s: shorter than its header says", f.Name())
		} else if err != nil {
			return torn, err
		}
		off += int64(len(b))
		for s := 0; s+fileSlotSize <= len(b); s += int(h.slotSize) {
			hdr := le.Uint64(b[s:])
			if hdr&hdrUsed == 0 {
				continue
			}
			if hdrSeq(hdr)&1 != 0 {
				torn++
				continue
			}
			var w keyWords
			for j := range w {
				w[j] = le.Uint64(b[s+8+8*j:])
			}
			k := w.key()
			fn(&k, le.Uint64(b[s+48:]), int64(le.Uint64(b[s+56:])))
		}
	}
	return torn, nil
}

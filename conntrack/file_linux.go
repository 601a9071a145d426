//go:build linux

package conntrack

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"runtime"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// A table file keeps a table across processes: a header, then the buckets
// exactly as a Table holds them, mapped MAP_SHARED. On a memory-backed
// file system (tmpfs, /run) the mapping is the page cache itself: every
// store a worker makes is in the file at once, so a process killed by
// SIGKILL leaves the table as it was, but for the slots it was writing
// (odd sequence), which Open clears.
//
// The header takes the first fileHeaderSpan bytes, so that the buckets
// start on a huge-page boundary of the file (shmem maps huge pages only at
// aligned file offsets); the rest of the span is never written.
const (
	fileMagic = "xlb-ct\x00\x01"
	// The layout of header, slots and buckets, and of what an entry
	// means, is fileLayout (layout.go: bump on any change).
	fileHeaderSpan = hugePage
	fileHeaderSize = 128
	fileClockMono  = 1 // last-use times are CLOCK_MONOTONIC ms
	// fileSlotSize is a slot's size in every layout this binary reads.
	fileSlotSize = 64
	// maxFilePerBucket bounds the slots per bucket a header may claim.
	maxFilePerBucket = 64
)

// fileHeader is the header's content, little endian at offset 0:
//
//	0   magic [8]
//	8   layout u32, slot size u32, slots per bucket u32, clock u32
//	24  buckets u64
//	32  seed [6]u64
//	80  boot id [16] (/proc/sys/kernel/random/boot_id: the clock's epoch)
//	96  table id u64 (random, names this table to the state kept beside it)
//	104 reserved [20]
//	124 crc32c of bytes 0..124
type fileHeader struct {
	layout, slotSize, perBucket, clock uint32
	buckets                            uint64
	seed                               [6]uint64
	boot                               [16]byte
	id                                 uint64
}

var crcTable = crc32.MakeTable(crc32.Castagnoli)

func (h *fileHeader) marshal() []byte {
	b := make([]byte, fileHeaderSize)
	copy(b, fileMagic)
	le := binary.LittleEndian
	le.PutUint32(b[8:], h.layout)
	le.PutUint32(b[12:], h.slotSize)
	le.PutUint32(b[16:], h.perBucket)
	le.PutUint32(b[20:], h.clock)
	le.PutUint64(b[24:], h.buckets)
	for i, s := range h.seed {
		le.PutUint64(b[32+8*i:], s)
	}
	copy(b[80:96], h.boot[:])
	le.PutUint64(b[96:], h.id)
	le.PutUint32(b[124:], crc32.Checksum(b[:124], crcTable))
	return b
}

// unmarshalHeader checks magic and checksum and returns the header.
func unmarshalHeader(b []byte) (fileHeader, error) {
	var h fileHeader
	if len(b) < fileHeaderSize {
		return h, fmt.Errorf("%w: shorter than a header", ErrForeignFile)
	}
	if string(b[:8]) != fileMagic {
		return h, fmt.Errorf("%w: bad magic %q", ErrForeignFile, b[:8])
	}
	le := binary.LittleEndian
	if got, want := le.Uint32(b[124:]), crc32.Checksum(b[:124], crcTable); got != want {
		return h, fmt.Errorf("%w: header checksum %08x, want %08x", ErrForeignFile, got, want)
	}
	h.layout, h.slotSize, h.perBucket, h.clock = le.Uint32(b[8:]), le.Uint32(b[12:]), le.Uint32(b[16:]), le.Uint32(b[20:])
	h.buckets = le.Uint64(b[24:])
	for i := range h.seed {
		h.seed[i] = le.Uint64(b[32+8*i:])
	}
	copy(h.boot[:], b[80:96])
	h.id = le.Uint64(b[96:])
	return h, nil
}

// check reports why a well-formed header (unmarshalHeader) describes no
// table this binary can read in a file of size bytes on this boot: an
// unknown layout, another clock or boot, or a geometry out of bounds or
// not that of the file's size. Everything a reader of the file relies on
// is bounded here, checksum or not.
func (h *fileHeader) check(size int64, boot [16]byte) error {
	switch {
	case !readableLayout(h.layout):
		return fmt.Errorf("%w: layout %d (%#x), this binary's is %d and it reads %d and %#x", ErrForeignFile,
			h.layout, h.layout, fileLayout, layout2, layoutTest4)
	case h.clock != fileClockMono:
		return fmt.Errorf("%w: clock %d", ErrForeignFile, h.clock)
	case h.boot != boot:
		return fmt.Errorf("%w: written before the last reboot", ErrForeignFile)
	case h.slotSize != fileSlotSize:
		return fmt.Errorf("%w: slot size %d, layout %d has %d", ErrForeignFile, h.slotSize, h.layout, fileSlotSize)
	case h.perBucket == 0 || h.perBucket > maxFilePerBucket || h.perBucket&(h.perBucket-1) != 0:
		return fmt.Errorf("%w: %d slots per bucket", ErrForeignFile, h.perBucket)
	case h.buckets == 0 || h.buckets&(h.buckets-1) != 0 || h.buckets > MaxCapacity ||
		h.buckets*uint64(h.perBucket) > MaxCapacity: // no overflow: both bounded first
		return fmt.Errorf("%w: %d buckets of %d slots", ErrForeignFile, h.buckets, h.perBucket)
	}
	// Bounded above: at most MaxCapacity slots of 64 bytes.
	if want := int64(fileHeaderSpan) + int64(h.buckets)*int64(h.perBucket)*int64(h.slotSize); size != want {
		return fmt.Errorf("%w: %d bytes, its header says %d", ErrForeignFile, size, want)
	}
	return nil
}

// current reports whether a checked header is this binary's layout and
// geometry with n buckets: a table to take over as it is.
func (h *fileHeader) current(n int) bool {
	return h.layout == fileLayout && h.slotSize == uint32(unsafe.Sizeof(slot{})) &&
		h.perBucket == slotsPerBucket && h.buckets == uint64(n)
}

// bootID is this boot's identity: CLOCK_MONOTONIC restarts with it.
func bootID() [16]byte {
	var id [16]byte
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return id
	}
	hex := bytes.ReplaceAll(bytes.TrimSpace(b), []byte("-"), nil)
	for i := 0; i < 16 && 2*i+1 < len(hex); i++ {
		id[i] = unhex(hex[2*i])<<4 | unhex(hex[2*i+1])
	}
	return id
}

func unhex(c byte) byte {
	switch {
	case c >= '0' && c <= '9':
		return c - '0'
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10
	}
	return 0
}

// Open returns a table of at least capacity entries kept in the file at
// path, on a memory-backed file system: the table a previous process left
// there when its header matches (magic, layout, slot geometry, bucket
// count, boot, checksum), else a new empty one. A file of this boot whose
// layout this binary reads but whose layout or capacity differs is
// migrated: its live entries (at now, ms, CLOCK_MONOTONIC) go into a new
// file of this binary's layout and capacity, which needs room for both
// files while it runs. Any other file is renamed aside (path +
// ".refused") and reported in OpenInfo.Refused, never used; so is one
// that cannot be migrated (no room for the new file), and, never opened,
// a link, a file that is not regular, one owned by neither root nor this
// uid, or one group or others may write (ErrUnsafeFile). Damaged
// slots of a kept table are cleared (OpenInfo.Misplaced). The file is locked
// (flock) while the table lives: a second process gets an error. now
// expires nothing; it only decides which entries are live. An error
// leaves no table; callers fall back to New.
func Open(path string, capacity int, now int64) (*Table, OpenInfo, error) {
	var info OpenInfo
	boot := bootID()
	if capacity < MinCapacity || capacity > MaxCapacity {
		return nil, info, fmt.Errorf("%w: %d not in [%d, %d]", ErrCapacity, capacity, MinCapacity, MaxCapacity)
	}
	n := 1
	for n*slotsPerBucket < capacity {
		n <<= 1
	}
	size := n * int(unsafe.Sizeof(bucket{}))
	// Not through a link, and only a file no one but root and this
	// uid could have written (openTableFile): any other is moved aside
	// (rename moves a link itself, never its target) and never opened.
	f, err := openTableFile(path)
	if errors.Is(err, ErrUnsafeFile) {
		return refuse(path, nil, n, size, boot, info, err)
	}
	if err != nil {
		return nil, info, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		return nil, info, fmt.Errorf("%s is in use by another process: %w", path, err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, info, err
	}
	if fi.Size() == 0 {
		// Locked until the new file is in place: a second process
		// that opened this one meanwhile finds it locked.
		defer f.Close()
		return openNew(path, n, size, boot, info)
	}
	b := make([]byte, fileHeaderSize)
	_, rerr := f.ReadAt(b, 0)
	hdr, err := unmarshalHeader(b)
	switch {
	case rerr != nil:
		err = fmt.Errorf("%w: %v", ErrForeignFile, rerr)
	case err == nil:
		err = hdr.check(fi.Size(), boot)
	}
	if err != nil {
		return refuse(path, f, n, size, boot, info, err)
	}
	if !hdr.current(n) {
		return migrate(path, f, hdr, n, size, boot, now, info)
	}
	t, err := mapFile(f, n, size, hdr)
	if err != nil {
		return nil, info, err
	}
	info.Kept = true
	// The file may shrink under this walk as under the workers: a fault
	// is an error here, and the caller starts without the file.
	if err := Guard(t, func() {
		info.Misplaced = t.dropMisplaced()
		info.Torn = t.repair()
		t.Range(now, func(Key, Entry) bool { info.Entries++; return true })
	}); err != nil {
		t.unmap()
		return nil, info, err
	}
	return t, info, nil
}

// refuse moves the file at path aside (f open on it, or nil for one never
// opened), for why, and opens a new one.
func refuse(path string, f *os.File, n, size int, boot [16]byte, info OpenInfo, why error) (*Table, OpenInfo, error) {
	info.Refused, info.RefusedAs = why, path+".refused"
	// Aside, not deleted: an operator may want to look. The lock stays
	// with the open descriptor, on the renamed file; the new file gets
	// its own.
	rnErr := os.Rename(path, info.RefusedAs)
	if f != nil {
		f.Close()
	}
	if rnErr != nil {
		return nil, info, fmt.Errorf("moving aside %s: %w", path, rnErr)
	}
	return openNew(path, n, size, boot, info)
}

// openNew creates the file at path afresh (empty table, new seed and id).
func openNew(path string, n, size int, boot [16]byte, info OpenInfo) (*Table, OpenInfo, error) {
	tmp := path + ".new"
	f, hdr, err := create(tmp, n, size, boot, 0)
	if err != nil {
		return nil, info, err
	}
	// In place only once complete: a kill before this leaves no half
	// file. The directory is not synced: a table outlives no reboot
	// (its boot ID), so the rename need not either.
	if err := os.Rename(tmp, path); err != nil {
		f.Close()
		os.Remove(tmp)
		return nil, info, err
	}
	t, err := mapFile(f, n, size, hdr)
	if t != nil {
		t.mem.File = path // made as tmp, renamed since
	}
	return t, info, err
}

// create makes the file at tmp afresh (whatever was there unlinked, a
// link never followed: createExcl), locked, allocated and with the
// header of an empty table of this binary's layout with n buckets: a new
// seed, and the table ID id (a new one for 0). On error nothing is left
// at tmp.
func create(tmp string, n, size int, boot [16]byte, id uint64) (*os.File, fileHeader, error) {
	f, err := createExcl(tmp)
	if err != nil {
		return nil, fileHeader{}, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		return nil, fileHeader{}, fmt.Errorf("%s is in use by another process: %w", tmp, err)
	}
	var b [56]byte
	rand.Read(b[:])
	hdr := fileHeader{layout: fileLayout, slotSize: uint32(unsafe.Sizeof(slot{})), perBucket: slotsPerBucket,
		clock: fileClockMono, buckets: uint64(n), boot: boot, id: id}
	for i := range hdr.seed {
		hdr.seed[i] = binary.LittleEndian.Uint64(b[i*8:])
	}
	if hdr.id == 0 {
		hdr.id = binary.LittleEndian.Uint64(b[48:]) | 1
	}
	// Every page allocated now: a full tmpfs fails here, not with a
	// SIGBUS in a worker.
	if err := unix.Fallocate(int(f.Fd()), 0, 0, int64(fileHeaderSpan+size)); err != nil {
		f.Close()
		os.Remove(tmp)
		return nil, hdr, fmt.Errorf("allocating %d MiB for %s: %w", (fileHeaderSpan+size)>>20, tmp, err)
	}
	if _, err := f.WriteAt(hdr.marshal(), 0); err != nil {
		f.Close()
		os.Remove(tmp)
		return nil, hdr, err
	}
	return f, hdr, nil
}

// mapFile maps f's buckets shared, advised to use huge pages and
// populated, and returns the table on them. f stays open (its lock held)
// while the table lives.
func mapFile(f *os.File, n, size int, hdr fileHeader) (*Table, error) {
	fd := int(f.Fd())
	// Allocated (a no-op where it is already): no hole left to SIGBUS on.
	if err := unix.Fallocate(fd, 0, 0, int64(fileHeaderSpan+size)); err != nil {
		f.Close()
		return nil, fmt.Errorf("allocating %d MiB for %s: %w", (fileHeaderSpan+size)>>20, f.Name(), err)
	}
	mem, err := unix.Mmap(fd, fileHeaderSpan, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("mapping %s: %w", f.Name(), err)
	}
	t := &Table{
		mask:     uint64(n - 1),
		homeMask: slotMask,
		seed:     hdr.seed,
		stats:    make([]stripe, min(n, statStripes)),
		fileID:   hdr.id,
	}
	t.mem.Bytes = size
	t.mem.HugeAdvice = unix.Madvise(mem, unix.MADV_HUGEPAGE) == nil
	t.mem.Mapped, t.mem.File = true, f.Name()
	t.mapping = mem
	c := runtime.AddCleanup(t, func(m []byte) { _ = unix.Munmap(m); f.Close() }, mem)
	t.unmap = func() {
		c.Stop()
		_ = unix.Munmap(mem)
		f.Close()
	}
	start := time.Now()
	// populate writes every page when madvise cannot: a file shrunk
	// since the fallocate above faults there.
	if err := Guard(t, func() { t.mem.Populate = populate(mem) }); err != nil {
		t.unmap()
		return nil, err
	}
	t.mem.PopulateTime = time.Since(start)
	t.buckets = unsafe.Slice((*bucket)(unsafe.Pointer(&mem[0])), n)
	return t, nil
}

func crc32Castagnoli(b []byte) uint32 { return crc32.Checksum(b, crcTable) }

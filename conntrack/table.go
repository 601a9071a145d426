package conntrack

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"runtime"
	"sync/atomic"
)

// Capacity bounds accepted by New.
const (
	MinCapacity = 1024
	MaxCapacity = 1 << 28 // 16 GiB of table; anything larger is a configuration mistake
)

// MaxIdleSec is the longest idle timeout an entry can carry (one day).
const MaxIdleSec = 86400

// ErrCapacity is returned by New for a capacity outside [MinCapacity, MaxCapacity].
var ErrCapacity = errors.New("conntrack: capacity out of range")

const (
	slotsPerBucket  = 8
	lockBit         = 1         // bucket writer lock, in header word 0 only
	fpMaskAll       = 1<<31 - 1 // fingerprints are 31 bits, never 0
	spinBeforeYield = 64        // retries before a waiter yields the P
)

// Value is what an entry records.
type Value struct {
	Backend uint32 // opaque stable backend reference chosen by the caller
	Side    uint8  // side of the eligible set when recorded (SPEC E5)
	IdleSec uint32 // idle timeout in seconds (M1); clamped to [1, MaxIdleSec]
}

func (v Value) pack() uint64 {
	idle := min(max(v.IdleSec, 1), MaxIdleSec)
	return uint64(v.Backend) | uint64(v.Side)<<32 | uint64(idle)<<40
}

func unpack(w uint64) Value {
	return Value{Backend: uint32(w), Side: uint8(w >> 32), IdleSec: uint32(w >> 40)}
}

// expired reports whether an entry with packed value val, last used at last,
// is past its idle timeout at now (M1: gone at exactly IdleSec*1000 ms).
func expired(val uint64, last, now int64) bool {
	return now-last >= int64(val>>40)*1000
}

// Entry is a looked-up entry.
type Entry struct {
	Value
	LastUse int64 // ms on the caller's clock

	ref uint32 // global slot index + 1; 0: not from a table
	seq uint32 // slot sequence when read, so Touch can skip a reused slot
}

// InsertResult says what Upsert did.
type InsertResult uint8

const (
	Inserted InsertResult = iota + 1 // new key (into a free or expired slot)
	Updated                          // key existed and was live; overwritten in place
	Evicted                          // new key took the slot of another live entry (X3)
)

func (r InsertResult) String() string {
	switch r {
	case Inserted:
		return "inserted"
	case Updated:
		return "updated"
	case Evicted:
		return "evicted"
	}
	return fmt.Sprintf("InsertResult(%d)", uint8(r))
}

type slot struct {
	key  [5]atomic.Uint64
	val  atomic.Uint64
	last atomic.Uint64 // int64 ms
}

// bucket is 512 bytes: a header line and eight 56-byte slots. The table's
// backing array is one large allocation, hence page-aligned, so every
// header sits on its own cache line.
type bucket struct {
	hdr   [slotsPerBucket]atomic.Uint64
	slots [slotsPerBucket]slot
}

// Header word: seq<<32 | fp<<1 | lock. seq is odd while a writer is inside
// the slot; fp 0 means empty.
func hdrSeq(h uint64) uint32 { return uint32(h >> 32) }
func hdrFP(h uint64) uint32  { return uint32(h>>1) & fpMaskAll }
func mkHdr(seq, fp uint32, lock uint64) uint64 {
	return uint64(seq)<<32 | uint64(fp)<<1 | lock
}

// Table is a fixed-capacity, concurrent flow table. All methods are safe
// for concurrent use.
type Table struct {
	buckets []bucket
	mask    uint64 // len(buckets) - 1
	fpMask  uint32 // fpMaskAll; tests narrow it to force fingerprint collisions
	seed    [6]uint64
	stats   []stripe
	mem     Memory
	mapping []byte // the buckets' own mapping (nil on the Go heap), for Lock
	unmap   func() // tests: unmap now, not when collected (nil on the Go heap)
}

// New returns an empty table holding at least capacity entries: the
// capacity is rounded up to a power of two (of 8-entry buckets). It costs 64
// bytes per entry, allocated at once and populated (every page faulted in
// now, huge pages where THP allows, so that no worker takes a first-touch
// fault later); Lock keeps it resident. It fails with ErrCapacity outside
// [MinCapacity, MaxCapacity].
func New(capacity int) (*Table, error) {
	if capacity < MinCapacity || capacity > MaxCapacity {
		return nil, fmt.Errorf("%w: %d not in [%d, %d]", ErrCapacity, capacity, MinCapacity, MaxCapacity)
	}
	n := 1
	for n*slotsPerBucket < capacity {
		n <<= 1
	}
	t := newTable(n)
	var b [48]byte
	rand.Read(b[:]) // never fails (crypto/rand since Go 1.24)
	for i := range t.seed {
		t.seed[i] = binary.LittleEndian.Uint64(b[i*8:])
	}
	return t, nil
}

// newTable builds a table of n buckets (a power of two) with a zero seed;
// tests use it directly for tiny tables.
func newTable(n int) *Table {
	t := &Table{
		mask:   uint64(n - 1),
		fpMask: fpMaskAll,
		stats:  make([]stripe, min(n, statStripes)),
	}
	t.buckets = allocBuckets(t, n)
	return t
}

// Capacity returns the number of entries the table holds when every bucket
// is full.
func (t *Table) Capacity() int { return len(t.buckets) * slotsPerBucket }

// locate hashes k into its words, its bucket and its fingerprint.
func (t *Table) locate(k *Key, w *keyWords) (bi uint64, fp uint32) {
	w.from(k)
	h := hash(w, &t.seed)
	fp = uint32(h>>33) & t.fpMask
	if fp == 0 {
		fp = 1
	}
	return h & t.mask, fp
}

// wait is what a reader or writer does between retries: spin briefly, then
// let the scheduler run the goroutine it waits for.
func wait(spin int) {
	if spin >= spinBeforeYield {
		runtime.Gosched()
	}
}

// Hint is where a key lives: its bucket and fingerprint, hashed once. A
// worker computes the hints of a whole batch, touches their memory with
// Prefetch (independent loads the CPU overlaps), then looks up with
// LookupHint: a batch then pays about one memory latency instead of one per
// packet.
type Hint struct {
	bi uint64
	fp uint32
}

// Hint hashes k.
func (t *Table) Hint(k *Key) Hint {
	var w keyWords
	bi, fp := t.locate(k, &w)
	return Hint{bi: bi, fp: fp}
}

// Prefetch loads the bucket header line of h and returns a value only so
// that the load cannot be dropped; callers sum and discard it.
func (t *Table) Prefetch(h Hint) uint64 {
	return t.buckets[h.bi].hdr[0].Load()
}

// PrefetchSlot loads the first and last words of the slot whose fingerprint
// matches h (after Prefetch brought the header in), or nothing on a miss.
func (t *Table) PrefetchSlot(h Hint) uint64 {
	b := &t.buckets[h.bi]
	for i := range slotsPerBucket {
		if hdrFP(b.hdr[i].Load()) == h.fp {
			// A 56-byte slot may straddle two lines: touch both ends.
			return b.slots[i].key[0].Load() ^ b.slots[i].last.Load()
		}
	}
	return 0
}

// Lookup finds k. Entries idle for IdleSec seconds or more (now - LastUse >=
// IdleSec*1000) are expired and not returned (M1, lazy expiry). Lock-free;
// no allocation.
func (t *Table) Lookup(k *Key, now int64) (Entry, bool) {
	return t.LookupHint(k, t.Hint(k), now)
}

// LookupHint is Lookup with k's hint already computed (h must be
// t.Hint(k)).
func (t *Table) LookupHint(k *Key, h Hint, now int64) (Entry, bool) {
	var w keyWords
	w.from(k)
	bi, fp := h.bi, h.fp
	b := &t.buckets[bi]
	for i := range slotsPerBucket {
		for spin := 0; ; spin++ {
			h1 := b.hdr[i].Load() &^ lockBit
			if hdrFP(h1) != fp {
				break // empty, another key, or being rewritten from another key
			}
			if hdrSeq(h1)&1 != 0 {
				wait(spin) // a writer is inside this very slot
				continue
			}
			s := &b.slots[i]
			same := s.holds(&w)
			val := s.val.Load()
			last := int64(s.last.Load())
			if b.hdr[i].Load()&^lockBit != h1 {
				wait(spin) // torn read: retry this slot
				continue
			}
			if !same {
				break // fingerprint collision with another flow (T3)
			}
			if expired(val, last, now) {
				return Entry{}, false
			}
			return Entry{
				Value:   unpack(val),
				LastUse: last,
				ref:     uint32(bi*slotsPerBucket) + uint32(i) + 1,
				seq:     hdrSeq(h1),
			}, true
		}
	}
	return Entry{}, false
}

// Touch records a use of a looked-up entry at now: at most one atomic store,
// none if the entry was already used at now or later, and none if its slot
// was rewritten since the lookup. e.LastUse is updated too.
func (t *Table) Touch(e *Entry, now int64) {
	if e.ref == 0 || now <= e.LastUse {
		return
	}
	i := e.ref - 1
	b := &t.buckets[i/slotsPerBucket]
	if hdrSeq(b.hdr[i%slotsPerBucket].Load()) != e.seq {
		return
	}
	b.slots[i%slotsPerBucket].last.Store(uint64(now))
	e.LastUse = now
}

// lock takes the bucket's writer lock (header word 0, lock bit). Only
// writers of this bucket contend; readers never look at the bit.
func (b *bucket) lock() {
	for spin := 0; ; spin++ {
		h := b.hdr[0].Load()
		if h&lockBit == 0 && b.hdr[0].CompareAndSwap(h, h|lockBit) {
			return
		}
		wait(spin)
	}
}

// unlock releases the writer lock. Only the holder changes header words, so
// a plain store is enough.
func (b *bucket) unlock() {
	b.hdr[0].Store(b.hdr[0].Load() &^ lockBit)
}

// lockOf returns the lock bit that header word i must keep while the bucket
// is locked (only word 0 carries it).
func lockOf(i int) uint64 {
	if i == 0 {
		return lockBit
	}
	return 0
}

// write fills slot i under the bucket lock, inside an odd sequence number so
// that readers never see a mix of old and new words. A nil w keeps the key
// (an in-place update).
func (b *bucket) write(i int, fp uint32, w *keyWords, val uint64, now int64) {
	h := b.hdr[i].Load()
	seq, l := hdrSeq(h), lockOf(i)
	b.hdr[i].Store(mkHdr(seq+1, hdrFP(h), l))
	s := &b.slots[i]
	if w != nil {
		for j := range w {
			s.key[j].Store(w[j])
		}
	}
	s.val.Store(val)
	s.last.Store(uint64(now))
	b.hdr[i].Store(mkHdr(seq+2, fp, l))
}

func (s *slot) holds(w *keyWords) bool {
	return s.key[0].Load() == w[0] && s.key[1].Load() == w[1] &&
		s.key[2].Load() == w[2] && s.key[3].Load() == w[3] &&
		s.key[4].Load() == w[4]
}

// victim picks the slot of a full bucket that a new key takes (X3): the
// first expired one, else the least recently used. It reads every slot, so
// Upsert calls it only when the header shows no free slot.
func (b *bucket) victim(now int64) (i int, dead bool) {
	lru, oldest := 0, int64(math.MaxInt64)
	for i := range slotsPerBucket {
		s := &b.slots[i]
		last := int64(s.last.Load())
		if expired(s.val.Load(), last, now) {
			return i, true
		}
		if last < oldest {
			lru, oldest = i, last
		}
	}
	return lru, false
}

// Upsert creates or overwrites the entry for k, last used at now. When k's
// bucket is full it reuses an expired slot, else evicts the bucket's least
// recently used entry (X3); it never fails. Overwriting an expired entry of
// k itself counts as a new insert (and a reclaimed slot). No allocation.
func (t *Table) Upsert(k *Key, v Value, now int64) InsertResult {
	return t.UpsertHint(k, t.Hint(k), v, now)
}

// UpsertHint is Upsert with k's hint already computed (h must be
// t.Hint(k)), so a worker that looked k up does not hash it twice.
func (t *Table) UpsertHint(k *Key, h Hint, v Value, now int64) InsertResult {
	var w keyWords
	w.from(k)
	bi, fp := h.bi, h.fp
	b := &t.buckets[bi]
	st := &t.stats[bi&uint64(len(t.stats)-1)]
	val := v.pack()

	b.lock()
	defer b.unlock()
	// Header line only, unless a fingerprint matches: keys are unique in a
	// bucket because every writer checks under the lock.
	free := -1
	for i := range slotsPerBucket {
		f := hdrFP(b.hdr[i].Load())
		if f == 0 {
			if free < 0 {
				free = i
			}
			continue
		}
		if f != fp || !b.slots[i].holds(&w) {
			continue
		}
		s := &b.slots[i]
		dead := expired(s.val.Load(), int64(s.last.Load()), now)
		b.write(i, fp, nil, val, now)
		if dead {
			st.inserts.Add(1)
			st.reclaimed.Add(1)
			return Inserted
		}
		st.updates.Add(1)
		return Updated
	}
	st.inserts.Add(1)
	if free >= 0 {
		b.write(free, fp, &w, val, now)
		return Inserted
	}
	i, dead := b.victim(now)
	b.write(i, fp, &w, val, now)
	if dead {
		st.reclaimed.Add(1)
		return Inserted
	}
	st.evictions.Add(1)
	return Evicted
}

// Delete removes the entry for k, expired or not, and reports whether there
// was one.
func (t *Table) Delete(k *Key) bool {
	var w keyWords
	bi, fp := t.locate(k, &w)
	b := &t.buckets[bi]
	b.lock()
	defer b.unlock()
	for i := range slotsPerBucket {
		h := b.hdr[i].Load()
		if hdrFP(h) != fp || !b.slots[i].holds(&w) {
			continue
		}
		// One store: readers that saw the old header retry and find it empty.
		b.hdr[i].Store(mkHdr(hdrSeq(h)+2, 0, lockOf(i)))
		t.stats[bi&uint64(len(t.stats)-1)].deletes.Add(1)
		return true
	}
	return false
}

// Range calls fn for each live, unexpired entry until fn returns false.
// Each entry is read consistently; the walk as a whole is not a snapshot.
// It visits the whole table: control plane use only (explain, status,
// tests), never the hot path. fn may call other methods of t.
func (t *Table) Range(now int64, fn func(k Key, e Entry) bool) {
	for bi := range t.buckets {
		b := &t.buckets[bi]
		for i := range slotsPerBucket {
			var w keyWords
			var h, val uint64
			var last int64
			for spin := 0; ; spin++ {
				h = b.hdr[i].Load() &^ lockBit
				if hdrFP(h) == 0 {
					break
				}
				if hdrSeq(h)&1 != 0 {
					wait(spin)
					continue
				}
				s := &b.slots[i]
				for j := range w {
					w[j] = s.key[j].Load()
				}
				val = s.val.Load()
				last = int64(s.last.Load())
				if b.hdr[i].Load()&^lockBit == h {
					break
				}
				wait(spin)
			}
			if hdrFP(h) == 0 || expired(val, last, now) {
				continue
			}
			e := Entry{
				Value:   unpack(val),
				LastUse: last,
				ref:     uint32(bi*slotsPerBucket+i) + 1,
				seq:     hdrSeq(h),
			}
			if !fn(w.key(), e) {
				return
			}
		}
	}
}

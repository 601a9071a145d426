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
	spinBeforeYield = 64 // retries before a waiter yields the P
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

// slot is one entry on one cache line: its header, key, value and last use,
// so that a lookup that finds its key in its home slot reads one line.
type slot struct {
	hdr  atomic.Uint64 // see hdrUsed and below
	key  [5]atomic.Uint64
	val  atomic.Uint64
	last atomic.Uint64 // int64 ms
}

// bucket is eight slots, 512 bytes. The table's backing array is one large
// allocation, hence page-aligned, so every slot is one cache line.
type bucket struct {
	slots [slotsPerBucket]slot
}

// Header word of a slot:
//
//	seq:32 | 0:24 | reach:3 | home:3 | used:1 | lock:1
//
// seq is odd while a writer is inside the slot. used: the slot holds a key,
// whose home slot (from its hash) is home. reach belongs to the slot as a
// home: every key of this home lies within reach slots after it (the
// bucket wraps), so a lookup reads slots home..home+reach and no more. lock
// is the bucket's writer lock, in slot 0 only.
const (
	lockBit    = 1
	hdrUsed    = 1 << 1
	homeShift  = 2
	reachShift = 5
	slotMask   = slotsPerBucket - 1
)

func hdrSeq(h uint64) uint32 { return uint32(h >> 32) }
func hdrHome(h uint64) int   { return int(h>>homeShift) & slotMask }
func hdrReach(h uint64) int  { return int(h>>reachShift) & slotMask }

// Table is a fixed-capacity, concurrent flow table. All methods are safe
// for concurrent use.
type Table struct {
	buckets  []bucket
	mask     uint64 // len(buckets) - 1
	homeMask uint64 // slotMask; tests set 0 to give every key the same home
	seed     [6]uint64
	stats    []stripe
	mem      Memory
	mapping  []byte // the buckets' own mapping (nil on the Go heap), for Lock
	unmap    func() // tests: unmap now, not when collected (nil on the Go heap)
	fileID   uint64 // Open: the file's table id; 0 for New
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
		mask:     uint64(n - 1),
		homeMask: slotMask,
		stats:    make([]stripe, min(n, statStripes)),
	}
	t.buckets = allocBuckets(t, n)
	return t
}

// Capacity returns the number of entries the table holds when every bucket
// is full.
func (t *Table) Capacity() int { return len(t.buckets) * slotsPerBucket }

// locate hashes k into its words, its bucket and its home slot.
func (t *Table) locate(k *Key, w *keyWords) (bi uint64, home uint32) {
	w.from(k)
	h := hash(w, &t.seed)
	return h & t.mask, uint32(h >> 61 & t.homeMask)
}

// wait is what a reader or writer does between retries: spin briefly, then
// let the scheduler run the goroutine it waits for.
func wait(spin int) {
	if spin >= spinBeforeYield {
		runtime.Gosched()
	}
}

// Hint is where a key lives: its bucket and home slot, hashed once. A
// worker computes the hints of a whole batch, touches their memory with
// Prefetch (independent loads the CPU overlaps), then looks up with
// LookupHint: a batch then pays about one memory latency instead of one per
// packet.
type Hint struct {
	bi   uint64
	home uint32
}

// Hint hashes k.
func (t *Table) Hint(k *Key) Hint {
	var w keyWords
	bi, home := t.locate(k, &w)
	return Hint{bi: bi, home: home}
}

// Prefetch loads the line of h's home slot, which holds the key itself
// unless its home was taken when it was inserted, and returns a value only
// so that the load cannot be dropped; callers sum and discard it.
func (t *Table) Prefetch(h Hint) uint64 {
	return t.buckets[h.bi].slots[h.home].hdr.Load()
}

// PrefetchInsert loads, besides the home line Prefetch loads, the lines an
// Upsert of a new key at h reads in most cases: slot 0's, whose header
// holds the bucket's writer lock, and the home's partner in its 128-byte
// block, where the key goes when its home is taken. A worker calls it for
// frames that will likely insert (SYNs), in the same pass as Prefetch.
func (t *Table) PrefetchInsert(h Hint) uint64 {
	b := &t.buckets[h.bi]
	return b.slots[0].hdr.Load() + b.slots[(h.home^1)&slotMask].hdr.Load()
}

// PrefetchSlot, after Prefetch brought k's home line in, loads the other
// lines k may be on when its home slot holds another key (its home was
// taken when k was inserted): the slots its home reaches. It returns a
// value only so that the loads cannot be dropped.
func (t *Table) PrefetchSlot(k *Key, h Hint) uint64 {
	b := &t.buckets[h.bi]
	home := int(h.home)
	hh := b.slots[home].hdr.Load()
	reach := hdrReach(hh)
	if reach == 0 {
		return hh
	}
	var w keyWords
	w.from(k)
	if hdrHome(hh) == home && b.slots[home].holds(&w) {
		return hh
	}
	for d := 1; d <= reach; d++ {
		hh += b.slots[home^d].hdr.Load()
	}
	return hh
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
	b := &t.buckets[h.bi]
	home := int(h.home)
	reach := hdrReach(b.slots[home].hdr.Load())
	for d := 0; d <= reach; d++ {
		i := home ^ d
		s := &b.slots[i]
		for spin := 0; ; spin++ {
			h1 := s.hdr.Load() &^ lockBit
			if h1&hdrUsed == 0 || hdrHome(h1) != home {
				break // empty, or another home's key
			}
			if hdrSeq(h1)&1 != 0 {
				wait(spin) // a writer is inside this very slot
				continue
			}
			same := s.holds(&w)
			val := s.val.Load()
			last := int64(s.last.Load())
			if s.hdr.Load()&^lockBit != h1 {
				wait(spin) // torn read: retry this slot
				continue
			}
			if !same {
				break // another flow of the same home (T3)
			}
			if expired(val, last, now) {
				return Entry{}, false
			}
			return Entry{
				Value:   unpack(val),
				LastUse: last,
				ref:     uint32(h.bi*slotsPerBucket) + uint32(i) + 1,
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
	s := &t.buckets[i/slotsPerBucket].slots[i%slotsPerBucket]
	if hdrSeq(s.hdr.Load()) != e.seq {
		return
	}
	s.last.Store(uint64(now))
	e.LastUse = now
}

// lock takes the bucket's writer lock (slot 0's header, lock bit). Only
// writers of this bucket contend; readers never look at the bit.
func (b *bucket) lock() {
	h0 := &b.slots[0].hdr
	for spin := 0; ; spin++ {
		h := h0.Load()
		if h&lockBit == 0 && h0.CompareAndSwap(h, h|lockBit) {
			return
		}
		wait(spin)
	}
}

// unlock releases the writer lock. Only the holder changes header words, so
// a plain store is enough.
func (b *bucket) unlock() {
	h0 := &b.slots[0].hdr
	h0.Store(h0.Load() &^ lockBit)
}

// setHdr stores header word i under the bucket lock, keeping the lock bit
// where slot 0 carries it.
func (b *bucket) setHdr(i int, h uint64) {
	if i == 0 {
		h |= lockBit
	}
	b.slots[i].hdr.Store(h)
}

// write fills slot i with a key of home home under the bucket lock, inside
// an odd sequence number so that readers never see a mix of old and new
// words. A nil w keeps the key (an in-place update). The slot's own reach
// (as a home) is kept.
func (b *bucket) write(i, home int, w *keyWords, val uint64, now int64) {
	h := b.slots[i].hdr.Load() &^ lockBit
	seq := uint64(hdrSeq(h))
	keep := h & (slotMask << reachShift)
	b.setHdr(i, (seq+1)<<32|keep|h&(hdrUsed|slotMask<<homeShift))
	s := &b.slots[i]
	if w != nil {
		for j := range w {
			s.key[j].Store(w[j])
		}
	}
	s.val.Store(val)
	s.last.Store(uint64(now))
	b.setHdr(i, (seq+2)<<32|keep|uint64(home)<<homeShift|hdrUsed)
}

// clear empties slot i under the bucket lock: one store; readers that saw
// the old header retry and find it empty.
func (b *bucket) clear(i int) {
	h := b.slots[i].hdr.Load() &^ lockBit
	b.setHdr(i, uint64(hdrSeq(h)+2)<<32|h&(slotMask<<reachShift))
}

// setReach sets the reach of home slot home under the bucket lock (the
// slot's sequence is unchanged: the reach is not part of its entry).
func (b *bucket) setReach(home, reach int) {
	h := b.slots[home].hdr.Load() &^ lockBit
	b.setHdr(home, h&^(slotMask<<reachShift)|uint64(reach)<<reachShift)
}

// fitReach lowers or raises home's reach to the farthest of its keys still
// stored (expired ones too: an Upsert of the same key must find them).
func (b *bucket) fitReach(home int) {
	reach := 0
	for d := range slotsPerBucket {
		h := b.slots[home^d].hdr.Load()
		if h&hdrUsed != 0 && hdrHome(h) == home {
			reach = d
		}
	}
	if hdrReach(b.slots[home].hdr.Load()) != reach {
		b.setReach(home, reach)
	}
}

func (s *slot) holds(w *keyWords) bool {
	return s.key[4].Load() == w[4] && s.key[1].Load() == w[1] &&
		s.key[3].Load() == w[3] && s.key[0].Load() == w[0] &&
		s.key[2].Load() == w[2]
}

// victim picks the slot of a full bucket that a new key takes (X3): the
// first expired one, else the least recently used. It reads every slot, so
// Upsert calls it only when no slot is free.
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

// find returns the slot holding w among home's, or -1; under the bucket
// lock.
func (b *bucket) find(home int, w *keyWords) int {
	reach := hdrReach(b.slots[home].hdr.Load())
	for d := 0; d <= reach; d++ {
		i := home ^ d
		h := b.slots[i].hdr.Load()
		if h&hdrUsed != 0 && hdrHome(h) == home && b.slots[i].holds(w) {
			return i
		}
	}
	return -1
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
	b := &t.buckets[h.bi]
	home := int(h.home)
	st := &t.stats[h.bi&uint64(len(t.stats)-1)]
	val := v.pack()

	b.lock()
	defer b.unlock()
	// Keys are unique in a bucket because every writer checks under the
	// lock.
	if i := b.find(home, &w); i >= 0 {
		s := &b.slots[i]
		dead := expired(s.val.Load(), int64(s.last.Load()), now)
		b.write(i, home, nil, val, now)
		if dead {
			st.inserts.Add(1)
			st.reclaimed.Add(1)
			return Inserted
		}
		st.updates.Add(1)
		return Updated
	}
	st.inserts.Add(1)
	// The first free slot from home on: most keys land in their home, and
	// a lookup then reads one line.
	for d := range slotsPerBucket {
		i := home ^ d
		if b.slots[i].hdr.Load()&hdrUsed == 0 {
			b.write(i, home, &w, val, now)
			if d > hdrReach(b.slots[home].hdr.Load()) {
				b.setReach(home, d)
			}
			return Inserted
		}
	}
	i, dead := b.victim(now)
	old := hdrHome(b.slots[i].hdr.Load())
	b.write(i, home, &w, val, now)
	b.fitReach(old)
	if d := i ^ home; d > hdrReach(b.slots[home].hdr.Load()) {
		b.setReach(home, d)
	}
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
	bi, h := t.locate(k, &w)
	home := int(h)
	b := &t.buckets[bi]
	b.lock()
	defer b.unlock()
	i := b.find(home, &w)
	if i < 0 {
		return false
	}
	b.clear(i)
	b.fitReach(home)
	t.stats[bi&uint64(len(t.stats)-1)].deletes.Add(1)
	return true
}

// Range calls fn for each live, unexpired entry until fn returns false.
// Each entry is read consistently; the walk as a whole is not a snapshot.
// It visits the whole table: control plane use only (explain, status,
// tests), never the hot path. fn may call other methods of t.
func (t *Table) Range(now int64, fn func(k Key, e Entry) bool) {
	for bi := range t.buckets {
		b := &t.buckets[bi]
		for i := range slotsPerBucket {
			s := &b.slots[i]
			var w keyWords
			var h, val uint64
			var last int64
			for spin := 0; ; spin++ {
				h = s.hdr.Load() &^ lockBit
				if h&hdrUsed == 0 {
					break
				}
				if hdrSeq(h)&1 != 0 {
					wait(spin)
					continue
				}
				for j := range w {
					w[j] = s.key[j].Load()
				}
				val = s.val.Load()
				last = int64(s.last.Load())
				if s.hdr.Load()&^lockBit == h {
					break
				}
				wait(spin)
			}
			if h&hdrUsed == 0 || expired(val, last, now) {
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

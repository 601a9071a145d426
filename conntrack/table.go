package conntrack

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
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

// spinBeforeYield is how many retries a waiter makes before it yields
// the P. (slotsPerBucket comes with the build's layout: layout_std.go.)
const spinBeforeYield = 64

// Value is what an entry records.
type Value struct {
	Backend uint32 // opaque stable backend reference chosen by the caller
	Side    uint8  // side of the eligible set when recorded (SPEC E5)
	IdleSec uint32 // idle timeout in seconds (M1); clamped to [1, MaxIdleSec]
	// HalfOpen marks an entry on probation: its flow has shown one packet
	// (a TCP SYN, or the first packet of a flow the table did not know)
	// and no evidence yet that it is real. A full table evicts such
	// entries before any other live one, and a new half-open entry never
	// displaces an established one (Upsert returns Refused instead), so
	// that a flood of SYNs or of forged mid-flow packets displaces only its
	// own entries.
	HalfOpen bool
	// Peer marks an entry stored from another instance's record
	// ([flow_sync]): this instance has not seen a packet of its flow, so
	// it does not send the entry on to its peers. The first packet of the
	// flow here clears it (the flow moved here).
	Peer bool
}

// Packed value: backend:32 | side:8 | idle:22 | peer:1 | halfOpen:1.
// Idle needs 17 bits (MaxIdleSec); the peer bit was an always-zero idle
// bit before, so older table files read alike.
const (
	idleShift = 40
	idleMask  = 1<<22 - 1
	peerBit   = 1 << 62
	halfOpen  = 1 << 63
)

func (v Value) pack() uint64 {
	idle := min(max(v.IdleSec, 1), MaxIdleSec)
	w := uint64(v.Backend) | uint64(v.Side)<<32 | uint64(idle)<<idleShift
	if v.HalfOpen {
		w |= halfOpen
	}
	if v.Peer {
		w |= peerBit
	}
	return w
}

func unpack(w uint64) Value {
	return Value{Backend: uint32(w), Side: uint8(w >> 32), IdleSec: uint32(w>>idleShift) & idleMask, HalfOpen: w&halfOpen != 0, Peer: w&peerBit != 0}
}

// expired reports whether an entry with packed value val, last used at last,
// is past its idle timeout at now (M1: gone at exactly IdleSec*1000 ms).
func expired(val uint64, last, now int64) bool {
	return now-last >= int64(val>>idleShift&idleMask)*1000
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
	// Refused: a half-open key found both its buckets full of live
	// established entries and was not stored (X3: not created, counted).
	Refused
)

func (r InsertResult) String() string {
	switch r {
	case Inserted:
		return "inserted"
	case Updated:
		return "updated"
	case Evicted:
		return "evicted"
	case Refused:
		return "refused"
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
//	seq:32 | 0:22 | spill:1 | alt:1 | reach:3 | home:3 | used:1 | lock:1
//
// seq is odd while a writer is inside the slot. used: the slot holds a key,
// whose home slot (from its hash) is home; alt: the key is in its second
// bucket (its first was full when it was inserted). reach and spill belong
// to the slot as a home: every key of this home lies within reach slots
// after it (the bucket wraps), so a lookup reads slots home..home+reach and
// no more; spill says that a key of this home was once stored in its
// second bucket, so a lookup that misses here must look there too (it
// stays set: clearing it would need the other bucket's lock). lock is the
// bucket's writer lock, in slot 0 only.
const (
	lockBit    = 1
	hdrUsed    = 1 << 1
	homeShift  = 2
	reachShift = 5
	altBit     = 1 << 8
	spillBit   = 1 << 9
	slotMask   = slotsPerBucket - 1

	ownerMask = hdrUsed | slotMask<<homeShift | altBit // who a used slot's key is
	homeBits  = slotMask<<reachShift | spillBit        // what a slot keeps as a home
)

func hdrSeq(h uint64) uint32 { return uint32(h >> 32) }
func hdrHome(h uint64) int   { return int(h>>homeShift) & slotMask }
func hdrReach(h uint64) int  { return int(h>>reachShift) & slotMask }

// owner is the header bits of a used slot whose key has home home, stored
// in its first (alt 0) or second (alt altBit) bucket.
func owner(home int, alt uint64) uint64 { return hdrUsed | uint64(home)<<homeShift | alt }

// Table is a fixed-capacity, concurrent flow table. All methods are safe
// for concurrent use.
//
// A key has two buckets, from independent bits of its hash. It goes into
// its first unless that is full, then into its second; only when both are
// full is a live entry evicted, which keeps live evictions rare until the
// table is nearly full (BenchmarkFill). A lookup reads the key's home line
// in its first bucket and, only when that home has spilled keys and the key
// is not there, its home line in the second.
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
	// abandoned: given up after a fault (Abandon); waiters panic.
	abandoned atomic.Bool
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

// wait is what a reader or writer does between retries: spin briefly, then
// let the scheduler run the goroutine it waits for. In a table given up
// after a fault (Abandon) it panics instead: the writer it waits for may
// have died there holding a lock or inside a slot.
func (t *Table) wait(spin int) {
	if spin >= spinBeforeYield {
		if t.abandoned.Load() {
			panic(abandonedPanic{t})
		}
		runtime.Gosched()
	}
}

// Hint is where a key lives: its two buckets and its home slot in each,
// hashed once. A worker computes the hints of a whole batch, touches their
// memory with Prefetch (independent loads the CPU overlaps), then looks up
// with LookupHint: a batch then pays about one memory latency instead of
// one per packet. bi2 == bi: the key has one bucket only (a one-bucket table).
type Hint struct {
	bi, bi2     uint64
	home, home2 uint32
}

// Hint hashes k.
func (t *Table) Hint(k *Key) Hint {
	var w keyWords
	w.from(k)
	return t.hint(hash(&w, &t.seed))
}

// hint splits a key's hash: bits 0.. pick its first bucket, bits 29.. its
// second (disjoint bits for every table up to MaxCapacity's 2^25 buckets),
// bits 61..63 and 54..56 its homes in them. Where the two fields pick the
// same bucket (one key in as many as there are buckets), the second is the
// first's neighbour: with that bucket alone, such a key had no room but its
// eight slots, and at half load of a 2^16-entry table about one table in
// forty evicted a live entry. Only a table of one bucket, which tests
// build, leaves a key a single bucket.
func (t *Table) hint(h uint64) Hint {
	bi, bi2 := h&t.mask, h>>29&t.mask
	if bi2 == bi {
		bi2 ^= t.mask & 1
	}
	return Hint{
		bi: bi, bi2: bi2,
		home: uint32(h >> 61 & t.homeMask), home2: uint32(h >> 54 & t.homeMask),
	}
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
// taken when it was inserted): the slots its home reaches, and its home
// line in its second bucket when its home spilled. It returns a value only
// so that the loads cannot be dropped.
func (t *Table) PrefetchSlot(k *Key, h Hint) uint64 {
	b := &t.buckets[h.bi]
	home := int(h.home)
	hh := b.slots[home].hdr.Load()
	if hh&(slotMask<<reachShift|spillBit) == 0 {
		return hh
	}
	var w keyWords
	w.from(k)
	if hh&ownerMask == owner(home, 0) && b.slots[home].holds(&w) {
		return hh
	}
	sum := hh
	for d := 1; d <= hdrReach(hh); d++ {
		sum += b.slots[home^d].hdr.Load()
	}
	if hh&spillBit != 0 && h.bi2 != h.bi {
		sum += t.buckets[h.bi2].slots[h.home2].hdr.Load()
	}
	return sum
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
	bi, home := h.bi, int(h.home)
	i, seq, val, last := t.buckets[bi].probe(t, home, 0, &w)
	if i < 0 {
		// A key makeRoom moves is written at its new place before it is
		// cleared at its old one. The spill bit is read after the probe:
		// one moved to its second bucket is marked (setSpill) before it
		// is written there, so a probe that missed it here sees the mark.
		if h.bi2 == h.bi || t.buckets[bi].slots[home].hdr.Load()&spillBit == 0 {
			return Entry{}, false
		}
		bi, home = h.bi2, int(h.home2)
		if i, seq, val, last = t.buckets[bi].probe(t, home, altBit, &w); i < 0 {
			// One moved back to its first bucket after the first probe
			// and cleared here before this one is there now. (A key
			// moved twice during one lookup can still be missed.)
			bi, home = h.bi, int(h.home)
			if i, seq, val, last = t.buckets[bi].probe(t, home, 0, &w); i < 0 {
				return Entry{}, false
			}
		}
	}
	if expired(val, last, now) {
		return Entry{}, false
	}
	return Entry{
		Value:   unpack(val),
		LastUse: last,
		ref:     uint32(bi*slotsPerBucket) + uint32(i) + 1,
		seq:     seq,
	}, true
}

// probe reads, without the lock, the slot holding w among the keys of home
// stored in this bucket as their first (alt 0) or second (alt altBit)
// choice: its index (-1 if none), sequence, value and last use, read
// consistently.
func (b *bucket) probe(t *Table, home int, alt uint64, w *keyWords) (int, uint32, uint64, int64) {
	reach := hdrReach(b.slots[home].hdr.Load())
	want := owner(home, alt)
	for d := 0; d <= reach; d++ {
		i := home ^ d
		s := &b.slots[i]
		for spin := 0; ; spin++ {
			h1 := s.hdr.Load() &^ lockBit
			if h1&ownerMask != want {
				break // empty, or another home's key
			}
			if hdrSeq(h1)&1 != 0 {
				t.wait(spin) // a writer is inside this very slot
				continue
			}
			same := s.holds(w)
			val := s.val.Load()
			last := int64(s.last.Load())
			if s.hdr.Load()&^lockBit != h1 {
				t.wait(spin) // torn read: retry this slot
				continue
			}
			if !same {
				break // another flow of the same home (T3)
			}
			return i, hdrSeq(h1), val, last
		}
	}
	return -1, 0, 0, 0
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
func (b *bucket) lock(t *Table) {
	h0 := &b.slots[0].hdr
	for spin := 0; ; spin++ {
		h := h0.Load()
		if h&lockBit == 0 && h0.CompareAndSwap(h, h|lockBit) {
			return
		}
		t.wait(spin)
	}
}

// unlock releases the writer lock. Only the holder changes header words, so
// a plain store is enough.
func (b *bucket) unlock() {
	h0 := &b.slots[0].hdr
	h0.Store(h0.Load() &^ lockBit)
}

// lockPair takes the locks of buckets bi and bi2 (one lock when they are
// the same), lower index first so that two writers never wait on each
// other in a cycle.
func (t *Table) lockPair(bi, bi2 uint64) {
	switch {
	case bi == bi2:
		t.buckets[bi].lock(t)
	case bi < bi2:
		t.buckets[bi].lock(t)
		t.buckets[bi2].lock(t)
	default:
		t.buckets[bi2].lock(t)
		t.buckets[bi].lock(t)
	}
}

func (t *Table) unlockPair(bi, bi2 uint64) {
	t.buckets[bi].unlock()
	if bi2 != bi {
		t.buckets[bi2].unlock()
	}
}

// setHdr stores header word i under the bucket lock, keeping the lock bit
// where slot 0 carries it.
func (b *bucket) setHdr(i int, h uint64) {
	if i == 0 {
		h |= lockBit
	}
	b.slots[i].hdr.Store(h)
}

// write fills slot i with a key of home home, stored as its first (alt 0)
// or second (alt altBit) choice, under the bucket lock, inside an odd
// sequence number so that readers never see a mix of old and new words. A
// nil w keeps the key (an in-place update). What the slot keeps as a home
// (reach, spill) is kept.
func (b *bucket) write(i, home int, alt uint64, w *keyWords, val uint64, now int64) {
	h := b.slots[i].hdr.Load() &^ lockBit
	seq := uint64(hdrSeq(h))
	keep := h & homeBits
	b.setHdr(i, (seq+1)<<32|keep|h&ownerMask)
	s := &b.slots[i]
	if w != nil {
		for j := range w {
			s.key[j].Store(w[j])
		}
	}
	s.val.Store(val)
	s.last.Store(uint64(now))
	b.setHdr(i, (seq+2)<<32|keep|owner(home, alt))
}

// put stores a new key in free slot i and widens its home's reach to it.
func (b *bucket) put(i, home int, alt uint64, w *keyWords, val uint64, now int64) {
	b.write(i, home, alt, w, val, now)
	if d := i ^ home; d > hdrReach(b.slots[home].hdr.Load()) {
		b.setReach(home, d)
	}
}

// replace stores a new key in used slot i: the home of the key it displaces
// loses it from its reach, the new key's home reaches it.
func (b *bucket) replace(i, home int, alt uint64, w *keyWords, val uint64, now int64) {
	old := hdrHome(b.slots[i].hdr.Load())
	b.write(i, home, alt, w, val, now)
	b.fitReach(old)
	if d := i ^ home; d > hdrReach(b.slots[home].hdr.Load()) {
		b.setReach(home, d)
	}
}

// clear empties slot i under the bucket lock: one store; readers that saw
// the old header retry and find it empty.
func (b *bucket) clear(i int) {
	h := b.slots[i].hdr.Load() &^ lockBit
	b.setHdr(i, uint64(hdrSeq(h)+2)<<32|h&homeBits)
}

// setReach sets the reach of home slot home under the bucket lock (the
// slot's sequence is unchanged: the reach is not part of its entry).
func (b *bucket) setReach(home, reach int) {
	h := b.slots[home].hdr.Load() &^ lockBit
	b.setHdr(home, h&^(slotMask<<reachShift)|uint64(reach)<<reachShift)
}

// setSpill marks home as having a key in its second bucket, under the
// bucket lock, before that key is written there.
func (b *bucket) setSpill(home int) {
	if h := b.slots[home].hdr.Load() &^ lockBit; h&spillBit == 0 {
		b.setHdr(home, h|spillBit)
	}
}

// fitReach lowers or raises home's reach to the farthest of its keys still
// stored (expired ones too: an Upsert of the same key must find them),
// first and second choices alike.
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

// free returns the first free slot from home on, or -1: most keys land in
// their home, and a lookup then reads one line.
func (b *bucket) free(home int) int {
	for d := range slotsPerBucket {
		if i := home ^ d; b.slots[i].hdr.Load()&hdrUsed == 0 {
			return i
		}
	}
	return -1
}

// victim is the slot of a full bucket that a new key may take (X3).
type victim struct {
	i    int
	dead bool  // expired: reclaiming it evicts nothing
	half bool  // a live half-open entry
	last int64 // its last use
}

// before reports whether v is the better one to evict: half-open entries
// go before established ones (a SYN flood displaces its own entries), then
// the least recently used.
func (v victim) before(o victim) bool {
	if v.half != o.half {
		return v.half
	}
	return v.last < o.last
}

// victim picks the slot of a full bucket that a new key takes: the first
// expired one, else the least recently used half-open entry, else the least
// recently used. A live entry may go only if its value has one of the bits
// of may (0: any may go); none may: i is -1. It reads every slot, so the
// writers call it only when no slot is free.
func (b *bucket) victim(now int64, may uint64) victim {
	best := victim{i: -1}
	for i := range slotsPerBucket {
		s := &b.slots[i]
		last := int64(s.last.Load())
		val := s.val.Load()
		if expired(val, last, now) {
			return victim{i: i, dead: true, last: last}
		}
		if may != 0 && val&may == 0 {
			continue
		}
		v := victim{i: i, half: val&halfOpen != 0, last: last}
		if best.i < 0 || v.before(best) {
			best = v
		}
	}
	return best
}

// find returns the slot holding w among home's keys stored as alt, or -1;
// under the bucket lock.
func (b *bucket) find(home int, alt uint64, w *keyWords) int {
	reach := hdrReach(b.slots[home].hdr.Load())
	want := owner(home, alt)
	for d := 0; d <= reach; d++ {
		i := home ^ d
		if b.slots[i].hdr.Load()&ownerMask == want && b.slots[i].holds(w) {
			return i
		}
	}
	return -1
}

// update overwrites the value of the key in slot i in place.
func (b *bucket) update(i, home int, alt uint64, val uint64, now int64, st *stripe) InsertResult {
	s := &b.slots[i]
	dead := expired(s.val.Load(), int64(s.last.Load()), now)
	b.write(i, home, alt, nil, val, now)
	if dead {
		st.inserts.Add(1)
		st.reclaimed.Add(1)
		return Inserted
	}
	st.updates.Add(1)
	return Updated
}

// Upsert creates or overwrites the entry for k, last used at now. A new key
// goes into its first bucket, else its second; when both are full it
// reuses an expired slot, else evicts a live entry (X3): a half-open one
// if either bucket holds one, else the least recently used established
// one — unless v is half-open itself: then k is not stored and Upsert
// returns Refused. An existing key is always overwritten. Overwriting an
// expired entry of k itself counts as a new insert (and a reclaimed
// slot). No allocation.
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

	// The common case takes one lock: the key is in its first bucket, or
	// is new there, has a free slot and no key of its home ever spilled
	// (so it cannot be in its second bucket).
	b.lock(t)
	if i := b.find(home, 0, &w); i >= 0 {
		r := b.update(i, home, 0, val, now, st)
		b.unlock()
		return r
	}
	if b.slots[home].hdr.Load()&spillBit == 0 {
		if i := b.free(home); i >= 0 {
			st.inserts.Add(1)
			b.put(i, home, 0, &w, val, now)
			b.unlock()
			return Inserted
		}
	}
	b.unlock()
	t.lockPair(h.bi, h.bi2)
	defer t.unlockPair(h.bi, h.bi2)
	return t.place(h, &w, val, now, st)
}

// place is Upsert under the locks of both of the key's buckets. Keys are
// unique in the table because every writer checks both under the locks.
func (t *Table) place(h Hint, w *keyWords, val uint64, now int64, st *stripe) InsertResult {
	if b, i, home, alt := t.locate(h, w); i >= 0 {
		return b.update(i, home, alt, val, now, st)
	}
	// A newcomer on probation never displaces an established entry: a
	// flood of SYNs or of mid-flow packets from forged sources can only
	// evict its own kind.
	r := t.insert(h, w, val, now, now, st, val&halfOpen)
	if r == Refused {
		st.refused.Add(1)
	}
	return r
}

// locate finds w in its first bucket, else its second, under the locks of
// both: the bucket, the slot (-1 if absent), its home there and how it is
// stored there (alt).
func (t *Table) locate(h Hint, w *keyWords) (*bucket, int, int, uint64) {
	b, home := &t.buckets[h.bi], int(h.home)
	if i := b.find(home, 0, w); i >= 0 || h.bi2 == h.bi {
		return b, i, home, 0
	}
	b, home = &t.buckets[h.bi2], int(h.home2)
	return b, b.find(home, altBit, w), home, altBit
}

// insert stores w, absent from both its buckets, under their locks, last
// used at last: in a free or expired slot of its first bucket, else of its
// second, else in a slot makeRoom frees, else in place of the best live
// victim whose value has one of the bits of may (0: any), else nowhere
// (Refused, which the caller counts).
func (t *Table) insert(h Hint, w *keyWords, val uint64, last, now int64, st *stripe, may uint64) InsertResult {
	b1, b2 := &t.buckets[h.bi], &t.buckets[h.bi2]
	home, home2 := int(h.home), int(h.home2)
	if i := b1.free(home); i >= 0 {
		st.inserts.Add(1)
		b1.put(i, home, 0, w, val, last)
		return Inserted
	}
	v1 := b1.victim(now, may)
	if v1.dead {
		st.inserts.Add(1)
		b1.replace(v1.i, home, 0, w, val, last)
		st.reclaimed.Add(1)
		return Inserted
	}
	if h.bi2 == h.bi {
		if v1.i < 0 {
			return Refused
		}
		st.inserts.Add(1)
		b1.replace(v1.i, home, 0, w, val, last)
		st.evicted(v1.half)
		return Evicted
	}
	if i := b2.free(home2); i >= 0 {
		st.inserts.Add(1)
		b1.setSpill(home)
		b2.put(i, home2, altBit, w, val, last)
		st.spills.Add(1)
		return Inserted
	}
	v2 := b2.victim(now, may)
	if v2.dead {
		st.inserts.Add(1)
		b1.setSpill(home)
		b2.replace(v2.i, home2, altBit, w, val, last)
		st.spills.Add(1)
		st.reclaimed.Add(1)
		return Inserted
	}
	// Both full of live entries. A half-open one goes at once;
	// otherwise make room by moving one of the sixteen keys to its
	// other bucket, and evict only when none can move.
	if !v1.half && !v2.half && st.tryRoom() {
		if i := t.makeRoom(b1); i >= 0 {
			st.inserts.Add(1)
			b1.put(i, home, 0, w, val, last)
			st.moves.Add(1)
			return Inserted
		}
		if i := t.makeRoom(b2); i >= 0 {
			st.inserts.Add(1)
			b1.setSpill(home)
			b2.put(i, home2, altBit, w, val, last)
			st.spills.Add(1)
			st.moves.Add(1)
			return Inserted
		}
		st.roomless.Store(roomSkip)
	}
	if v1.i < 0 && v2.i < 0 {
		return Refused
	}
	st.inserts.Add(1)
	if v1.i < 0 || v2.i >= 0 && v2.before(v1) {
		b1.setSpill(home)
		b2.replace(v2.i, home2, altBit, w, val, last)
		st.spills.Add(1)
		st.evicted(v2.half)
		return Evicted
	}
	b1.replace(v1.i, home, 0, w, val, last)
	st.evicted(v1.half)
	return Evicted
}

// Delete removes the entry for k, expired or not, and reports whether there
// was one.
func (t *Table) Delete(k *Key) bool {
	h := t.Hint(k)
	var w keyWords
	w.from(k)
	b1 := &t.buckets[h.bi]
	// Under its first bucket's lock, a home whose spill bit is clear has no
	// key in the second bucket, and none can move there: every writer sets
	// the bit under this lock before it writes a key there (place,
	// makeRoom), and it stays set. Read before the lock, it could be set by
	// a move of k itself in between (k then missed, and left in the table).
	b1.lock(t)
	if h.bi2 == h.bi || b1.slots[h.home].hdr.Load()&spillBit == 0 {
		ok := t.remove(h, &w, false)
		b1.unlock()
		return ok
	}
	b1.unlock()
	// k may be in either bucket, and makeRoom may move it between them
	// unless both locks are held: take them in lockPair's order, as Upsert.
	t.lockPair(h.bi, h.bi2)
	defer t.unlockPair(h.bi, h.bi2)
	return t.remove(h, &w, true)
}

// remove clears w's slot, in its first bucket or (both) its second, under
// the locks of the buckets it looks in.
func (t *Table) remove(h Hint, w *keyWords, both bool) bool {
	b, home := &t.buckets[h.bi], int(h.home)
	i := b.find(home, 0, w)
	if i < 0 && both {
		b, home = &t.buckets[h.bi2], int(h.home2)
		i = b.find(home, altBit, w)
	}
	if i < 0 {
		return false
	}
	b.clear(i)
	b.fitReach(home)
	t.stats[h.bi&uint64(len(t.stats)-1)].deletes.Add(1)
	return true
}

// Range calls fn for each live, unexpired entry until fn returns false.
// Each entry is read consistently; the walk as a whole is not a snapshot.
// It visits the whole table: control plane use only (explain, status,
// tests), never the hot path. fn may call other methods of t.
func (t *Table) Range(now int64, fn func(k Key, e Entry) bool) {
	t.RangeBuckets(0, len(t.buckets), now, fn)
}

// Buckets is the number of buckets: RangeBuckets walks [0, Buckets()).
func (t *Table) Buckets() int { return len(t.buckets) }

// RangeBuckets is Range over buckets [from, to) only (clamped to
// [0, Buckets())), so that a walk of the whole table can be spread over
// time.
func (t *Table) RangeBuckets(from, to int, now int64, fn func(k Key, e Entry) bool) {
	for bi := max(from, 0); bi < min(to, len(t.buckets)); bi++ {
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
					t.wait(spin)
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
				t.wait(spin)
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

// makeRoom frees a slot of full bucket b, under its lock, by moving one of
// its keys to that key's other bucket (a first choice to its second, a
// second back to its first) where that bucket has a free slot and its lock
// is free at once: waiting there could deadlock with a writer holding it
// and waiting for b. It returns the freed slot, or -1. The moved key is
// written at its new place before it is cleared at its old one, so a
// reader finds it at one or the other: LookupHint reads the spill bit after
// its first probe and, on a miss in the second bucket, probes the first
// again. Delete reads the bit under the first bucket's lock.
func (t *Table) makeRoom(b *bucket) int {
	for i := range slotsPerBucket {
		s := &b.slots[i]
		hd := s.hdr.Load()
		var w keyWords
		for j := range w {
			w[j] = s.key[j].Load()
		}
		kh := t.hint(hash(&w, &t.seed))
		if kh.bi == kh.bi2 {
			continue
		}
		// to: the other bucket; its home there; how the key is stored there.
		to, toHome, toAlt := kh.bi2, int(kh.home2), uint64(altBit)
		if hd&altBit != 0 {
			to, toHome, toAlt = kh.bi, int(kh.home), 0
		}
		d := &t.buckets[to]
		if d == b || !d.tryLock() {
			continue
		}
		j := d.free(toHome)
		if j >= 0 {
			home := hdrHome(hd)
			if toAlt != 0 {
				b.setSpill(home)
			}
			d.put(j, toHome, toAlt, &w, s.val.Load(), int64(s.last.Load()))
			b.clear(i)
			b.fitReach(home)
		}
		d.unlock()
		if j >= 0 {
			return i
		}
	}
	return -1
}

// tryLock takes the bucket's writer lock if it is free now.
func (b *bucket) tryLock() bool {
	h0 := &b.slots[0].hdr
	h := h0.Load()
	return h&lockBit == 0 && h0.CompareAndSwap(h, h|lockBit)
}

package dataplane

import (
	"crypto/sha256"
	"encoding/binary"
	"net/netip"
	"slices"
	"sync/atomic"

	"xlb/conntrack"
)

// SyncRecord is what a worker hands to the flow-sync goroutine about one
// tracked flow ([flow_sync]): its key, the backend and side its entry
// names, and when the worker saw it (ms, the decider's clock).
type SyncRecord struct {
	Key     conntrack.Key
	Backend BackendRef
	Side    Side
	Now     int64
	// One record, one cache line (the ring's array is line-aligned): a
	// 56-byte record would straddle two lines in most slots, and each
	// line the worker writes is one the sync goroutine's core read last.
	_ [8]byte
}

// SyncRing is a single-producer, single-consumer ring of SyncRecords: one
// worker's decider pushes, the flow-sync goroutine pops. No lock, no
// allocation, no system call; a full ring drops the record and counts it.
//
// head counts the records pushed, tail those popped, each written by one
// side only and on a cache line of its own, so that the two cores do not
// bounce one line on every push and pop. Each side keeps a copy of the
// other's index and reads the shared one only when its copy says the ring
// is full (producer) or empty (consumer). A decider writes records with
// put and publishes them with one store at the end of its batch (publish):
// an atomic store on amd64 is a locked instruction, one per batch rather
// than one per record. Push is put and publish in one.
type SyncRing struct {
	_    [linePad]byte
	buf  []SyncRecord // read-only after NewSyncRing
	mask uint64
	_    [linePad]byte

	// The producer's line.
	head      atomic.Uint64 // records published
	drops     atomic.Uint64 // records dropped, published with head
	next      uint64        // records put (>= head)
	tailSeen  uint64        // a tail read earlier (<= tail)
	dropsNext uint64        // drops counted, not yet published
	_         [linePad]byte

	// The consumer's line.
	tail     atomic.Uint64
	headSeen uint64 // a head read earlier (<= head)
	_        [linePad]byte
}

// linePad keeps the ring's groups of fields apart: a field of one group
// and one of the next are at least a cache line (64 bytes) apart, so on
// different lines wherever the ring starts (fields are 8-byte aligned).
const (
	cacheLine = 64
	linePad   = cacheLine - 8
)

// maxSyncRing bounds a ring (1M records: 56 MiB); larger is a mistake.
const maxSyncRing = 1 << 20

// NewSyncRing returns a ring of size records (rounded up to a power of two,
// at least 1, at most 1M).
func NewSyncRing(size int) *SyncRing {
	n := 1
	for n < size && n < maxSyncRing {
		n <<= 1
	}
	return &SyncRing{buf: make([]SyncRecord, n), mask: uint64(n - 1)}
}

// Len is the ring's size in records.
func (r *SyncRing) Len() int { return len(r.buf) }

// Push adds r (the decider's goroutine only). False: the ring was full,
// the record is dropped and counted.
func (r *SyncRing) Push(rec *SyncRecord) bool {
	s := r.slot()
	if s != nil {
		*s = *rec
	}
	r.publish()
	return s != nil
}

// slot returns the next free record for the producer to fill, counted as
// put, or nil (counted as a drop) when the ring is full.
func (r *SyncRing) slot() *SyncRecord {
	if r.next-r.tailSeen > r.mask {
		r.tailSeen = r.tail.Load()
		if r.next-r.tailSeen > r.mask {
			r.dropsNext++
			return nil
		}
	}
	s := &r.buf[r.next&r.mask]
	r.next++
	return s
}

// put adds a record without publishing it (the decider's hot path).
func (r *SyncRing) put(k *conntrack.Key, backend uint32, side uint8, now int64) {
	if s := r.slot(); s != nil {
		s.Key, s.Backend, s.Side, s.Now = *k, BackendRef(backend), Side(side), now
	}
}

// publish makes the records put so far visible to the consumer (the store
// of head orders the records' writes before it), and the drops to Drops.
func (r *SyncRing) publish() {
	if r.next != r.head.Load() {
		r.head.Store(r.next)
	}
	if r.dropsNext != 0 {
		r.drops.Store(r.drops.Load() + r.dropsNext)
		r.dropsNext = 0
	}
}

// Pop moves up to len(dst) records into dst (the sync goroutine only) and
// returns how many.
func (r *SyncRing) Pop(dst []SyncRecord) int {
	t := r.tail.Load()
	if r.headSeen-t < uint64(len(dst)) {
		r.headSeen = r.head.Load()
	}
	n := int(min(r.headSeen-t, uint64(len(dst))))
	if n == 0 {
		return 0
	}
	i := int(t & r.mask)
	c := copy(dst[:n], r.buf[i:])
	copy(dst[c:n], r.buf)
	r.tail.Store(t + uint64(n))
	return n
}

// Drops is how many records Push dropped on a full ring.
func (r *SyncRing) Drops() uint64 { return r.drops.Load() }

// Pushed is how many records were pushed (and not dropped), ever.
func (r *SyncRing) Pushed() uint64 { return r.head.Load() }

// FleetID is a backend's identity across the fleet: its service's name and
// its address as configured, the same the Maglev key is built from (S5),
// so every instance with the configuration computes the same ID whatever
// its local references. The first 8 bytes of SHA-256(name NUL address).
func FleetID(service string, ip netip.Addr) uint64 {
	h := sha256.New()
	h.Write([]byte(service))
	h.Write([]byte{0})
	h.Write([]byte(ip.Unmap().String()))
	var sum [sha256.Size]byte
	return binary.BigEndian.Uint64(h.Sum(sum[:0]))
}

// EnableFlowSync makes every decider made from now on hand the flows it
// comes to track to a ring of its own, of ringSize records (SyncRings).
// Call it before the workers' deciders are made. A ringSize of 0 turns it
// off for the deciders made afterwards (a benchmark comparing both on one
// engine); those made before keep their rings.
func (e *Engine) EnableFlowSync(ringSize int) {
	e.syncMu.Lock()
	defer e.syncMu.Unlock()
	e.syncSize = max(ringSize, 0)
}

// SyncRings returns the rings of the deciders made since EnableFlowSync
// (nil without it). Safe to call from any goroutine; the slice is a copy.
func (e *Engine) SyncRings() []*SyncRing {
	e.syncMu.Lock()
	defer e.syncMu.Unlock()
	if e.rings == nil {
		return nil
	}
	return slices.Clone(e.rings)
}

// newSyncRing is NewDecider's: a ring for the new decider when flow sync
// is on, kept in the engine's list.
func (e *Engine) newSyncRing() *SyncRing {
	e.syncMu.Lock()
	defer e.syncMu.Unlock()
	if e.syncSize == 0 {
		return nil
	}
	r := NewSyncRing(e.syncSize)
	e.rings = append(e.rings, r)
	return r
}

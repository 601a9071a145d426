package dataplane

import (
	"crypto/sha256"
	"encoding/binary"
	"net/netip"

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
}

// SyncRing is a single-producer, single-consumer ring of SyncRecords: one
// worker's decider pushes, the flow-sync goroutine pops. No lock, no
// allocation, no system call; a full ring drops the record and counts it.
type SyncRing struct {
	// filled in by the ring's implementation
}

// NewSyncRing returns a ring of size records (rounded up to a power of two).
func NewSyncRing(size int) *SyncRing {
	panic("dataplane: SyncRing not implemented yet")
}

// Push adds r (the decider's goroutine only). False: the ring was full,
// the record is dropped and counted.
func (r *SyncRing) Push(rec *SyncRecord) bool {
	panic("dataplane: SyncRing not implemented yet")
}

// Pop moves up to len(dst) records into dst (the sync goroutine only) and
// returns how many.
func (r *SyncRing) Pop(dst []SyncRecord) int {
	panic("dataplane: SyncRing not implemented yet")
}

// Drops is how many records Push dropped on a full ring.
func (r *SyncRing) Drops() uint64 {
	panic("dataplane: SyncRing not implemented yet")
}

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
// Call it before the workers' deciders are made.
func (e *Engine) EnableFlowSync(ringSize int) {
	panic("dataplane: EnableFlowSync not implemented yet")
}

// SyncRings returns the rings of the deciders made since EnableFlowSync
// (nil without it). Safe to call from any goroutine; the slice is a copy.
func (e *Engine) SyncRings() []*SyncRing {
	panic("dataplane: SyncRings not implemented yet")
}

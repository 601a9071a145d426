package capture

import (
	"net/netip"
	"sync/atomic"

	"xlb/dataplane"
)

// Limits of a Ring.
const (
	DefaultSlots   = 1024
	DefaultSnapLen = 2048 // a 1500-byte frame with any encapsulation
	MaxSnapLen     = 65535
)

// Verdicts is a set of verdicts, one bit per dataplane.Verdict.
type Verdicts uint8

// AllVerdicts matches every verdict.
const AllVerdicts Verdicts = 1<<dataplane.VerdictPass | 1<<dataplane.VerdictForward | 1<<dataplane.VerdictDrop

// Has reports whether v is in the set.
func (s Verdicts) Has(v dataplane.Verdict) bool { return s&(1<<v) != 0 }

// Filter says which frames a capture copies. Zero fields match everything.
type Filter struct {
	// VIP: the received frame's destination address.
	VIP netip.Addr
	// Backend: the address of the backend a forwarded frame went to
	// (frames that were not forwarded never match one).
	Backend netip.Addr
	// Verdicts: the engine's verdicts; 0 means all.
	Verdicts Verdicts
}

// record is one copied frame's header in a slot.
type record struct {
	ns      int64 // the worker's clock, ns (Session.Epoch is its zero)
	backend dataplane.BackendRef
	rxLen   int32 // original lengths
	txLen   int32 // 0: nothing sent
	verdict dataplane.Verdict
	reason  dataplane.Reason
}

// Ring is one worker's queue of copies: the worker writes, a Session reads.
// Slots have room for snap bytes as received and as sent.
type Ring struct {
	queue     int
	filter    Filter
	snap      int
	recs      []record
	data      []byte  // slot i: rx at i*2*snap, tx at i*2*snap+snap
	staged    []byte  // the batch's frames as received, snap each
	stagedLen []int32 // their lengths as received
	matched   []bool  // per batch frame: copied in Before

	head atomic.Uint64 // written by the worker
	tail atomic.Uint64 // written by the reader
	lost atomic.Uint64 // copies dropped: the ring was full
}

// NewRing returns a ring for queue's worker with slots slots of snap bytes
// per direction, staging room for batch frames, copying what f selects.
func NewRing(queue, slots, snap, batch int, f Filter) *Ring {
	if slots <= 0 {
		slots = DefaultSlots
	}
	if snap <= 0 {
		snap = DefaultSnapLen
	}
	snap = min(snap, MaxSnapLen)
	if f.Verdicts == 0 {
		f.Verdicts = AllVerdicts
	}
	return &Ring{
		queue: queue, filter: f, snap: snap,
		recs:      make([]record, slots),
		data:      make([]byte, slots*2*snap),
		staged:    make([]byte, batch*snap),
		stagedLen: make([]int32, batch),
		matched:   make([]bool, batch),
	}
}

// Queue is the rx queue of the ring's worker.
func (r *Ring) Queue() int { return r.queue }

// Lost is how many copies were dropped because the ring was full.
func (r *Ring) Lost() uint64 { return r.lost.Load() }

// Before is called by the worker with a received batch before it is
// decided: it stages a copy of each frame whose destination the VIP filter
// matches. A batch larger than the staging room is staged in part.
func (r *Ring) Before(frames []dataplane.Frame) {
	for i := range frames {
		if i >= len(r.matched) {
			break
		}
		d := frames[i].Data()
		ok := true
		if r.filter.VIP.IsValid() {
			dst, valid := destination(d)
			ok = valid && dst == r.filter.VIP
		}
		r.matched[i] = ok
		if ok {
			copy(r.staged[i*r.snap:(i+1)*r.snap], d)
			r.stagedLen[i] = int32(len(d))
		}
	}
}

// After is called by the worker with the same batch once decided, before
// it is completed: it pushes every staged frame whose verdict matches,
// with the bytes to be sent of a forwarded one. ns is the worker's clock.
func (r *Ring) After(frames []dataplane.Frame, ns int64) {
	head, tail := r.head.Load(), r.tail.Load()
	n := uint64(len(r.recs))
	for i := range frames {
		if i >= len(r.matched) || !r.matched[i] {
			continue
		}
		f := &frames[i]
		if !r.filter.Verdicts.Has(f.Verdict) {
			continue
		}
		if head-tail == n {
			if tail = r.tail.Load(); head-tail == n {
				r.lost.Store(r.lost.Load() + 1)
				continue
			}
		}
		slot := int(head % n)
		rec := &r.recs[slot]
		*rec = record{ns: ns, verdict: f.Verdict, reason: f.Reason, rxLen: r.stagedLen[i]}
		base := slot * 2 * r.snap
		copy(r.data[base:base+r.snap], r.staged[i*r.snap:(i+1)*r.snap])
		if f.Verdict == dataplane.VerdictForward {
			rec.backend = f.Backend
			rec.txLen = int32(f.Len)
			copy(r.data[base+r.snap:base+2*r.snap], f.Data())
		}
		head++
	}
	r.head.Store(head)
}

package dataplane

import "sync/atomic"

// Stats are one Decider's counters. The decider is the only writer: it counts
// a batch in plain memory and adds the batch to the atomics when the batch
// ends (Process, Decide), with a load and a store per counter that changed.
// An atomic store is a locked instruction (XCHG on amd64, a full fence), so
// that costs one per counter per batch instead of five or six per packet.
// Readers in other goroutines see consistent values at most one batch
// stale. Per-service and per-backend arrays grow when a snapshot needs more
// room (a copy, once, at a batch boundary — never per packet).
type Stats struct {
	Pass    atomic.Uint64
	Forward atomic.Uint64
	Drops   [NumReasons]atomic.Uint64
	// Evictions counts live tracking entries displaced by new ones (X3).
	Evictions atomic.Uint64
	// NotRecorded counts new flows forwarded without an entry because the
	// decider was over its new-entry rate (FloodLimits.NewPerSec).
	NotRecorded atomic.Uint64
	// TooBigSent counts the too-big drops answered with an ICMP error to
	// the sender (X1); they are counted in Drops[ReasonTooBig] too.
	TooBigSent atomic.Uint64
	// CID counts the UDP packets of services with QUIC-LB by what routing
	// by connection ID made of them (CIDRouted, or a fallback's reason).
	CID [NumCIDOutcomes]atomic.Uint64

	per atomic.Pointer[perObject]

	b batchCounts // the decider's own; never read by other goroutines
	// decided counts the frames count has seen, ever: how far a batch a
	// fault interrupted got (Decider.Contain). The decider's own too.
	decided uint64
}

// batchCounts are the counts of the batch in progress. Only the decider
// touches them; flush moves them into the shared counters.
type batchCounts struct {
	pass, forward, evictions, tooBigSent, notRecorded uint64
	drops                                             [NumReasons]uint64
	cid                                               [NumCIDOutcomes]uint64
	svc                                               []serviceDelta // by service ID, as long as perObject.services
	be                                                []backendDelta // by backend slot, as long as perObject.backends
	svcTouched                                        []uint16       // services with a non-zero delta
	beTouched                                         []uint32       // backend slots with a non-zero delta
}

type serviceDelta struct {
	touched                       bool
	forward, bytes, newConnection uint64
	drops                         [NumReasons]uint64
}

type backendDelta struct {
	touched                       bool
	ref                           BackendRef
	forward, bytes, newConnection uint64
}

// ServiceCounters are the counters of one backend service.
type ServiceCounters struct {
	Forward        atomic.Uint64
	ForwardBytes   atomic.Uint64
	NewConnections atomic.Uint64
	Drops          [NumReasons]atomic.Uint64
}

// BackendCounters are the counters of one backend slot.
type BackendCounters struct {
	Ref            atomic.Uint32 // the backend the counters belong to
	Forward        atomic.Uint64
	ForwardBytes   atomic.Uint64
	NewConnections atomic.Uint64
}

type perObject struct {
	services []ServiceCounters // by service ID
	backends []BackendCounters // by backend slot
}

func newStats() *Stats {
	s := &Stats{}
	s.per.Store(&perObject{})
	return s
}

// ensure makes room for every service and backend slot of snap.
func (s *Stats) ensure(snap *Snapshot) {
	if snap == nil {
		return
	}
	p := s.per.Load()
	if len(p.services) >= len(snap.Services) && len(p.backends) >= len(snap.Backends) {
		return
	}
	n := &perObject{
		services: make([]ServiceCounters, max(len(snap.Services), len(p.services))),
		backends: make([]BackendCounters, max(len(snap.Backends), len(p.backends))),
	}
	for i := range p.services {
		copyService(&n.services[i], &p.services[i])
	}
	for i := range p.backends {
		copyBackend(&n.backends[i], &p.backends[i])
	}
	s.per.Store(n)
	// The batch is empty here (every batch ends with flush): size it anew.
	s.b.svc = make([]serviceDelta, len(n.services))
	s.b.be = make([]backendDelta, len(n.backends))
	s.b.svcTouched = make([]uint16, 0, len(n.services))
	s.b.beTouched = make([]uint32, 0, len(n.backends))
}

func copyService(dst, src *ServiceCounters) {
	dst.Forward.Store(src.Forward.Load())
	dst.ForwardBytes.Store(src.ForwardBytes.Load())
	dst.NewConnections.Store(src.NewConnections.Load())
	for i := range src.Drops {
		dst.Drops[i].Store(src.Drops[i].Load())
	}
}

func copyBackend(dst, src *BackendCounters) {
	dst.Ref.Store(src.Ref.Load())
	dst.Forward.Store(src.Forward.Load())
	dst.ForwardBytes.Store(src.ForwardBytes.Load())
	dst.NewConnections.Store(src.NewConnections.Load())
}

// count adds one decided frame to the batch (plain memory, no atomics).
func (s *Stats) count(d *Decision, length int) {
	s.decided++
	b := &s.b
	var sd *serviceDelta
	if d.Service != nil && int(d.Service.ID) < len(b.svc) {
		sd = &b.svc[d.Service.ID]
		if !sd.touched {
			sd.touched = true
			b.svcTouched = append(b.svcTouched, d.Service.ID)
		}
	}
	switch d.Verdict {
	case VerdictPass:
		b.pass++
	case VerdictDrop:
		b.drops[d.Reason]++
		if sd != nil {
			sd.drops[d.Reason]++
		}
	case VerdictForward:
		b.forward++
		var isNew uint64
		if d.Track == TrackNew || d.Track == TrackReplaced {
			isNew = 1
		}
		if sd != nil {
			sd.forward++
			sd.bytes += uint64(length)
			sd.newConnection += isNew
		}
		if bk := d.Backend; bk != nil && int(bk.Ref.Slot()) < len(b.be) {
			slot := bk.Ref.Slot()
			bd := &b.be[slot]
			if bd.touched && bd.ref != bk.Ref {
				// Another backend in the same slot within one batch cannot
				// happen with one snapshot per batch; stay exact anyway.
				s.flush()
			}
			if !bd.touched {
				bd.touched, bd.ref = true, bk.Ref
				b.beTouched = append(b.beTouched, slot)
			}
			bd.forward++
			bd.bytes += uint64(length)
			bd.newConnection += isNew
		}
	}
	if d.Evicted {
		b.evictions++
	}
	if d.NotRecorded {
		b.notRecorded++
	}
	if d.TooBigSent {
		b.tooBigSent++
	}
	b.cid[d.CID.Outcome]++ // CIDNone's count is never read
}

// add adds n to a counter only the decider writes: a load and a store, no
// read-modify-write instruction; nothing when n is 0.
func add(c *atomic.Uint64, n uint64) {
	if n != 0 {
		c.Store(c.Load() + n)
	}
}

// flush moves the batch into the shared counters and empties it.
func (s *Stats) flush() {
	b := &s.b
	add(&s.Pass, b.pass)
	add(&s.Forward, b.forward)
	add(&s.Evictions, b.evictions)
	add(&s.NotRecorded, b.notRecorded)
	add(&s.TooBigSent, b.tooBigSent)
	b.pass, b.forward, b.evictions, b.tooBigSent, b.notRecorded = 0, 0, 0, 0, 0
	for r := range b.drops {
		add(&s.Drops[r], b.drops[r])
		b.drops[r] = 0
	}
	for o := CIDRouted; o < numCIDOutcomes; o++ {
		add(&s.CID[o], b.cid[o])
		b.cid[o] = 0
	}
	b.cid[CIDNone] = 0
	if len(b.svcTouched) == 0 && len(b.beTouched) == 0 {
		return
	}
	p := s.per.Load()
	for _, id := range b.svcTouched {
		sd, sc := &b.svc[id], &p.services[id]
		add(&sc.Forward, sd.forward)
		add(&sc.ForwardBytes, sd.bytes)
		add(&sc.NewConnections, sd.newConnection)
		for r := range sd.drops {
			add(&sc.Drops[r], sd.drops[r])
		}
		*sd = serviceDelta{}
	}
	b.svcTouched = b.svcTouched[:0]
	for _, slot := range b.beTouched {
		bd, bc := &b.be[slot], &p.backends[slot]
		if BackendRef(bc.Ref.Load()) != bd.ref {
			// The slot changed hands: start the new backend from zero.
			bc.Ref.Store(uint32(bd.ref))
			bc.Forward.Store(0)
			bc.ForwardBytes.Store(0)
			bc.NewConnections.Store(0)
		}
		add(&bc.Forward, bd.forward)
		add(&bc.ForwardBytes, bd.bytes)
		add(&bc.NewConnections, bd.newConnection)
		*bd = backendDelta{}
	}
	b.beTouched = b.beTouched[:0]
}

// Service returns the counters of a service ID (nil when out of range).
func (s *Stats) Service(id uint16) *ServiceCounters {
	p := s.per.Load()
	if int(id) >= len(p.services) {
		return nil
	}
	return &p.services[id]
}

// Backend returns the counters of a backend, or nil when the slot holds
// another backend's counters or none.
func (s *Stats) Backend(r BackendRef) *BackendCounters {
	p := s.per.Load()
	if int(r.Slot()) >= len(p.backends) {
		return nil
	}
	bc := &p.backends[r.Slot()]
	if BackendRef(bc.Ref.Load()) != r {
		return nil
	}
	return bc
}

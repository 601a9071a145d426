package dataplane

import "sync/atomic"

// Stats are one worker's counters. The worker is the only writer, so
// increments are a load and a store (no locked instruction); readers in
// other goroutines see consistent, slightly stale values through the same
// atomics. Per-service and per-backend arrays grow when a snapshot needs
// more room (a copy, once, at a batch boundary — never per packet).
type Stats struct {
	Pass    atomic.Uint64
	Forward atomic.Uint64
	Drops   [NumReasons]atomic.Uint64
	// Evictions counts live tracking entries displaced by new ones (X3).
	Evictions atomic.Uint64

	per atomic.Pointer[perObject]
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

func inc(c *atomic.Uint64, n uint64) { c.Store(c.Load() + n) }

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

func (s *Stats) count(d *Decision, length int) {
	p := s.per.Load()
	var svc *ServiceCounters
	if d.Service != nil && int(d.Service.ID) < len(p.services) {
		svc = &p.services[d.Service.ID]
	}
	switch d.Verdict {
	case VerdictPass:
		inc(&s.Pass, 1)
	case VerdictDrop:
		inc(&s.Drops[d.Reason], 1)
		if svc != nil {
			inc(&svc.Drops[d.Reason], 1)
		}
	case VerdictForward:
		inc(&s.Forward, 1)
		isNew := d.Track == TrackNew || d.Track == TrackReplaced
		if svc != nil {
			inc(&svc.Forward, 1)
			inc(&svc.ForwardBytes, uint64(length))
			if isNew {
				inc(&svc.NewConnections, 1)
			}
		}
		if b := d.Backend; b != nil && int(b.Ref.Slot()) < len(p.backends) {
			bc := &p.backends[b.Ref.Slot()]
			if BackendRef(bc.Ref.Load()) != b.Ref {
				// The slot changed hands: start the new backend from zero.
				bc.Ref.Store(uint32(b.Ref))
				bc.Forward.Store(0)
				bc.ForwardBytes.Store(0)
				bc.NewConnections.Store(0)
			}
			inc(&bc.Forward, 1)
			inc(&bc.ForwardBytes, uint64(length))
			if isNew {
				inc(&bc.NewConnections, 1)
			}
		}
	}
	if d.Evicted {
		inc(&s.Evictions, 1)
	}
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

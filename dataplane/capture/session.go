package capture

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"strings"
	"time"

	"xlb/dataplane"
)

// Named is a backend as a capture names it.
type Named struct {
	Service, Name string
	IP            netip.Addr
}

// Session writes what a set of rings copies as pcapng.
type Session struct {
	Rings []*Ring
	// Filter: its Backend is applied here (the rings applied VIP and
	// verdicts).
	Filter Filter
	// Resolve names a forwarded frame's backend (from the current
	// snapshot); false when the ref is unknown.
	Resolve func(dataplane.BackendRef) (Named, bool)
	// Count stops the session after that many frames (0: until ctx ends):
	// frames, not packets of the file, where a forwarded frame is two
	// (as received and as sent) and any other one.
	Count int
	// Epoch is the wall time at the zero of the workers' clock.
	Epoch time.Time
	// Snap is the capture length per frame recorded in the file.
	Snap int
	// Flush, when set, is called after each burst written (an HTTP
	// response streams as it goes).
	Flush func()
	// Idle is how long the reader sleeps when every ring is empty
	// (default 2 ms).
	Idle time.Duration
}

// Stats say what a session wrote.
type Stats struct {
	Frames uint64 // frames written (each as received, and as sent if forwarded)
	// Packets are the file's packet blocks: one per frame as received,
	// one more per frame forwarded (as sent).
	Packets uint64
	Lost    uint64 // copies the rings dropped when full
}

// Interfaces of the file.
const (
	IfaceRX = 0 // frames as received
	IfaceTX = 1 // frames as sent to the backend
)

// Run writes the pcapng file to w until Count frames are written (their
// packets as received and as sent) or ctx ends, and returns what it
// wrote; the error is w's.
func (s *Session) Run(ctx context.Context, w io.Writer) (Stats, error) {
	idle := s.Idle
	if idle <= 0 {
		idle = 2 * time.Millisecond
	}
	snap := s.Snap
	if snap <= 0 {
		snap = DefaultSnapLen
	}
	ng := &ngWriter{w: w}
	ng.sectionHeader()
	ng.iface("rx", snap)
	ng.iface("tx", snap)
	var st Stats
	done := func() bool { return s.Count > 0 && st.Frames >= uint64(s.Count) }
	timer := time.NewTimer(idle)
	defer timer.Stop()
	var comment strings.Builder
	for ng.err == nil && !done() {
		wrote := false
		for _, r := range s.Rings {
			for !done() {
				tail := r.tail.Load()
				if tail == r.head.Load() {
					break
				}
				slot := int(tail % uint64(len(r.recs)))
				rec := r.recs[slot]
				base := slot * 2 * r.snap
				if s.match(rec) {
					at := s.Epoch.Add(time.Duration(rec.ns))
					comment.Reset()
					s.describe(&comment, r.queue, rec)
					ng.packet(IfaceRX, at, r.data[base:base+min(r.snap, int(rec.rxLen))], int(rec.rxLen), comment.String())
					st.Packets++
					if rec.txLen > 0 {
						ng.packet(IfaceTX, at, r.data[base+r.snap:base+r.snap+min(r.snap, int(rec.txLen))], int(rec.txLen), comment.String())
						st.Packets++
					}
					// One frame, whether one packet or two: Count counts
					// these.
					st.Frames++
					wrote = true
				}
				r.tail.Store(tail + 1)
			}
		}
		if wrote && s.Flush != nil {
			s.Flush()
		}
		if wrote {
			continue
		}
		timer.Reset(idle)
		select {
		case <-ctx.Done():
			return s.end(ng, st)
		case <-timer.C:
		}
	}
	return s.end(ng, st)
}

// end writes the statistics (copies lost, on the rx interface).
func (s *Session) end(ng *ngWriter, st Stats) (Stats, error) {
	for _, r := range s.Rings {
		st.Lost += r.Lost()
	}
	now := time.Now()
	ng.stats(IfaceRX, now, st.Lost)
	ng.stats(IfaceTX, now, 0)
	if s.Flush != nil {
		s.Flush()
	}
	return st, ng.err
}

// match applies the backend filter: only forwarded frames have a backend.
func (s *Session) match(rec record) bool {
	if !s.Filter.Backend.IsValid() {
		return true
	}
	if rec.txLen == 0 || s.Resolve == nil {
		return false
	}
	b, ok := s.Resolve(rec.backend)
	return ok && b.IP == s.Filter.Backend
}

// describe is a frame's comment: queue, verdict, reason or backend.
func (s *Session) describe(b *strings.Builder, queue int, rec record) {
	fmt.Fprintf(b, "queue=%d verdict=%s", queue, rec.verdict)
	if rec.verdict == dataplane.VerdictDrop {
		fmt.Fprintf(b, " reason=%s", rec.reason)
	}
	if rec.txLen > 0 && s.Resolve != nil {
		if n, ok := s.Resolve(rec.backend); ok {
			fmt.Fprintf(b, " service=%s backend=%s ip=%s", n.Service, n.Name, n.IP)
		}
	}
}

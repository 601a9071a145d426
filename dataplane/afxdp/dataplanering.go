package afxdp

import (
	"fmt"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"

	"xlb/dataplane"
)

// Ring is a dataplane.Ring on a Socket: the decision engine's view of one
// AF_XDP queue. Receive hands out frames as whole umem chunks (Frame.Buf,
// FrameSize bytes) with Off at the received frame, so the headroom in front
// is Buf[:Off]; Complete transmits forwarded frames from their final Off and
// Len (moved back by encapsulation), and recycles dropped ones.
//
// A frame the engine passes cannot go to the host stack from here: AF_XDP
// has no way to re-inject a frame into the kernel's receive path. Ring
// recycles it and counts it (RingCounters.Passed). The XDP program only
// redirects VIP traffic (NDP for a VIP, for one, stays with the kernel), so
// the engine rarely passes a frame it gets from AF_XDP.
//
// Like the Socket's hot path, a Ring belongs to one worker goroutine;
// Counters may be read from any.
type Ring struct {
	s    *Socket
	rx   []unix.XDPDesc
	tx   []unix.XDPDesc
	drop []uint64
	left []uint64 // forwarded frames the TX ring refused

	passed, dropped, txFull, invalid atomic.Uint64
}

// RingCounters count what Ring did with completed frames.
type RingCounters struct {
	Passed  uint64 // passed by the engine, recycled (see Ring)
	Dropped uint64 // dropped by the engine, recycled
	TxFull  uint64 // forwarded but recycled: the TX ring stayed full
	Invalid uint64 // not a frame of this socket, or Off/Len outside its chunk
}

// NewRing returns a Ring over s that moves at most batch frames per call.
func NewRing(s *Socket, batch int) (*Ring, error) {
	if batch <= 0 || batch > maxRingSize {
		return nil, fmt.Errorf("%w: batch %d: must be 1..%d", ErrInvalidOpts, batch, maxRingSize)
	}
	return &Ring{
		s:    s,
		rx:   make([]unix.XDPDesc, batch),
		tx:   make([]unix.XDPDesc, batch),
		drop: make([]uint64, batch),
		left: make([]uint64, batch),
	}, nil
}

// Socket returns the socket under the ring.
func (r *Ring) Socket() *Socket { return r.s }

// Receive reaps the completion ring, then fills frames[:n] with up to
// min(len(frames), batch) received frames.
func (r *Ring) Receive(frames []dataplane.Frame) int {
	r.s.Complete()
	n := r.s.Receive(r.rx[:min(len(frames), len(r.rx))])
	u := &r.s.umem
	for i, d := range r.rx[:n] {
		frames[i] = dataplane.Frame{Buf: u.chunk(d.Addr), Off: int(d.Addr &^ u.chunkMask), Len: int(d.Len)}
	}
	return n
}

// Complete transmits the forwarded frames and recycles the others. Frames
// that do not belong to the socket, or whose Off/Len leave their chunk, are
// counted as Invalid (and recycled when their chunk is known).
func (r *Ring) Complete(frames []dataplane.Frame) {
	if r.s.closed {
		return
	}
	nt, nd := 0, 0
	var passed, dropped, invalid uint64
	for i := range frames {
		f := &frames[i]
		addr, ok := r.locate(f)
		if !ok {
			invalid++
		} else if f.Verdict == dataplane.VerdictForward {
			r.tx[nt] = unix.XDPDesc{Addr: addr, Len: uint32(f.Len)}
			if nt++; nt == len(r.tx) {
				r.transmit(nt)
				nt = 0
			}
			continue
		} else if f.Verdict == dataplane.VerdictPass {
			passed++
		} else {
			dropped++
		}
		if addr == noAddr {
			continue
		}
		r.drop[nd] = addr
		if nd++; nd == len(r.drop) {
			r.s.Recycle(r.drop[:nd])
			nd = 0
		}
	}
	r.transmit(nt)
	r.s.Recycle(r.drop[:nd])
	if passed > 0 {
		r.passed.Add(passed)
	}
	if dropped > 0 {
		r.dropped.Add(dropped)
	}
	if invalid > 0 {
		r.invalid.Add(invalid)
	}
}

const noAddr = ^uint64(0)

// locate returns the umem address of a frame's first byte; ok is false if
// Off/Len do not make a frame inside one chunk, and then addr is the chunk
// of Buf (to recycle) or noAddr if Buf is not in this socket's umem.
func (r *Ring) locate(f *dataplane.Frame) (addr uint64, ok bool) {
	u := &r.s.umem
	p := uintptr(unsafe.Pointer(unsafe.SliceData(f.Buf)))
	base := uintptr(unsafe.Pointer(unsafe.SliceData(u.mem)))
	if p < base || uint64(p-base) >= uint64(len(u.mem)) {
		return noAddr, false
	}
	buf := uint64(p - base)
	if f.Off < 0 || f.Len <= 0 || f.Off > len(f.Buf) || f.Len > len(f.Buf)-f.Off {
		return buf, false
	}
	a := buf + uint64(f.Off)
	if !u.fits(a, uint32(f.Len)) {
		return buf, false
	}
	return a, true
}

// transmit sends r.tx[:n]; what the TX ring cannot take after one reap and
// retry is recycled and counted as TxFull.
func (r *Ring) transmit(n int) {
	if n == 0 {
		return
	}
	m := r.s.Transmit(r.tx[:n])
	if m < n {
		r.s.Complete()
		m += r.s.Transmit(r.tx[m:n])
	}
	if m < n {
		r.txFull.Add(uint64(n - m))
		for i, d := range r.tx[m:n] {
			r.left[i] = d.Addr
		}
		r.s.Recycle(r.left[:n-m])
	}
}

// Counters returns the ring's counters; the socket keeps its own (Stats).
func (r *Ring) Counters() RingCounters {
	return RingCounters{
		Passed:  r.passed.Load(),
		Dropped: r.dropped.Load(),
		TxFull:  r.txFull.Load(),
		Invalid: r.invalid.Load(),
	}
}

var _ dataplane.Ring = (*Ring)(nil)

package afxdp

import (
	"fmt"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"

	"xlb/dataplane"
)

// FramePort is a dataplane.FramePort on a Socket: the decision engine's view
// of one AF_XDP queue. Receive hands out frames as whole umem chunks (Frame.Buf,
// FrameSize bytes) with Off at the received frame, so the headroom in front
// is Buf[:Off]; Complete transmits forwarded frames from their final Off and
// Len (moved back by encapsulation), and recycles dropped ones.
//
// A frame the engine passes cannot go to the host stack from here: AF_XDP
// has no way to re-inject a frame into the kernel's receive path. FramePort
// recycles it and counts it (FramePortCounters.Passed): the frame is lost.
// The XDP program only redirects VIP traffic, and keeps NDP for a VIP with
// the kernel behind as many extension headers as the engine's parser
// follows, so the engine passes a frame it gets from AF_XDP only around a
// reload that removes a VIP, or before the first snapshot.
//
// Like the Socket's hot path, a FramePort belongs to one worker goroutine;
// Counters may be read from any.
type FramePort struct {
	s    *Socket
	rx   []unix.XDPDesc
	tx   []unix.XDPDesc
	drop []uint64
	left []uint64 // forwarded frames the TX ring refused

	passed, dropped, txFull, invalid atomic.Uint64
}

// FramePortCounters count what FramePort did with completed frames.
type FramePortCounters struct {
	Passed  uint64 // passed by the engine, recycled (see FramePort)
	Dropped uint64 // dropped by the engine, recycled
	TxFull  uint64 // forwarded but recycled: the TX ring stayed full
	Invalid uint64 // not a frame of this socket, or Off/Len outside its chunk
}

// NewFramePort returns a FramePort over s that moves at most batch frames
// per call.
func NewFramePort(s *Socket, batch int) (*FramePort, error) {
	if batch <= 0 || batch > maxRingSize {
		return nil, fmt.Errorf("%w: batch %d: must be 1..%d", ErrInvalidOpts, batch, maxRingSize)
	}
	return &FramePort{
		s:    s,
		rx:   make([]unix.XDPDesc, batch),
		tx:   make([]unix.XDPDesc, batch),
		drop: make([]uint64, batch),
		left: make([]uint64, batch),
	}, nil
}

// Socket returns the socket under the port.
func (fp *FramePort) Socket() *Socket { return fp.s }

// Receive reaps the completion ring, then fills frames[:n] with up to
// min(len(frames), batch) received frames.
func (fp *FramePort) Receive(frames []dataplane.Frame) int {
	fp.s.Complete()
	n := fp.s.Receive(fp.rx[:min(len(frames), len(fp.rx))])
	u := &fp.s.umem
	for i, d := range fp.rx[:n] {
		frames[i] = dataplane.Frame{Buf: u.chunk(d.Addr), Off: int(d.Addr &^ u.chunkMask), Len: int(d.Len)}
	}
	return n
}

// Complete transmits the forwarded frames and recycles the others. Frames
// that do not belong to the socket, or whose Off/Len leave their chunk, are
// counted as Invalid (and recycled when their chunk is known).
func (fp *FramePort) Complete(frames []dataplane.Frame) {
	if fp.s.closed {
		return
	}
	nt, nd := 0, 0
	var passed, dropped, invalid uint64
	for i := range frames {
		f := &frames[i]
		addr, ok := fp.locate(f)
		if !ok {
			invalid++
		} else if f.Verdict == dataplane.VerdictForward {
			fp.tx[nt] = unix.XDPDesc{Addr: addr, Len: uint32(f.Len)}
			if nt++; nt == len(fp.tx) {
				fp.transmit(nt)
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
		fp.drop[nd] = addr
		if nd++; nd == len(fp.drop) {
			fp.s.Recycle(fp.drop[:nd])
			nd = 0
		}
	}
	fp.transmit(nt)
	fp.s.Recycle(fp.drop[:nd])
	if passed > 0 {
		fp.passed.Add(passed)
	}
	if dropped > 0 {
		fp.dropped.Add(dropped)
	}
	if invalid > 0 {
		fp.invalid.Add(invalid)
	}
}

const noAddr = ^uint64(0)

// locate returns the umem address of a frame's first byte; ok is false if
// Off/Len do not make a frame inside one chunk, and then addr is the chunk
// of Buf (to recycle) or noAddr if Buf is not in this socket's umem.
func (fp *FramePort) locate(f *dataplane.Frame) (addr uint64, ok bool) {
	u := &fp.s.umem
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

// transmit sends fp.tx[:n]; what the TX ring cannot take after one reap and
// retry is recycled and counted as TxFull.
func (fp *FramePort) transmit(n int) {
	if n == 0 {
		return
	}
	m := fp.s.Transmit(fp.tx[:n])
	if m < n {
		fp.s.Complete()
		m += fp.s.Transmit(fp.tx[m:n])
	}
	if m < n {
		fp.txFull.Add(uint64(n - m))
		for i, d := range fp.tx[m:n] {
			fp.left[i] = d.Addr
		}
		fp.s.Recycle(fp.left[:n-m])
	}
}

// Counters returns the port's counters; the socket keeps its own (Stats).
func (fp *FramePort) Counters() FramePortCounters {
	return FramePortCounters{
		Passed:  fp.passed.Load(),
		Dropped: fp.dropped.Load(),
		TxFull:  fp.txFull.Load(),
		Invalid: fp.invalid.Load(),
	}
}

var _ dataplane.FramePort = (*FramePort)(nil)

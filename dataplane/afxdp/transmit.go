package afxdp

import "golang.org/x/sys/unix"

// Transmit puts frames the caller holds on the TX ring, in order, and
// returns how many descriptors it consumed from the front of descs: those
// were sent, or refused and counted (TxInvalid: empty, not inside one chunk,
// or a chunk the caller does not hold; a held chunk is then recycled). It
// stops early when the TX ring is full; descs[n:] stay the caller's, to
// retry or Recycle. A descriptor may start anywhere in its chunk (after
// encapsulation, in the headroom). It wakes the kernel with one sendto(2)
// only when the TX ring's need-wakeup flag is set; errors from it are
// counted, never returned, and transient ones are retried by Complete.
func (s *Socket) Transmit(descs []unix.XDPDesc) int {
	if s.closed || len(descs) == 0 {
		return 0
	}
	room := s.tx.free(uint32(min(len(descs), int(s.tx.size))))
	idx := s.tx.cachedProd
	var put uint32
	used, bad := 0, 0
	for used < len(descs) && put < room {
		d := descs[used]
		used++
		if !s.umem.fits(d.Addr, d.Len) || !s.umem.give(d.Addr) {
			bad++
			if d.Addr < uint64(len(s.umem.mem)) && s.umem.isHeld(d.Addr) {
				s.umem.release(d.Addr)
			}
			continue
		}
		s.tx.set(idx+put, unix.XDPDesc{Addr: d.Addr, Len: d.Len})
		put++
	}
	if bad > 0 {
		s.c.txInvalid.Add(uint64(bad))
	}
	if put > 0 {
		s.tx.submit(put)
		s.c.txFrames.Add(uint64(put))
		s.kick()
	}
	return used
}

// kick wakes the kernel's TX path if it asked for it.
func (s *Socket) kick() {
	if !s.tx.needWakeup() {
		s.kickPending = false
		return
	}
	s.c.kicks.Add(1)
	switch errno := sendtoKick(s.fd); errno {
	case 0:
		// Copy mode sends a bounded number of frames per call and says
		// EAGAIN when more are left; zero-copy returns at once.
		s.kickPending = false
	case unix.EAGAIN, unix.EBUSY, unix.ENOBUFS, unix.ENETDOWN, unix.EINTR:
		// Out of budget, completion ring full, device busy or down:
		// the frames stay on the ring; Complete asks again.
		s.kickPending = true
		s.c.kickTransient.Add(1)
	default:
		s.kickPending = false
		s.c.kickErrors.Add(1)
		s.c.lastKickErrno.Store(uint32(errno))
	}
}

// Complete moves the frames the kernel has finished sending from the
// completion ring back onto the free stack, and retries a TX wakeup the
// kernel refused earlier. It returns how many frames came back. Call it once
// per worker iteration (FramePort.Receive does).
func (s *Socket) Complete() int {
	if s.closed {
		return 0
	}
	n := s.comp.ready(s.comp.size)
	if n > 0 {
		idx := s.comp.cachedCons
		bad := 0
		for i := range n {
			if !s.umem.push(s.comp.get(idx + i)) {
				bad++
			}
		}
		s.comp.release(n)
		s.c.completed.Add(uint64(n) - uint64(bad))
		if bad > 0 {
			s.c.completionInvalid.Add(uint64(bad))
		}
	}
	if s.kickPending && s.tx.outstanding() {
		s.kick()
	} else if s.kickPending {
		s.kickPending = false
	}
	return int(n)
}

// Recycle returns frames the caller holds (any address inside their chunk)
// to the free stack, for frames it drops, and returns how many it took.
// Addresses outside the umem or of chunks the caller does not hold are
// counted (RecycleInvalid) and skipped.
func (s *Socket) Recycle(addrs []uint64) int {
	if s.closed {
		return 0
	}
	n := 0
	for _, a := range addrs {
		if s.umem.release(a) {
			n++
		}
	}
	s.c.recycled.Add(uint64(n))
	if bad := len(addrs) - n; bad > 0 {
		s.c.recycleInvalid.Add(uint64(bad))
	}
	return n
}

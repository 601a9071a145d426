package afxdp

import "golang.org/x/sys/unix"

// Receive tops the fill ring up from the free stack, then moves up to
// len(descs) received frames from the rx ring into descs and returns how
// many. The caller holds those frames until it passes them to Transmit or
// Recycle. No syscall, no allocation; 0 when nothing is ready.
func (s *Socket) Receive(descs []unix.XDPDesc) int {
	if s.closed || len(descs) == 0 {
		return 0
	}
	s.fill.refill(&s.umem)
	n := s.rx.ready(uint32(min(len(descs), int(s.rx.size))))
	if n == 0 {
		return 0
	}
	idx := s.rx.cachedCons
	got, bad := 0, 0
	for i := range n {
		d := s.rx.get(idx + i)
		// The kernel only writes chunks we gave it; a descriptor that
		// says otherwise would let the caller alias another frame.
		if !s.umem.fits(d.Addr, d.Len) || !s.umem.take(d.Addr) {
			bad++
			continue
		}
		descs[got] = unix.XDPDesc{Addr: d.Addr, Len: d.Len}
		got++
	}
	s.rx.release(n)
	s.c.rxFrames.Add(uint64(got))
	if bad > 0 {
		s.c.rxInvalid.Add(uint64(bad))
	}
	return got
}

// Frame returns the bytes of a descriptor's frame in the umem, with capacity
// up to the end of its chunk; nil if the descriptor is not inside one chunk.
// The headroom in front is reached through Chunk.
func (s *Socket) Frame(d unix.XDPDesc) []byte {
	if s.closed || !s.umem.fits(d.Addr, d.Len) {
		return nil
	}
	c := d.Addr & s.umem.chunkMask
	end := c + s.umem.frameSize
	return s.umem.mem[d.Addr : d.Addr+uint64(d.Len) : end]
}

// Chunk returns the whole chunk (FrameSize bytes) holding umem address addr
// and addr's offset in it, so a caller can write headers in front of a frame
// (see the package comment); nil, 0 if addr is outside the umem.
func (s *Socket) Chunk(addr uint64) (buf []byte, off int) {
	if s.closed || addr >= uint64(len(s.umem.mem)) {
		return nil, 0
	}
	return s.umem.chunk(addr), int(addr &^ s.umem.chunkMask)
}

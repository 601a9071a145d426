package afxdp

// Alloc hands the caller up to len(addrs) free chunks, for frames it builds
// itself rather than receives (a traffic generator), and returns how many:
// addrs[i] is the start of a chunk the caller now holds, as if received, to
// fill through Chunk and pass to Transmit or Recycle. Chunks on the fill
// ring stay there, so a socket that also receives should have more frames
// than its fill ring holds. No syscall, no allocation; 0 when none is free.
func (s *Socket) Alloc(addrs []uint64) int {
	if s.closed {
		return 0
	}
	n := 0
	for n < len(addrs) {
		a, ok := s.umem.pop()
		if !ok {
			break
		}
		s.umem.take(a)
		addrs[n] = a
		n++
	}
	return n
}

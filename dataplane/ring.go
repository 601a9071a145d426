package dataplane

// Ring is where a worker's frames come from and go to: AF_XDP sockets in
// production, memory in tests and benchmarks.
type Ring interface {
	// Receive fills frames[:n] with received frames (Buf, Off, Len set) and
	// returns n; 0 means nothing is ready now.
	Receive(frames []Frame) int
	// Complete hands the decided batch back: forwarded frames are
	// transmitted, passed frames go to the host where the ring can do that,
	// dropped frames are recycled at once.
	Complete(frames []Frame)
}

// Headroom is the space kept in front of every frame for encapsulation:
// Ethernet + VLAN + IPv6 + UDP + GUE fits in 256 bytes with room to spare.
const Headroom = 256

// MemRing is an in-memory Ring that replays a fixed set of frames forever,
// copying each into a buffer with Headroom in front, as a NIC writes into
// umem. It counts what the engine decided. Used by tests, benchmarks and
// lbbench's in-memory mode.
type MemRing struct {
	frames [][]byte
	bufs   [][]byte
	next   int

	Received, Forwarded, Passed, Dropped uint64
	// OnComplete, when set, sees every completed frame (tests).
	OnComplete func(f *Frame)
}

// NewMemRing returns a ring replaying frames round-robin; batch is the
// largest batch it will be asked for.
func NewMemRing(frames [][]byte, batch int) *MemRing {
	maxLen := 0
	for _, f := range frames {
		maxLen = max(maxLen, len(f))
	}
	r := &MemRing{frames: frames, bufs: make([][]byte, batch)}
	for i := range r.bufs {
		r.bufs[i] = make([]byte, Headroom+maxLen+Headroom)
	}
	return r
}

// Receive copies the next frames into the batch.
func (r *MemRing) Receive(frames []Frame) int {
	if len(r.frames) == 0 {
		return 0
	}
	n := min(len(frames), len(r.bufs))
	for i := 0; i < n; i++ {
		src := r.frames[r.next]
		r.next++
		if r.next == len(r.frames) {
			r.next = 0
		}
		buf := r.bufs[i]
		copy(buf[Headroom:], src)
		frames[i] = Frame{Buf: buf, Off: Headroom, Len: len(src)}
	}
	r.Received += uint64(n)
	return n
}

// Complete counts the verdicts.
func (r *MemRing) Complete(frames []Frame) {
	for i := range frames {
		switch frames[i].Verdict {
		case VerdictForward:
			r.Forwarded++
		case VerdictPass:
			r.Passed++
		default:
			r.Dropped++
		}
		if r.OnComplete != nil {
			r.OnComplete(&frames[i])
		}
	}
}

// Poll runs one receive-decide-complete round on ring with the batch
// buffer frames, and reports how many frames it handled.
func (w *Worker) Poll(ring Ring, frames []Frame, now int64) int {
	n := ring.Receive(frames)
	if n == 0 {
		return 0
	}
	w.Process(frames[:n], now)
	ring.Complete(frames[:n])
	return n
}

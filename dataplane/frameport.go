package dataplane

// FramePort is where a decider's frames come from and go to: an AF_XDP
// socket in production (afxdp.FramePort), memory in tests and benchmarks
// (MemFramePort).
type FramePort interface {
	// Receive fills frames[:n] with received frames (Buf, Off, Len set) and
	// returns n; 0 means nothing is ready now.
	Receive(frames []Frame) int
	// Complete hands the decided batch back: forwarded frames are
	// transmitted, passed frames go to the host where the port can do that,
	// dropped frames are recycled at once.
	Complete(frames []Frame)
}

// Headroom is the space kept in front of every frame for encapsulation:
// Ethernet + VLAN + IPv6 + UDP + GUE fits in 256 bytes with room to spare.
const Headroom = 256

// MemFramePort is an in-memory FramePort that replays a fixed set of frames
// forever, copying each into a buffer with Headroom in front, as a NIC
// writes into umem. It counts what the engine decided. Used by tests,
// benchmarks and lbbench's in-memory mode.
type MemFramePort struct {
	frames [][]byte
	bufs   [][]byte
	next   int

	Received, Forwarded, Passed, Dropped uint64
	// OnComplete, when set, sees every completed frame (tests).
	OnComplete func(f *Frame)
}

// NewMemFramePort returns a port replaying frames round-robin; batch is the
// largest batch it will be asked for.
func NewMemFramePort(frames [][]byte, batch int) *MemFramePort {
	maxLen := 0
	for _, f := range frames {
		maxLen = max(maxLen, len(f))
	}
	m := &MemFramePort{frames: frames, bufs: make([][]byte, batch)}
	for i := range m.bufs {
		m.bufs[i] = make([]byte, Headroom+maxLen+Headroom)
	}
	return m
}

// Receive copies the next frames into the batch.
func (m *MemFramePort) Receive(frames []Frame) int {
	if len(m.frames) == 0 {
		return 0
	}
	n := min(len(frames), len(m.bufs))
	for i := 0; i < n; i++ {
		src := m.frames[m.next]
		m.next++
		if m.next == len(m.frames) {
			m.next = 0
		}
		buf := m.bufs[i]
		copy(buf[Headroom:], src)
		frames[i] = Frame{Buf: buf, Off: Headroom, Len: len(src)}
	}
	m.Received += uint64(n)
	return n
}

// Complete counts the verdicts.
func (m *MemFramePort) Complete(frames []Frame) {
	for i := range frames {
		switch frames[i].Verdict {
		case VerdictForward:
			m.Forwarded++
		case VerdictPass:
			m.Passed++
		default:
			m.Dropped++
		}
		if m.OnComplete != nil {
			m.OnComplete(&frames[i])
		}
	}
}

// Poll runs one receive-decide-complete round on port with the batch
// buffer frames, and reports how many frames it handled.
func (dc *Decider) Poll(port FramePort, frames []Frame, now int64) int {
	n := port.Receive(frames)
	if n == 0 {
		return 0
	}
	dc.Process(frames[:n], now)
	port.Complete(frames[:n])
	return n
}

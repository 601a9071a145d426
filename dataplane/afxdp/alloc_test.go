package afxdp

import (
	"bytes"
	"testing"

	"golang.org/x/sys/unix"
)

// TestFake_Alloc: chunks Alloc hands out are held by the caller, can be
// filled and transmitted, come back through Complete, and Alloc stops at
// the free stack's end without touching the fill ring.
func TestFake_Alloc(t *testing.T) {
	s, k := newFake(t, smallOpts())
	free0, _, _, _, _, _ := k.frameCount()
	addrs := make([]uint64, s.opts.NumFrames)
	n := s.Alloc(addrs)
	if n != free0 {
		t.Fatalf("Alloc = %d, want the %d free chunks", n, free0)
	}
	if free, fill, _, held, _, _ := k.frameCount(); free != 0 || held != n || fill != int(s.opts.FillRingSize) {
		t.Fatalf("after Alloc: free %d, held %d, fill %d; want 0, %d, %d", free, held, fill, n, s.opts.FillRingSize)
	}
	k.checkAccounting(t)
	if got := s.Alloc(addrs[:1]); got != 0 {
		t.Fatalf("Alloc with nothing free = %d, want 0", got)
	}
	seen := map[uint64]bool{}
	for _, a := range addrs[:n] {
		if a%uint64(s.opts.FrameSize) != 0 || seen[a] {
			t.Fatalf("Alloc gave %#x: not a distinct chunk start", a)
		}
		seen[a] = true
	}

	frame := testFrame(7, 60)
	buf, off := s.Chunk(addrs[0])
	copy(buf[off:], frame)
	descs := []unix.XDPDesc{{Addr: addrs[0], Len: uint32(len(frame))}}
	if got := s.Transmit(descs); got != 1 {
		t.Fatalf("Transmit = %d", got)
	}
	var sent [][]byte
	k.send(func(b []byte) { sent = append(sent, bytes.Clone(b)) })
	if len(sent) != 1 || !bytes.Equal(sent[0], frame) {
		t.Fatalf("sent %d frames, want the allocated one", len(sent))
	}
	if got := s.Complete(); got != 1 {
		t.Fatalf("Complete = %d, want 1", got)
	}
	if got := s.Recycle(addrs[1:n]); got != n-1 {
		t.Fatalf("Recycle = %d, want %d", got, n-1)
	}
	k.checkAccounting(t)
	if c := s.Counters(); c.TxInvalid != 0 || c.RecycleInvalid != 0 {
		t.Fatalf("counters = %+v", c)
	}
	// A chunk given back cannot be transmitted again.
	if s.Transmit(descs); s.Counters().TxInvalid != 1 {
		t.Fatal("transmitting a chunk no longer held was not refused")
	}
	_ = s.Close()
	if got := s.Alloc(addrs); got != 0 {
		t.Fatalf("Alloc after Close = %d", got)
	}
}

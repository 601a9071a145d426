package afxdp

import (
	"bytes"
	"testing"

	"golang.org/x/sys/unix"

	"xlb/dataplane"
)

// TestFramePort_Verdicts drives the dataplane.FramePort adapter over the fake
// kernel: forwarded frames go out from their final Off/Len (one moved back
// into the headroom, as encapsulation does), passed and dropped ones are
// recycled.
func TestFramePort_Verdicts(t *testing.T) {
	s, k := newFake(t, smallOpts())
	fp, err := NewFramePort(s, 8)
	if err != nil {
		t.Fatal(err)
	}
	in := [][]byte{testFrame(0, 100), testFrame(1, 100), testFrame(2, 100), testFrame(3, 100)}
	k.deliver(in...)
	frames := make([]dataplane.Frame, 8)
	n := fp.Receive(frames)
	if n != 4 {
		t.Fatalf("Receive = %d, want 4", n)
	}
	for i, f := range frames[:n] {
		if !bytes.Equal(f.Data(), in[i]) {
			t.Errorf("frame %d: bytes differ", i)
		}
		if len(f.Buf) != int(s.opts.FrameSize) || f.Off < dataplane.Headroom {
			t.Errorf("frame %d: Buf %d bytes, Off %d; want a whole chunk and Off >= %d", i, len(f.Buf), f.Off, dataplane.Headroom)
		}
	}
	outer := []byte("OUTER-HEADER-20BYTES")
	f := &frames[0]
	copy(f.Buf[f.Off-len(outer):], outer)
	f.Off -= len(outer)
	f.Len += len(outer)
	f.Verdict = dataplane.VerdictForward
	frames[1].Verdict = dataplane.VerdictPass
	frames[2].Verdict = dataplane.VerdictDrop
	frames[3].Verdict = dataplane.VerdictForward
	fp.Complete(frames[:n])

	var sent [][]byte
	k.send(func(b []byte) { sent = append(sent, bytes.Clone(b)) })
	want := [][]byte{append(bytes.Clone(outer), in[0]...), in[3]}
	if len(sent) != 2 || !bytes.Equal(sent[0], want[0]) || !bytes.Equal(sent[1], want[1]) {
		t.Fatalf("sent %d frames; want the encapsulated frame 0 and frame 3", len(sent))
	}
	if c := fp.Counters(); c != (FramePortCounters{Passed: 1, Dropped: 1}) {
		t.Errorf("port counters = %+v, want 1 passed, 1 dropped", c)
	}
	if c := s.Counters(); c.Recycled != 2 || c.TxFrames != 2 {
		t.Errorf("socket: Recycled %d, TxFrames %d; want 2, 2", c.Recycled, c.TxFrames)
	}
	fp.Receive(frames) // reaps the completions
	k.checkAccounting(t)
	if _, _, _, held, _, _ := k.frameCount(); held != 0 {
		t.Errorf("%d frames still held after Complete", held)
	}
}

func TestFramePort_Invalid(t *testing.T) {
	s, k := newFake(t, smallOpts())
	fp, _ := NewFramePort(s, 8)
	k.deliver(testFrame(0, 100), testFrame(1, 100))
	frames := make([]dataplane.Frame, 4)
	if fp.Receive(frames) != 2 {
		t.Fatal("no frames")
	}
	frames[0].Verdict = dataplane.VerdictForward
	frames[0].Len = len(frames[0].Buf) // past the chunk's end
	frames[1].Verdict = dataplane.VerdictForward
	frames[1].Off = -1
	frames[2] = dataplane.Frame{Buf: make([]byte, 2048), Off: 256, Len: 100, Verdict: dataplane.VerdictForward}
	frames[3] = dataplane.Frame{Verdict: dataplane.VerdictDrop}
	fp.Complete(frames)
	if c := fp.Counters(); c.Invalid != 4 {
		t.Errorf("Invalid = %d, want 4", c.Invalid)
	}
	if k.send(nil) != 0 {
		t.Error("an invalid frame was transmitted")
	}
	// The two umem frames were recycled, not leaked.
	if _, _, _, held, _, _ := k.frameCount(); held != 0 {
		t.Errorf("%d frames still held", held)
	}
	k.checkAccounting(t)
}

// TestFramePort_TxFull: forwarded frames the TX ring cannot take are recycled
// and counted, never lost.
func TestFramePort_TxFull(t *testing.T) {
	s, k := newFake(t, smallOpts()) // TX ring of 4
	fp, _ := NewFramePort(s, 8)
	for i := range 8 {
		k.deliver(testFrame(i, 64))
	}
	frames := make([]dataplane.Frame, 8)
	n := fp.Receive(frames)
	if n != 8 {
		t.Fatalf("Receive = %d, want 8", n)
	}
	for i := range frames[:n] {
		frames[i].Verdict = dataplane.VerdictForward
	}
	fp.Complete(frames[:n])
	if c := fp.Counters(); c.TxFull != 4 {
		t.Errorf("TxFull = %d, want 4", c.TxFull)
	}
	if got := k.send(nil); got != 4 {
		t.Errorf("kernel sent %d, want 4", got)
	}
	k.checkAccounting(t)
}

// TestFramePort_NoAllocs: a full receive-complete round allocates nothing.
func TestFramePort_NoAllocs(t *testing.T) {
	s, k := newFake(t, DefaultOpts())
	fp, _ := NewFramePort(s, 64)
	frames := make([]dataplane.Frame, 64)
	pkt := testFrame(1, 128)
	allocs := testing.AllocsPerRun(200, func() {
		portRound(k, fp, frames, pkt)
	})
	if allocs != 0 {
		t.Errorf("a Receive/Complete round allocates %v times, want 0", allocs)
	}
	descs := make([]unix.XDPDesc, 64)
	allocs = testing.AllocsPerRun(200, func() {
		n := s.Receive(descs)
		s.Transmit(descs[:n])
		s.Complete()
		s.Recycle(nil)
		_, _ = s.Poll(0)
	})
	if allocs != 0 {
		t.Errorf("Socket hot-path methods allocate %v times, want 0", allocs)
	}
}

// portRound is one worker iteration against the fake kernel: 64 frames in,
// every other forwarded, the rest dropped, all sent and completed.
func portRound(k *fakeKernel, fp *FramePort, frames []dataplane.Frame, pkt []byte) int {
	for range len(frames) {
		k.deliver(pkt)
	}
	n := fp.Receive(frames)
	for i := range frames[:n] {
		if i%2 == 0 {
			frames[i].Verdict = dataplane.VerdictForward
		} else {
			frames[i].Verdict = dataplane.VerdictDrop
		}
	}
	fp.Complete(frames[:n])
	k.send(nil)
	return n
}

// BenchmarkFramePort is the adapter's Receive/Complete path with a fake
// kernel that copies each frame in (as copy mode does) and completes each
// send.
func BenchmarkFramePort(b *testing.B) {
	s, k := newFake(b, DefaultOpts())
	fp, _ := NewFramePort(s, 64)
	frames := make([]dataplane.Frame, 64)
	pkt := testFrame(1, 128)
	b.ReportAllocs()
	total := 0
	for b.Loop() {
		total += portRound(k, fp, frames, pkt)
	}
	if total == 0 {
		b.Fatal("no frames went round")
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(total), "ns/frame")
}

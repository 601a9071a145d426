package afxdp

import (
	"bytes"
	"errors"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestFake_ReceiveTransmitComplete(t *testing.T) {
	s, k := newFake(t, smallOpts())
	frames := [][]byte{testFrame(1, 60), testFrame(2, 1514), testFrame(3, 100)}
	if got := k.deliver(frames...); got != 3 {
		t.Fatalf("fake kernel delivered %d of 3", got)
	}
	descs := make([]unix.XDPDesc, 8)
	n := s.Receive(descs)
	if n != 3 {
		t.Fatalf("Receive = %d, want 3", n)
	}
	wantOff := uint64(s.opts.Headroom) + unix.XDP_PACKET_HEADROOM
	for i, d := range descs[:n] {
		if !bytes.Equal(s.Frame(d), frames[i]) {
			t.Errorf("frame %d: bytes differ", i)
		}
		if off := d.Addr % uint64(s.opts.FrameSize); off != wantOff {
			t.Errorf("frame %d at chunk offset %d, want %d", i, off, wantOff)
		}
		buf, off := s.Chunk(d.Addr)
		if len(buf) != int(s.opts.FrameSize) || uint64(off) != wantOff || &buf[off] != &s.Frame(d)[0] {
			t.Errorf("Chunk(%#x) = %d bytes, off %d; want the frame's chunk", d.Addr, len(buf), off)
		}
	}
	k.checkAccounting(t)

	if got := s.Transmit(descs[:n]); got != 3 {
		t.Fatalf("Transmit = %d, want 3", got)
	}
	var sent [][]byte
	k.send(func(b []byte) { sent = append(sent, bytes.Clone(b)) })
	for i := range frames {
		if i >= len(sent) || !bytes.Equal(sent[i], frames[i]) {
			t.Fatalf("sent frame %d differs or is missing (%d sent)", i, len(sent))
		}
	}
	if got := s.Complete(); got != 3 {
		t.Fatalf("Complete = %d, want 3", got)
	}
	k.checkAccounting(t)
	c := s.Counters()
	if c.RxFrames != 3 || c.TxFrames != 3 || c.Completed != 3 || c.TxInvalid != 0 {
		t.Errorf("counters = %+v", c)
	}
	if free, _, _, held, _, _ := k.frameCount(); held != 0 || free+int(s.opts.FillRingSize) != int(s.opts.NumFrames) {
		t.Errorf("after completion: free %d, held %d; want all frames free or on the fill ring", free, held)
	}
}

// TestFake_Wraparound runs many batches of varied sizes through small rings,
// so every index wraps many times, and checks order, bytes and accounting.
func TestFake_Wraparound(t *testing.T) {
	s, k := newFake(t, smallOpts())
	descs := make([]unix.XDPDesc, 5)
	var drop []uint64
	seq, want := 0, 0
	for round := 0; round < 2000; round++ {
		batch := 1 + round%7
		for range batch {
			if k.deliver(testFrame(seq, 64+seq%200)) == 1 {
				seq++
			}
		}
		n := s.Receive(descs[:1+round%5])
		drop = drop[:0]
		for _, d := range descs[:n] {
			if !bytes.Equal(s.Frame(d), testFrame(want, 64+want%200)) {
				t.Fatalf("round %d: frame %d has wrong bytes", round, want)
			}
			if want%3 == 0 {
				drop = append(drop, d.Addr)
			}
			want++
		}
		// Forward two of three frames, drop the third.
		tx := descs[:0]
		for _, d := range descs[:n] {
			if !containsAddr(drop, d.Addr) {
				tx = append(tx, d)
			}
		}
		if got := s.Recycle(drop); got != len(drop) {
			t.Fatalf("round %d: Recycle = %d, want %d", round, got, len(drop))
		}
		if sent := s.Transmit(tx); sent != len(tx) {
			// A 4-slot TX ring: send and retry once.
			k.send(nil)
			s.Complete()
			if s.Transmit(tx[sent:]) != len(tx)-sent {
				t.Fatalf("round %d: TX ring stuck", round)
			}
		}
		if round%3 == 0 {
			k.send(nil)
		}
		s.Complete()
		k.checkAccounting(t)
	}
	if want < 2000 {
		t.Fatalf("only %d frames went round", want)
	}
	c := s.Counters()
	if c.RxInvalid+c.TxInvalid+c.RecycleInvalid+c.CompletionInvalid != 0 {
		t.Errorf("invalid counters: %+v", c)
	}
}

func containsAddr(addrs []uint64, a uint64) bool {
	for _, x := range addrs {
		if x == a {
			return true
		}
	}
	return false
}

// TestFake_Ownership: a frame goes back to the kernel once; transmitting or
// recycling a frame the caller does not hold is refused and counted.
func TestFake_Ownership(t *testing.T) {
	s, k := newFake(t, smallOpts())
	k.deliver(testFrame(1, 80), testFrame(2, 80), testFrame(3, 80), testFrame(4, 80))
	descs := make([]unix.XDPDesc, 4)
	if s.Receive(descs) != 4 {
		t.Fatal("Receive did not get 4 frames")
	}
	fs := uint64(s.opts.FrameSize)
	notHeld := (descs[0].Addr &^ (fs - 1)) ^ fs // a neighbouring chunk
	for s.umem.isHeld(notHeld) || notHeld == descs[0].Addr&^(fs-1) {
		notHeld = (notHeld + fs) % uint64(len(s.umem.mem))
	}
	if got := s.Recycle([]uint64{descs[0].Addr}); got != 1 {
		t.Fatalf("Recycle of a held frame = %d, want 1", got)
	}
	if got := s.Recycle([]uint64{descs[0].Addr, notHeld, 1 << 40}); got != 0 {
		t.Errorf("Recycle of a recycled, a never-held and an out-of-umem address = %d, want 0", got)
	}
	if c := s.Counters(); c.RecycleInvalid != 3 || c.Recycled != 1 {
		t.Errorf("Recycled %d, RecycleInvalid %d; want 1, 3", c.Recycled, c.RecycleInvalid)
	}
	bad := []unix.XDPDesc{
		descs[0],                               // recycled already
		{Addr: notHeld, Len: 60},               // never held
		{Addr: descs[1].Addr},                  // empty
		{Addr: descs[2].Addr, Len: uint32(fs)}, // runs past its chunk: refused and recycled
	}
	if got := s.Transmit(bad); got != len(bad) {
		t.Fatalf("Transmit consumed %d of %d invalid descriptors", got, len(bad))
	}
	if c := s.Counters(); c.TxInvalid != 4 || c.TxFrames != 0 {
		t.Errorf("TxInvalid %d, TxFrames %d; want 4, 0", c.TxInvalid, c.TxFrames)
	}
	if k.send(nil) != 0 {
		t.Error("an invalid descriptor reached the TX ring")
	}
	if s.umem.isHeld(descs[1].Addr) || s.umem.isHeld(descs[2].Addr) || !s.umem.isHeld(descs[3].Addr) {
		t.Errorf("held after bad descriptors: %v %v %v, want false false true",
			s.umem.isHeld(descs[1].Addr), s.umem.isHeld(descs[2].Addr), s.umem.isHeld(descs[3].Addr))
	}
	// A descriptor moved back into the headroom (encapsulation) is fine.
	d := descs[3]
	d.Addr -= 40
	d.Len += 40
	if s.Transmit([]unix.XDPDesc{d, d}) != 2 {
		t.Fatal("Transmit did not consume both descriptors")
	}
	if c := s.Counters(); c.TxFrames != 1 || c.TxInvalid != 5 {
		t.Errorf("the same frame twice: TxFrames %d, TxInvalid %d; want 1, 5", c.TxFrames, c.TxInvalid)
	}
	k.send(nil)
	s.Complete()
	k.checkAccounting(t)
	if s.Frame(unix.XDPDesc{Addr: 1 << 40, Len: 10}) != nil || s.Frame(unix.XDPDesc{Addr: 100, Len: uint32(fs)}) != nil {
		t.Error("Frame of a descriptor outside one chunk is not nil")
	}
	if b, _ := s.Chunk(1 << 40); b != nil {
		t.Error("Chunk of an address outside the umem is not nil")
	}
}

func TestFake_TxRingFull(t *testing.T) {
	s, k := newFake(t, smallOpts()) // TX ring of 4
	for i := range 6 {
		k.deliver(testFrame(i, 64))
	}
	descs := make([]unix.XDPDesc, 8)
	n := s.Receive(descs)
	if n != 6 {
		t.Fatalf("Receive = %d, want 6", n)
	}
	if got := s.Transmit(descs[:n]); got != 4 {
		t.Fatalf("Transmit into a 4-slot ring = %d, want 4", got)
	}
	if got := s.Transmit(descs[4:n]); got != 0 {
		t.Fatalf("Transmit into a full ring = %d, want 0", got)
	}
	k.send(nil)
	if got := s.Transmit(descs[4:n]); got != 2 {
		t.Fatalf("Transmit after the kernel drained the ring = %d, want 2", got)
	}
	k.send(nil)
	s.Complete()
	k.checkAccounting(t)
}

func TestFake_Kick(t *testing.T) {
	s, k := newFake(t, smallOpts())
	k.deliver(testFrame(1, 64), testFrame(2, 64))
	descs := make([]unix.XDPDesc, 2)
	s.Receive(descs)
	// Flag clear: no syscall.
	s.Transmit(descs[:1])
	if c := s.Counters(); c.Kicks != 0 {
		t.Fatalf("Kicks = %d with the need-wakeup flag clear, want 0", c.Kicks)
	}
	// Flag set: one sendto per Transmit. The fake socket has no fd, so
	// the kernel says EBADF, which is counted, not panicked on.
	setFlag(&s.tx.queue, true)
	s.Transmit(descs[1:2])
	c := s.Counters()
	if c.Kicks != 1 || c.KickErrors != 1 || c.LastKickErrno != unix.EBADF {
		t.Fatalf("Kicks %d, KickErrors %d, LastKickErrno %v; want 1, 1, EBADF", c.Kicks, c.KickErrors, c.LastKickErrno)
	}
	if !s.TxNeedsWakeup() || s.FillNeedsWakeup() {
		t.Error("TxNeedsWakeup/FillNeedsWakeup do not show the flags")
	}
	// A transient error is retried by Complete while frames are left.
	s.kickPending = true
	s.Complete()
	if c := s.Counters(); c.Kicks != 2 {
		t.Errorf("Complete with a pending kick and frames on the ring: Kicks %d, want 2", c.Kicks)
	}
	k.send(nil)
	s.kickPending = true
	s.Complete()
	if c := s.Counters(); c.Kicks != 2 || s.kickPending {
		t.Errorf("Complete with a pending kick and an empty ring: Kicks %d (want 2), pending %v", c.Kicks, s.kickPending)
	}
}

func TestFake_Poll(t *testing.T) {
	s, k := newFake(t, smallOpts())
	if ok, err := s.Poll(0); ok || err != nil {
		t.Fatalf("Poll(0) on an empty ring = %v, %v", ok, err)
	}
	if c := s.Counters(); c.Polls != 0 {
		t.Fatalf("Poll(0) without need-wakeup made %d poll calls, want 0", c.Polls)
	}
	setFlag(&s.fill.queue, true)
	if ok, err := s.Poll(0); ok || err != nil {
		t.Fatalf("Poll(0) with need-wakeup = %v, %v", ok, err)
	}
	if c := s.Counters(); c.Polls != 1 {
		t.Fatalf("Poll(0) with need-wakeup made %d poll calls, want 1", c.Polls)
	}
	start := time.Now()
	if ok, _ := s.Poll(30 * time.Millisecond); ok {
		t.Fatal("Poll(30ms) on an empty ring reported frames")
	}
	if d := time.Since(start); d < 25*time.Millisecond || d > 2*time.Second {
		t.Errorf("Poll(30ms) returned after %v", d)
	}
	k.deliver(testFrame(1, 64))
	if ok, _ := s.Poll(time.Hour); !ok {
		t.Fatal("Poll with a frame waiting reported none")
	}
	if c := s.Counters(); c.Polls != 2 {
		t.Errorf("Poll with a frame waiting made a syscall (%d polls, want 2)", c.Polls)
	}
}

func TestFake_Closed(t *testing.T) {
	s, k := newFake(t, smallOpts())
	k.deliver(testFrame(1, 64))
	descs := make([]unix.XDPDesc, 1)
	if s.Receive(descs) != 1 {
		t.Fatal("no frame")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close = %v, want nil", err)
	}
	if s.Receive(descs) != 0 || s.Transmit(descs) != 0 || s.Complete() != 0 || s.Recycle([]uint64{descs[0].Addr}) != 0 {
		t.Error("hot-path methods did work after Close")
	}
	if s.Frame(descs[0]) != nil || s.FillNeedsWakeup() || s.TxNeedsWakeup() {
		t.Error("Frame or the flags are readable after Close")
	}
	if _, err := s.Poll(0); !errors.Is(err, ErrClosed) {
		t.Errorf("Poll after Close = %v, want ErrClosed", err)
	}
	if _, err := s.Stats(); !errors.Is(err, ErrClosed) {
		t.Errorf("Stats after Close = %v, want ErrClosed", err)
	}
	if s.FD() != -1 {
		t.Errorf("FD after Close = %d, want -1", s.FD())
	}
}

// TestFake_ConcurrentKernel runs the fake kernel on its own goroutine, as
// the real one is, and checks that every frame arrives once, in order, and
// intact, through wrapping rings. Both sides yield when they can do
// nothing: with one P (-cpu 1) a side that spins on a full or empty ring
// would hold it until preempted, about a frame per 10 ms.
func TestFake_ConcurrentKernel(t *testing.T) {
	s, k := newFake(t, smallOpts())
	const total = 20000
	stop, finished := make(chan struct{}), make(chan struct{})
	var delivered int
	go func() {
		defer close(finished)
		seq, sent := 0, 0
		for sent < total {
			select {
			case <-stop:
				return
			default:
			}
			progress := 0
			if seq < total && k.deliver(testFrame(seq, 64+seq%64)) == 1 {
				seq++
				progress++
			}
			n := k.send(func(b []byte) {})
			sent += n
			if progress+n == 0 {
				runtime.Gosched()
			}
		}
		delivered = seq
	}()
	// The kernel's goroutine uses the socket's memory: it must be gone
	// before the cleanup unmaps it, on a failure too.
	defer func() { close(stop); <-finished }()
	descs := make([]unix.XDPDesc, 4)
	want := 0
	// A bound only for a lost frame, which would otherwise hang the test.
	deadline := time.Now().Add(2 * time.Minute)
	for want < total && time.Now().Before(deadline) {
		s.Complete()
		n := s.Receive(descs)
		if n == 0 {
			runtime.Gosched()
			continue
		}
		for _, d := range descs[:n] {
			if !bytes.Equal(s.Frame(d), testFrame(want, 64+want%64)) {
				t.Errorf("frame %d: wrong bytes", want)
			}
			want++
		}
		for sent := 0; sent < n; {
			m := s.Transmit(descs[sent:n])
			sent += m
			s.Complete()
			if m == 0 {
				runtime.Gosched()
			}
		}
	}
	if want != total {
		t.Fatalf("received %d of %d frames", want, total)
	}
	<-finished
	if delivered != total {
		t.Errorf("the kernel delivered %d frames, want %d", delivered, total)
	}
	s.Complete()
	k.checkAccounting(t)
}

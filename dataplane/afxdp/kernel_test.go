package afxdp

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"xlb/dataplane"

	"xlb/internal/nettest"
)

// The privileged tests: a throwaway namespace with a veth pair, the
// redirect program on afxt-x, our socket on its queue 0, and an AF_PACKET
// socket on afxt-p that injects frames and captures what we send. Frames
// carry the local experimental EtherType 0x88B5, so no IP address is used
// and nothing else is captured.

const etherTest = 0x88b5

type env struct {
	ns   *nettest.NS
	veth *vethPair
	prog *redirectProg
	pkt  int // AF_PACKET socket on the peer
}

func newEnv(tb testing.TB, mode link.XDPAttachFlags) *env {
	tb.Helper()
	ns := nettest.NewNS(tb, nettest.UniqueName("afxt"))
	e := &env{ns: ns, veth: newVethPair(tb, ns), prog: newRedirectProg(tb)}
	e.prog.attach(tb, ns, e.veth.x, mode)
	err := ns.Do(func() error {
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, int(nettest.Htons(etherTest)))
		if err != nil {
			return err
		}
		e.pkt = fd
		if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: nettest.Htons(etherTest), Ifindex: e.veth.p}); err != nil {
			return err
		}
		return unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Usec: 200_000})
	})
	if e.pkt > 0 {
		tb.Cleanup(func() { unix.Close(e.pkt) })
	}
	if err != nil {
		tb.Fatalf("AF_PACKET socket on %s: %v", e.veth.pName, err)
	}
	return e
}

// socket makes a Socket on afxt-x queue 0 inside the namespace and puts it
// in the XSKMAP; closed at the end of the test.
func (e *env) socket(tb testing.TB, o Opts) *Socket {
	tb.Helper()
	s, err := e.newSocket(tb, 0, o)
	if errors.Is(err, ErrUnsupported) {
		tb.Skipf("kernel lacks AF_XDP: %v", err)
	}
	if err != nil {
		tb.Fatalf("New: %v", err)
	}
	e.prog.register(tb, s)
	return s
}

func (e *env) newSocket(tb testing.TB, queue int, o Opts) (*Socket, error) {
	tb.Helper()
	var s *Socket
	err := e.ns.Do(func() (err error) {
		s, err = New(e.veth.x, queue, o)
		return err
	})
	if s != nil {
		tb.Cleanup(func() {
			if err := s.Close(); err != nil {
				tb.Errorf("Close: %v", err)
			}
		})
	}
	return s, err
}

// frame returns an n-byte test frame from the peer to x carrying seq.
func (e *env) frame(seq, n int) []byte {
	f := make([]byte, n)
	copy(f[0:6], e.veth.xMAC)
	copy(f[6:12], e.veth.pMAC)
	binary.BigEndian.PutUint16(f[12:14], etherTest)
	binary.BigEndian.PutUint32(f[14:18], uint32(seq))
	for i := 18; i < n; i++ {
		f[i] = byte(seq + i)
	}
	return f
}

// inject sends frames from the peer towards x.
func (e *env) inject(tb testing.TB, frames ...[]byte) {
	tb.Helper()
	to := &unix.SockaddrLinklayer{Protocol: nettest.Htons(etherTest), Ifindex: e.veth.p, Halen: 6}
	copy(to.Addr[:], e.veth.xMAC)
	for _, f := range frames {
		if err := unix.Sendto(e.pkt, f, 0, to); err != nil {
			tb.Fatalf("injecting a frame: %v", err)
		}
	}
}

// capture returns the next n frames the peer receives (fewer on timeout).
func (e *env) capture(tb testing.TB, n int, timeout time.Duration) [][]byte {
	tb.Helper()
	var got [][]byte
	buf := make([]byte, 4096)
	deadline := time.Now().Add(timeout)
	for len(got) < n && time.Now().Before(deadline) {
		m, ok, err := nettest.RecvIncoming(e.pkt, buf)
		if err != nil {
			tb.Fatalf("capturing on the peer: %v", err)
		}
		if !ok {
			continue
		}
		got = append(got, bytes.Clone(buf[:m]))
	}
	return got
}

// receiveN receives n frames through s, idling in Poll between tries.
func receiveN(tb testing.TB, s *Socket, n int, timeout time.Duration) []unix.XDPDesc {
	tb.Helper()
	descs := make([]unix.XDPDesc, n)
	got := 0
	deadline := time.Now().Add(timeout)
	for got < n && time.Now().Before(deadline) {
		got += s.Receive(descs[got:])
		if got < n {
			if _, err := s.Poll(10 * time.Millisecond); err != nil {
				tb.Fatalf("Poll: %v", err)
			}
		}
	}
	if got < n {
		st, _ := s.Stats()
		tb.Fatalf("received %d of %d frames in %v; stats %+v", got, n, timeout, st)
	}
	return descs
}

// completeAll reaps completions until want frames came back.
func completeAll(tb testing.TB, s *Socket, want uint64) {
	tb.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for s.Counters().Completed < want && time.Now().Before(deadline) {
		if s.Complete() == 0 {
			time.Sleep(time.Millisecond)
		}
	}
	if c := s.Counters(); c.Completed != want {
		tb.Fatalf("completed %d of %d frames; counters %+v", c.Completed, want, c)
	}
}

var xdpModes = []struct {
	name  string
	flags link.XDPAttachFlags
}{
	{"native", link.XDPDriverMode},
	{"generic", link.XDPGenericMode},
}

// TestKernel_ReceiveTransmit: frames injected on the peer arrive through
// Receive with their bytes; sent back with the MACs swapped through
// Transmit, the peer captures them. 48 frames: more than copy mode sends per
// sendto, so Complete must retry the wakeup.
func TestKernel_ReceiveTransmit(t *testing.T) {
	for _, m := range xdpModes {
		t.Run(m.name, func(t *testing.T) {
			e := newEnv(t, m.flags)
			s := e.socket(t, DefaultOpts())
			t.Logf("XDP %s, AF_XDP bound in %v mode; ring flags: tx need-wakeup %v, fill need-wakeup %v",
				m.name, s.Mode(), s.TxNeedsWakeup(), s.FillNeedsWakeup())
			if !s.TxNeedsWakeup() {
				t.Error("TX ring need-wakeup flag not set after bind; the flags word is not mapped or not read")
			}
			const n = 48
			sent := make([][]byte, n)
			for i := range sent {
				sent[i] = e.frame(i, 60+i*29)
			}
			e.inject(t, sent...)
			descs := receiveN(t, s, n, 3*time.Second)
			for i, d := range descs {
				if !bytes.Equal(s.Frame(d), sent[i]) {
					t.Fatalf("frame %d: got % x, want % x", i, s.Frame(d), sent[i])
				}
				if off := d.Addr % uint64(s.Opts().FrameSize); off < uint64(s.Opts().Headroom) {
					t.Fatalf("frame %d at chunk offset %d, inside the %d-byte headroom", i, off, s.Opts().Headroom)
				} else if i == 0 {
					t.Logf("frames arrive at chunk offset %d (Headroom %d + XDP_PACKET_HEADROOM %d)", off, s.Opts().Headroom, unix.XDP_PACKET_HEADROOM)
				}
			}
			want := make([][]byte, n)
			for i, d := range descs {
				f := s.Frame(d)
				var tmp [6]byte
				copy(tmp[:], f[0:6])
				copy(f[0:6], f[6:12])
				copy(f[6:12], tmp[:])
				want[i] = bytes.Clone(f)
			}
			if got := s.Transmit(descs); got != n {
				t.Fatalf("Transmit = %d, want %d", got, n)
			}
			// Copy mode sends part of the batch per wakeup; Complete
			// wakes the kernel again for the rest. The peer's socket
			// buffer keeps what arrives meanwhile.
			completeAll(t, s, n)
			got := e.capture(t, n, 3*time.Second)
			if len(got) != n {
				t.Fatalf("peer captured %d of %d frames", len(got), n)
			}
			for i := range got {
				if !bytes.Equal(got[i], want[i]) {
					t.Fatalf("captured frame %d: got % x, want % x", i, got[i], want[i])
				}
			}
			st, err := s.Stats()
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("stats: %+v", st)
			if st.RxFrames != n || st.TxFrames != n || st.Completed != n || st.KickErrors != 0 || st.TxInvalid != 0 {
				t.Errorf("counters %+v: want %d received, sent and completed, no errors", st.Counters, n)
			}
			if s.TxNeedsWakeup() && st.Kicks == 0 {
				t.Error("TX need-wakeup is set but Transmit never kicked")
			}
			if st.Kernel.RxDropped != 0 || st.Kernel.TxInvalidDescs != 0 || st.Kernel.RxInvalidDescs != 0 {
				t.Errorf("kernel stats %+v: want no drops or invalid descriptors", st.Kernel)
			}
			// The hot path allocates nothing against the real kernel too.
			if a := testing.AllocsPerRun(50, func() {
				s.Receive(descs)
				s.Complete()
				_, _ = s.Poll(0)
			}); a != 0 {
				t.Errorf("Receive/Complete/Poll allocate %v times, want 0", a)
			}
		})
	}
}

// TestKernel_FramePort: the dataplane.FramePort adapter against the kernel.
// Of every four frames: one is forwarded after "encapsulation" (a new
// Ethernet header written into the headroom, Off moved back), one forwarded
// as is, one dropped, one passed; the peer sees exactly the two forwarded
// ones.
func TestKernel_FramePort(t *testing.T) {
	e := newEnv(t, link.XDPDriverMode)
	s := e.socket(t, DefaultOpts())
	fp, err := NewFramePort(s, 64)
	if err != nil {
		t.Fatal(err)
	}
	const n = 16
	in := make([][]byte, n)
	for i := range in {
		in[i] = e.frame(i, 100)
	}
	e.inject(t, in...)
	frames := make([]dataplane.Frame, 64)
	got := 0
	deadline := time.Now().Add(3 * time.Second)
	for got < n && time.Now().Before(deadline) {
		m := fp.Receive(frames[got:])
		got += m
		if m == 0 {
			_, _ = s.Poll(10 * time.Millisecond)
		}
	}
	if got != n {
		t.Fatalf("FramePort.Receive got %d of %d frames", got, n)
	}
	outer := make([]byte, 14)
	copy(outer[0:6], e.veth.pMAC)
	copy(outer[6:12], e.veth.xMAC)
	binary.BigEndian.PutUint16(outer[12:14], etherTest)
	var want [][]byte
	for i := range frames[:n] {
		f := &frames[i]
		if !bytes.Equal(f.Data(), in[i]) {
			t.Fatalf("frame %d: bytes differ", i)
		}
		if f.Off < dataplane.Headroom || len(f.Buf) != int(s.Opts().FrameSize) {
			t.Fatalf("frame %d: Off %d, Buf %d bytes; want Off >= %d in a whole chunk", i, f.Off, len(f.Buf), dataplane.Headroom)
		}
		switch i % 4 {
		case 0:
			copy(f.Buf[f.Off-len(outer):f.Off], outer)
			f.Off -= len(outer)
			f.Len += len(outer)
			f.Verdict = dataplane.VerdictForward
			want = append(want, bytes.Clone(f.Data()))
		case 1:
			d := f.Data()
			copy(d[0:6], e.veth.pMAC)
			copy(d[6:12], e.veth.xMAC)
			f.Verdict = dataplane.VerdictForward
			want = append(want, bytes.Clone(d))
		case 2:
			f.Verdict = dataplane.VerdictDrop
		case 3:
			f.Verdict = dataplane.VerdictPass
		}
	}
	fp.Complete(frames[:n])
	captured := e.capture(t, len(want), 3*time.Second)
	if len(captured) != len(want) {
		t.Fatalf("peer captured %d frames, want %d", len(captured), len(want))
	}
	for i := range want {
		if !bytes.Equal(captured[i], want[i]) {
			t.Fatalf("captured frame %d: got % x, want % x", i, captured[i], want[i])
		}
	}
	if extra := e.capture(t, 1, 100*time.Millisecond); len(extra) != 0 {
		t.Errorf("peer captured a frame that was dropped or passed: % x", extra[0])
	}
	if c := fp.Counters(); c != (FramePortCounters{Passed: n / 4, Dropped: n / 4}) {
		t.Errorf("port counters %+v, want %d passed and %d dropped", c, n/4, n/4)
	}
	// Every frame comes back: completed or recycled.
	completeAll(t, s, uint64(len(want)))
	fp.Receive(frames)
	if _, err := s.Stats(); err != nil {
		t.Fatal(err)
	}
	held := 0
	for _, w := range s.umem.held {
		for ; w != 0; w &= w - 1 {
			held++
		}
	}
	if held != 0 {
		t.Errorf("%d frames still held after Complete", held)
	}
}

// ringMappings returns the lines of /proc/self/maps that map the socket
// with inode ino or cover addr.
func ringMappings(t *testing.T, ino uint64, addr uintptr) (sock, umem []string) {
	t.Helper()
	b, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Fatal(err)
	}
	tag := fmt.Sprintf("socket:[%d]", ino)
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, tag) {
			sock = append(sock, l)
		}
		var lo, hi uintptr
		if _, err := fmt.Sscanf(l, "%x-%x", &lo, &hi); err == nil && lo <= addr && addr < hi {
			umem = append(umem, l)
		}
	}
	return sock, umem
}

// TestKernel_CloseRebind: Close unmaps the four rings and the umem and
// closes the fd, so the same queue binds again at once and receives.
func TestKernel_CloseRebind(t *testing.T) {
	e := newEnv(t, link.XDPDriverMode)
	s := e.socket(t, DefaultOpts())
	var st unix.Stat_t
	if err := unix.Fstat(s.FD(), &st); err != nil {
		t.Fatal(err)
	}
	fd := s.FD()
	base := uintptr(unsafe.Pointer(unsafe.SliceData(s.umem.mem)))
	sock, um := ringMappings(t, st.Ino, base)
	if len(sock) != 4 || len(um) != 1 {
		t.Fatalf("before Close: %d ring mappings (want 4), %d umem mappings (want 1):\n%s", len(sock), len(um), strings.Join(append(sock, um...), "\n"))
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	sock, um = ringMappings(t, st.Ino, base)
	if len(sock) != 0 || len(um) != 0 {
		t.Fatalf("after Close, still mapped:\n%s", strings.Join(append(sock, um...), "\n"))
	}
	var st2 unix.Stat_t
	if err := unix.Fstat(fd, &st2); err == nil && st2.Ino == st.Ino {
		t.Fatalf("fd %d still open after Close", fd)
	}

	start := time.Now()
	s2 := e.socket(t, DefaultOpts())
	t.Logf("re-bind of queue 0 took %v in %d bind attempt(s)", time.Since(start), s2.bindAttempts)
	e.inject(t, e.frame(7, 64))
	d := receiveN(t, s2, 1, 3*time.Second)
	if !bytes.Equal(s2.Frame(d[0]), e.frame(7, 64)) {
		t.Fatal("the re-bound socket received the wrong bytes")
	}
}

// TestKernel_QueueBusy: a second socket on a held queue retries EBUSY for
// BindRetry, then fails with ErrQueueBusy.
func TestKernel_QueueBusy(t *testing.T) {
	e := newEnv(t, link.XDPDriverMode)
	e.socket(t, DefaultOpts())
	o := DefaultOpts()
	o.BindRetry = 100 * time.Millisecond
	start := time.Now()
	s, err := e.newSocket(t, 0, o)
	if s != nil || !errors.Is(err, ErrQueueBusy) || !strings.Contains(err.Error(), "queue 0") {
		t.Fatalf("New on a held queue = %v, %v; want ErrQueueBusy naming queue 0", s, err)
	}
	if d := time.Since(start); d < o.BindRetry || d > 2*time.Second {
		t.Errorf("gave up after %v, want about BindRetry %v", d, o.BindRetry)
	}
	t.Log(err)
}

// TestKernel_BindModes: copy forced with ZeroCopyOff; zero-copy on veth
// either binds zero-copy or fails with ErrZeroCopyUnsupported.
func TestKernel_BindModes(t *testing.T) {
	e := newEnv(t, link.XDPDriverMode)
	o := DefaultOpts()
	o.ZeroCopy = ZeroCopyOff
	s := e.socket(t, o)
	if s.Mode() != ModeCopy {
		t.Fatalf("ZeroCopyOff bound in %v mode", s.Mode())
	}
	e.inject(t, e.frame(1, 64))
	receiveN(t, s, 1, 3*time.Second)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	o.ZeroCopy = ZeroCopyOn
	s, err := e.newSocket(t, 0, o)
	switch {
	case err == nil && s.Mode() == ModeZeroCopy:
		t.Log("veth on this kernel binds AF_XDP zero-copy")
	case err == nil:
		t.Fatalf("ZeroCopyOn bound in %v mode", s.Mode())
	case errors.Is(err, ErrZeroCopyUnsupported):
		t.Logf("veth on this kernel refuses zero-copy: %v", err)
	default:
		t.Fatalf("ZeroCopyOn: %v, want success or ErrZeroCopyUnsupported", err)
	}
}

// TestKernel_BadBind: a missing interface and a queue the interface does
// not have are clear errors.
func TestKernel_BadBind(t *testing.T) {
	e := newEnv(t, link.XDPDriverMode)
	var err error
	_ = e.ns.Do(func() error {
		_, err = New(1<<30, 0, DefaultOpts())
		return nil
	})
	if !errors.Is(err, unix.ENODEV) || !strings.Contains(err.Error(), "no such interface") {
		t.Errorf("New on a missing interface = %v, want ENODEV, 'no such interface'", err)
	}
	_, err = e.newSocket(t, 5, DefaultOpts())
	if !errors.Is(err, unix.EINVAL) || !strings.Contains(err.Error(), "queue 5") {
		t.Errorf("New on queue 5 of a one-queue veth = %v, want EINVAL naming queue 5", err)
	}
}

// TestKernel_FillStarved: with 8 frames and no Receive, the kernel fills 8
// and drops the rest, and Stats shows it.
func TestKernel_FillStarved(t *testing.T) {
	e := newEnv(t, link.XDPDriverMode)
	o := DefaultOpts()
	o.NumFrames, o.FillRingSize, o.CompletionRingSize, o.RxRingSize, o.TxRingSize = 8, 8, 8, 16, 8
	s := e.socket(t, o)
	for i := range 20 {
		e.inject(t, e.frame(i, 64))
	}
	var st Stats
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		var err error
		if st, err = s.Stats(); err != nil {
			t.Fatal(err)
		}
		if st.Kernel.RxDropped >= 12 {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Logf("kernel stats with 8 frames for 20: %+v", st.Kernel)
	if st.Kernel.RxDropped != 12 || st.Kernel.FillRingEmpty == 0 {
		t.Errorf("kernel stats %+v: want 12 rx dropped and fill-ring-empty > 0", st.Kernel)
	}
	descs := make([]unix.XDPDesc, 16)
	if n := s.Receive(descs); n != 8 {
		t.Errorf("Receive = %d, want the 8 frames that had buffers", n)
	}
}

// TestKernel_Poll: Poll sleeps while nothing arrives, and wakes when a
// frame does.
func TestKernel_Poll(t *testing.T) {
	e := newEnv(t, link.XDPDriverMode)
	s := e.socket(t, DefaultOpts())
	c0 := s.Counters()
	if ok, err := s.Poll(50 * time.Millisecond); ok || err != nil {
		t.Fatalf("Poll on an idle queue = %v, %v", ok, err)
	}
	// It slept in poll(2), which timed out.
	if c := s.Counters(); c.Polls != c0.Polls+1 || c.PollWakeups != c0.PollWakeups {
		t.Fatalf("idle Poll: %d poll(2) calls, %d readable; want 1 that timed out", c.Polls-c0.Polls, c.PollWakeups-c0.PollWakeups)
	}

	// A frame sent while Poll sleeps wakes it: poll(2) returns readable,
	// not by its timeout. Whether the frame arrives before the timeout is
	// up to the scheduler of a loaded machine, so a round whose poll timed
	// out first (the frame then waits in the ring) is taken again.
	to := &unix.SockaddrLinklayer{Protocol: nettest.Htons(etherTest), Ifindex: e.veth.p, Halen: 6}
	copy(to.Addr[:], e.veth.xMAC)
	descs := make([]unix.XDPDesc, 8)
	for round := 1; ; round++ {
		before := s.Counters()
		type result struct {
			ok  bool
			err error
		}
		done := make(chan result, 1)
		go func() {
			ok, err := s.Poll(MaxPollTimeout)
			done <- result{ok, err}
		}()
		for s.Counters().Polls == before.Polls { // Poll is on its way into poll(2)
			runtime.Gosched()
		}
		if err := unix.Sendto(e.pkt, e.frame(1, 64), 0, to); err != nil {
			t.Fatal(err)
		}
		r := <-done
		if r.err != nil {
			t.Fatalf("Poll: %v", r.err)
		}
		woke := s.Counters().PollWakeups - before.PollWakeups
		if r.ok && woke == 1 {
			return
		}
		if woke != 0 {
			t.Fatalf("poll(2) returned readable but Poll = %v", r.ok)
		}
		// The poll timed out before the frame came: take the frame (it
		// must come) and go again.
		got := 0
		for got == 0 {
			got = s.Receive(descs)
			runtime.Gosched()
		}
		addrs := make([]uint64, got)
		for i := range got {
			addrs[i] = descs[i].Addr
		}
		s.Recycle(addrs)
		if round == 20 {
			t.Fatalf("in 20 rounds poll(2) never woke for a frame sent while it slept")
		}
	}
}

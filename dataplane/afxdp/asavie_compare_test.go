package afxdp

import (
	"bytes"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/asavie/xdp"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Our socket against github.com/asavie/xdp v0.3.3, the library our own
// socket layer replaced, on the same veth pair, redirect program (asavie's
// socket goes into our XSKMAP) and geometry (asavieOpts): the benchmarks
// give the numbers, the TestAsavie_ tests show the defects that made us
// write our own. Both bind in copy mode: veth has no zero-copy AF_XDP.

const (
	cmpBurst    = 64 // frames per injection: one NAPI budget, under veth's 256-frame ring
	cmpBursts   = 64 // bursts per benchmark op: 4096 frames
	cmpFrameLen = 64
	cmpTimeout  = 2 * time.Second
)

// BenchmarkCompareRX: the peer injects bursts of 64-byte frames; each
// socket receives them and gives the frames back (ours: Recycle; asavie:
// Receive frees them, Fill hands them out again).
func BenchmarkCompareRX(b *testing.B) {
	b.Run("ours", func(b *testing.B) { benchOurs(b, false) })
	b.Run("asavie", func(b *testing.B) { benchAsavie(b, false) })
}

// BenchmarkCompareTXRX: as BenchmarkCompareRX, but each frame is sent back
// out with its MACs swapped, and every op ends when the peer has counted
// all of them.
func BenchmarkCompareTXRX(b *testing.B) {
	b.Run("ours", func(b *testing.B) { benchOurs(b, true) })
	b.Run("asavie", func(b *testing.B) { benchAsavie(b, true) })
}

// cmpRun collects what a comparison benchmark reports per frame.
type cmpRun struct {
	frames   uint64
	syscalls uint64        // the socket's own: sendto and poll
	harness  time.Duration // in the injector's sendmmsg and waiting at the peer
	mallocs  uint64
	ms       runtime.MemStats
}

func (r *cmpRun) start() {
	runtime.ReadMemStats(&r.ms)
	r.mallocs = r.ms.Mallocs
}

func (r *cmpRun) inject(tb testing.TB, in *injector) {
	t := time.Now()
	in.send(tb)
	r.harness += time.Since(t)
}

func (r *cmpRun) awaitPeer(tb testing.TB, in *injector, n uint64) {
	t := time.Now()
	in.awaitArrived(tb, n, cmpTimeout)
	r.harness += time.Since(t)
}

// report: ns/frame and frames/s for the whole loop (injection and peer
// included, the same for both sockets); sock-ns/frame without them, which
// is the socket's share; syscalls/frame made by the socket; allocs/frame
// over the whole loop.
func (r *cmpRun) report(b *testing.B) {
	runtime.ReadMemStats(&r.ms)
	if r.frames == 0 {
		b.Fatal("no frames")
	}
	f := float64(r.frames)
	el := b.Elapsed()
	b.ReportMetric(float64(el.Nanoseconds())/f, "ns/frame")
	b.ReportMetric(f/el.Seconds(), "frames/s")
	b.ReportMetric(float64((el-r.harness).Nanoseconds())/f, "sock-ns/frame")
	b.ReportMetric(float64(r.syscalls)/f, "syscalls/frame")
	b.ReportMetric(float64(r.ms.Mallocs-r.mallocs)/f, "allocs/frame")
}

func cmpFrames(e *env) [][]byte {
	frames := make([][]byte, cmpBurst)
	for i := range frames {
		frames[i] = e.frame(i, cmpFrameLen)
	}
	return frames
}

// benchOurs drives our socket as a worker does: Receive until the burst is
// in, Poll(0) while the ring is empty (a syscall only if the kernel set
// need-wakeup), Poll with a timeout if that goes on.
func benchOurs(b *testing.B, tx bool) {
	e := newEnv(b, link.XDPDriverMode)
	s := e.socket(b, DefaultOpts())
	in := newInjector(b, e, cmpFrames(e))
	descs := make([]unix.XDPDesc, cmpBurst)
	addrs := make([]uint64, cmpBurst)
	var r cmpRun
	c0 := s.Counters()
	b.ReportAllocs()
	r.start()
	for b.Loop() {
		for range cmpBursts {
			r.inject(b, in)
			oursReceive(b, s, descs)
			if tx {
				for _, d := range descs {
					swapMACs(s.Frame(d))
				}
				oursTransmit(b, s, descs)
			} else {
				for i, d := range descs {
					addrs[i] = d.Addr
				}
				s.Recycle(addrs)
			}
			r.frames += cmpBurst
		}
		if tx {
			oursDrain(b, s, c0.Completed+r.frames)
			r.awaitPeer(b, in, cmpBurst*cmpBursts)
		}
	}
	c := s.Counters()
	r.syscalls = c.Kicks - c0.Kicks + c.Polls - c0.Polls
	if c.RxInvalid|c.TxInvalid|c.RecycleInvalid|c.KickErrors != 0 {
		b.Fatalf("counters %+v: want no invalid descriptors or kick errors", c)
	}
	r.report(b)
}

func oursReceive(b *testing.B, s *Socket, descs []unix.XDPDesc) {
	var deadline time.Time
	for got, spins := 0, 0; got < len(descs); {
		n := s.Receive(descs[got:])
		got += n
		if n > 0 {
			continue
		}
		spins++
		wait := time.Duration(0)
		if spins > 64 {
			wait = time.Millisecond
			if deadline.IsZero() {
				deadline = time.Now().Add(cmpTimeout)
			} else if time.Now().After(deadline) {
				b.Fatalf("ours received %d of %d frames in %v", got, len(descs), cmpTimeout)
			}
		}
		if _, err := s.Poll(wait); err != nil {
			b.Fatal(err)
		}
	}
}

func oursTransmit(b *testing.B, s *Socket, descs []unix.XDPDesc) {
	deadline := time.Now().Add(cmpTimeout)
	for sent := 0; sent < len(descs); {
		n := s.Transmit(descs[sent:])
		sent += n
		if n == 0 {
			if time.Now().After(deadline) {
				b.Fatalf("ours: TX ring full for %v", cmpTimeout)
			}
			s.Complete()
		}
	}
	s.Complete()
}

func oursDrain(b *testing.B, s *Socket, completed uint64) {
	deadline := time.Now().Add(cmpTimeout)
	for s.Counters().Completed < completed {
		if s.Complete() == 0 && time.Now().After(deadline) {
			b.Fatalf("ours: %d of %d frames completed in %v", s.Counters().Completed, completed, cmpTimeout)
		}
	}
}

// asavieCalls counts the calls of asavie's API that make a syscall:
// Transmit one sendto or more (it retries EINTR), Poll one poll(2) or more
// whenever anything is filled or in flight. So the counts are a floor.
type asavieCalls struct{ transmits, polls uint64 }

func (c *asavieCalls) transmit(x *xdp.Socket, descs []xdp.Desc) int {
	c.transmits++
	return x.Transmit(descs)
}

func (c *asavieCalls) poll(b *testing.B, x *xdp.Socket, ms int) int {
	if x.NumFilled() > 0 || x.NumTransmitted() > 0 {
		c.polls++
	}
	n, _, err := x.Poll(ms)
	if err != nil {
		b.Fatalf("asavie Poll: %v", err)
	}
	return n
}

// benchAsavie drives asavie's socket as its package documentation does:
// Fill(GetDescs(NumFreeFillSlots())), Poll, Receive(n), Transmit; only
// empty batches are not transmitted (see TestAsavie_TransmitAlwaysSyscalls).
func benchAsavie(b *testing.B, tx bool) {
	e := newEnv(b, link.XDPDriverMode)
	x := newAsavie(b, e, asavieOpts())
	in := newInjector(b, e, cmpFrames(e))
	var (
		r     cmpRun
		calls asavieCalls
	)
	b.ReportAllocs()
	r.start()
	for b.Loop() {
		for range cmpBursts {
			x.Fill(x.GetDescs(x.NumFreeFillSlots()))
			r.inject(b, in)
			deadline := time.Now().Add(cmpTimeout)
			for got := 0; got < cmpBurst; {
				rx := x.Receive(calls.poll(b, x, 100))
				got += len(rx)
				if len(rx) == 0 && time.Now().After(deadline) {
					b.Fatalf("asavie received %d of %d frames in %v", got, cmpBurst, cmpTimeout)
				}
				if !tx {
					continue
				}
				for _, d := range rx {
					swapMACs(x.GetFrame(d))
				}
				for len(rx) > 0 {
					rx = rx[calls.transmit(x, rx):]
				}
			}
			r.frames += cmpBurst
		}
		if tx {
			asavieDrain(b, x, &calls)
			r.awaitPeer(b, in, cmpBurst*cmpBursts)
		}
	}
	r.syscalls = calls.transmits + calls.polls
	r.report(b)
}

// asavieDrain polls until nothing is in flight. Copy mode sends at most 32
// frames per wakeup; a socket bound without need-wakeup, as asavie's are,
// has the kernel's poll send what is left, and Poll reaps the completions.
func asavieDrain(b *testing.B, x *xdp.Socket, calls *asavieCalls) {
	deadline := time.Now().Add(cmpTimeout)
	for x.NumTransmitted() > 0 {
		if time.Now().After(deadline) {
			b.Fatalf("asavie: %d frames still in flight after %v", x.NumTransmitted(), cmpTimeout)
		}
		calls.poll(b, x, 100)
	}
}

// TestAsavie_CloseLeavesQueueBound: asavie's Close closes the fd but never
// unmaps the four rings; the mappings hold the socket open, so the kernel
// never releases it and the queue stays bound: a new socket's bind gets
// EBUSY for as long as the process lives. Unmapping what Close left behind
// frees the queue, which shows the mappings are the cause. Ours unmaps
// everything and the queue binds again at once: TestKernel_CloseRebind.
func TestAsavie_CloseLeavesQueueBound(t *testing.T) {
	e := newEnv(t, link.XDPDriverMode)
	x := newAsavie(t, e, asavieOpts())
	ino := socketInode(t, x.FD())
	fd := x.FD()
	if err := x.Close(); err != nil {
		t.Fatalf("asavie Close: %v", err)
	}
	if err := unix.Fstat(fd, new(unix.Stat_t)); err == nil {
		t.Fatalf("asavie's fd %d still open after Close", fd)
	}
	if m := socketMappings(t, ino); len(m) != 4 {
		t.Fatalf("after asavie's Close, %d mappings of socket:[%d] remain, want its 4 rings", len(m), ino)
	}

	o := DefaultOpts()
	o.BindRetry = 300 * time.Millisecond
	s, err := e.newSocket(t, 0, o)
	if s != nil || !errors.Is(err, ErrQueueBusy) {
		t.Fatalf("bind after asavie's Close = %v, %v; want EBUSY for all of BindRetry (ErrQueueBusy)", s, err)
	}
	t.Logf("after asavie's Close: %v", err)

	unmapSocket(t, ino)
	start := time.Now()
	s = e.socket(t, DefaultOpts())
	t.Logf("after unmapping asavie's leftover rings the queue binds again in %v, %d attempt(s)", time.Since(start), s.bindAttempts)
	e.inject(t, e.frame(1, 64))
	receiveN(t, s, 1, 3*time.Second)
}

// TestAsavie_TransmitAlwaysSyscalls: asavie's Transmit calls sendto(2) on
// every call, also with nothing to send: it neither binds with
// XDP_USE_NEED_WAKEUP nor maps the rings' flags words, so it cannot know
// whether the kernel asks. The kernel counts each wakeup that finds the TX
// ring empty (XDP_STATISTICS tx_ring_empty_descs), so n empty Transmits
// show up there as n. Ours makes no syscall and the kernel counts nothing.
//
// On a non-empty batch the two do not differ on veth: copy mode sends from
// within sendto, so the kernel keeps the TX flag set and ours kicks too.
// On a zero-copy driver ours skips the sendto while the driver's NAPI is
// draining the ring; veth cannot show that. On the rx side asavie polls
// once per batch where ours makes no syscall unless the fill ring's flag
// asks (never on veth): see syscalls/frame in BenchmarkCompareRX.
func TestAsavie_TransmitAlwaysSyscalls(t *testing.T) {
	const n = 100
	t.Run("asavie", func(t *testing.T) {
		e := newEnv(t, link.XDPDriverMode)
		x := newAsavie(t, e, asavieOpts())
		before := asavieStats(t, x).KernelStats.Tx_ring_empty_descs
		for range n {
			x.Transmit(nil)
		}
		after := asavieStats(t, x).KernelStats.Tx_ring_empty_descs
		if after-before != n {
			t.Fatalf("kernel counted %d wakeups of an empty TX ring for %d empty Transmits, want %d", after-before, n, n)
		}
		t.Logf("%d empty Transmits: the kernel counted %d sendto wakeups with nothing to send", n, after-before)
	})
	t.Run("ours", func(t *testing.T) {
		e := newEnv(t, link.XDPDriverMode)
		s := e.socket(t, DefaultOpts())
		before := ourStats(t, s)
		for range n {
			s.Transmit(nil)
			s.Transmit([]unix.XDPDesc{})
		}
		after := ourStats(t, s)
		if k := after.Kernel.TxRingEmpty - before.Kernel.TxRingEmpty; k != 0 || after.Kicks != before.Kicks {
			t.Fatalf("%d empty Transmits: %d kicks, kernel counted %d empty wakeups; want none", 2*n, after.Kicks-before.Kicks, k)
		}
	})
}

func asavieStats(t *testing.T, x *xdp.Socket) xdp.Stats {
	t.Helper()
	st, err := x.Stats()
	if err != nil {
		t.Fatalf("asavie Stats: %v", err)
	}
	return st
}

func ourStats(t *testing.T, s *Socket) Stats {
	t.Helper()
	st, err := s.Stats()
	if err != nil {
		t.Fatalf("Stats: %v", err)
	}
	return st
}

// setLinkUp sets afxt-x up or down.
func setLinkUp(t *testing.T, e *env, up bool) {
	t.Helper()
	err := e.ns.Do(func() error {
		l, err := netlink.LinkByIndex(e.veth.x)
		if err != nil {
			return err
		}
		if up {
			return netlink.LinkSetUp(l)
		}
		return netlink.LinkSetDown(l)
	})
	if err != nil {
		t.Fatalf("setting %s up=%v: %v", e.veth.xName, up, err)
	}
}

// TestAsavie_TransmitPanicsOnENETDOWN: with the interface down, sendto
// fails with ENETDOWN, and asavie's Transmit panics on any errno but
// EAGAIN, EBUSY and EINTR. An interface going down (ip link set down, a
// driver reset) is an operational event; it must not kill the appliance.
// Ours counts it as transient, keeps the frame on the TX ring, and sends it
// once the interface is back up.
func TestAsavie_TransmitPanicsOnENETDOWN(t *testing.T) {
	t.Run("asavie", func(t *testing.T) {
		e := newEnv(t, link.XDPDriverMode)
		x := newAsavie(t, e, asavieOpts())
		d := x.GetDescs(1)
		f := e.frame(1, 64)
		copy(x.GetFrame(d[0]), f)
		d[0].Len = uint32(len(f))
		setLinkUp(t, e, false)
		p := func() (p any) {
			defer func() { p = recover() }()
			x.Transmit(d)
			return nil
		}()
		want := fmt.Sprintf("errno=%d", int(unix.ENETDOWN))
		if p == nil || !strings.Contains(fmt.Sprint(p), want) {
			t.Fatalf("asavie Transmit with the interface down: recovered %v, want a panic with %s (ENETDOWN)", p, want)
		}
		t.Logf("asavie Transmit with the interface down panicked: %v", p)
	})
	t.Run("ours", func(t *testing.T) {
		e := newEnv(t, link.XDPDriverMode)
		s := e.socket(t, DefaultOpts())
		e.inject(t, e.frame(1, 64))
		d := receiveN(t, s, 1, 3*time.Second)
		swapMACs(s.Frame(d[0]))
		want := bytes.Clone(s.Frame(d[0]))
		setLinkUp(t, e, false)
		if n := s.Transmit(d); n != 1 {
			t.Fatalf("Transmit with the interface down = %d, want 1 (queued)", n)
		}
		c := s.Counters()
		if c.KickTransient != 1 || c.KickErrors != 0 {
			t.Fatalf("counters %+v: want one transient kick failure (ENETDOWN), no errors", c)
		}
		setLinkUp(t, e, true)
		completeAll(t, s, 1)
		got := e.capture(t, 1, 3*time.Second)
		if len(got) != 1 || !bytes.Equal(got[0], want) {
			t.Fatalf("after link up the peer captured %x, want the queued frame %x", got, want)
		}
	})
}

// TestAsavie_GetDescsDoesNotReserve: GetDescs hands out frames without
// marking them taken (only Fill and Transmit do), into a slice the next
// call overwrites, so two calls return the same frames: a caller that takes
// frames to build packets in and then tops up the fill ring gives the
// kernel frames it is about to send. Ours pops frames off a free stack and
// keeps one bit per chunk, so a frame is in one place at a time
// (TestFake_Ownership).
func TestAsavie_GetDescsDoesNotReserve(t *testing.T) {
	e := newEnv(t, link.XDPDriverMode)
	x := newAsavie(t, e, asavieOpts())
	first := x.GetDescs(4)
	kept := slices.Clone(first)
	second := x.GetDescs(4)
	if !slices.Equal(kept, second) {
		t.Fatalf("two GetDescs(4) returned %v then %v; want the same frames twice (the defect)", kept, second)
	}
	if &first[0] != &second[0] {
		t.Fatal("two GetDescs calls returned different slices; want the second to overwrite the first")
	}
	if x.Fill(x.GetDescs(x.NumFreeFillSlots())) == 0 {
		t.Fatal("Fill took nothing")
	}
	// Frame 0, handed out above, now sits on the fill ring as well.
	if next := x.GetDescs(1); len(next) == 1 && next[0].Addr == kept[0].Addr {
		t.Fatal("Fill did not mark frame 0 taken")
	}
	t.Logf("GetDescs returned frames %v twice; Fill then put them on the fill ring too", kept)
}

// TestAsavie_StatsPanicsTxOnly: NewSocket accepts a socket without an rx
// ring (RxRingNumDescs 0), and its Stats then dereferences the rx ring's
// nil consumer pointer. Ours has no such socket (Opts.Validate wants every
// ring) and its Stats returns errors only.
func TestAsavie_StatsPanicsTxOnly(t *testing.T) {
	e := newEnv(t, link.XDPDriverMode)
	o := asavieOpts()
	o.RxRingNumDescs = 0
	x := newAsavie(t, e, o)
	p := func() (p any) {
		defer func() { p = recover() }()
		_, _ = x.Stats()
		return nil
	}()
	var re runtime.Error
	if err, ok := p.(error); !ok || !errors.As(err, &re) || !strings.Contains(re.Error(), "nil pointer") {
		t.Fatalf("Stats on a TX-only asavie socket: recovered %v, want a nil pointer dereference", p)
	}
	t.Logf("Stats on a TX-only asavie socket panicked: %v", p)
}

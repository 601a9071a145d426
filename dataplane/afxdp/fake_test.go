package afxdp

import (
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// fakeKernel plays the kernel's side of a Socket's rings in ordinary memory,
// so the ring logic is tested and benchmarked without privileges: it consumes
// the fill and TX rings and produces into the rx and completion rings, using
// the same index code from the other end.
type fakeKernel struct {
	s                    *Socket
	fill, comp, rx, tx   queue
	rxDropped, txInvalid int
}

// fakeOffsets lays a ring out as the kernel does: indexes and flags on
// their own cache lines, descriptors after.
var fakeOffsets = unix.XDPRingOffset{Producer: 0, Consumer: 64, Flags: 128, Desc: 192}

// newFake returns a Socket (fd -1, never bound) and its fake kernel; the
// socket is closed at the end of the test.
func newFake(tb testing.TB, o Opts) (*Socket, *fakeKernel) {
	tb.Helper()
	if err := o.Validate(); err != nil {
		tb.Fatal(err)
	}
	s := &Socket{fd: -1, opts: o}
	tb.Cleanup(func() { _ = s.Close() })
	u, err := newUmem(o.NumFrames, o.FrameSize)
	if err != nil {
		tb.Fatal(err)
	}
	s.umem = u
	sizes := [4]uint32{o.FillRingSize, o.CompletionRingSize, o.RxRingSize, o.TxRingSize}
	descSizes := [4]uintptr{8, 8, unsafe.Sizeof(unix.XDPDesc{}), unsafe.Sizeof(unix.XDPDesc{})}
	var mems [4][]byte
	for i := range mems {
		m, err := unix.Mmap(-1, 0, int(fakeOffsets.Desc)+int(sizes[i])*int(descSizes[i]),
			unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
		if err != nil {
			s.adoptMappings(mems)
			tb.Fatal(err)
		}
		mems[i] = m
	}
	off := unix.XDPMmapOffsets{Rx: fakeOffsets, Tx: fakeOffsets, Fr: fakeOffsets, Cr: fakeOffsets}
	if err := s.initRings(mems, off); err != nil {
		tb.Fatal(err)
	}
	s.fill.refill(&s.umem)
	k := &fakeKernel{s: s}
	// The kernel consumes fill and TX, and produces rx and completion.
	for _, q := range []struct {
		q        *queue
		mem      []byte
		size     uint32
		producer bool
	}{
		{&k.fill, mems[0], sizes[0], false},
		{&k.comp, mems[1], sizes[1], true},
		{&k.rx, mems[2], sizes[2], true},
		{&k.tx, mems[3], sizes[3], false},
	} {
		if _, err := q.q.init(q.mem, fakeOffsets, q.size, 8, q.producer); err != nil {
			tb.Fatal(err)
		}
	}
	return s, k
}

// deliver receives frames as a copy-mode kernel does: each into the next
// fill chunk, after the umem headroom and XDP_PACKET_HEADROOM. It returns
// how many made it; the rest count as rxDropped.
func (k *fakeKernel) deliver(frames ...[]byte) int {
	n := 0
	for _, f := range frames {
		if k.fill.ready(1) == 0 || k.rx.free(1) == 0 {
			k.rxDropped++
			continue
		}
		chunk := k.s.fill.addrs[k.fill.cachedCons&k.fill.mask]
		k.fill.release(1)
		addr := chunk + uint64(k.s.opts.Headroom) + unix.XDP_PACKET_HEADROOM
		copy(k.s.umem.mem[addr:], f)
		k.s.rx.descs[k.rx.cachedProd&k.rx.mask] = unix.XDPDesc{Addr: addr, Len: uint32(len(f))}
		k.rx.submit(1)
		n++
	}
	return n
}

// send takes everything off the TX ring, calls sent with each frame's bytes
// (if not nil), and completes it. It returns how many it sent.
func (k *fakeKernel) send(sent func([]byte)) int {
	n := k.tx.ready(k.tx.size)
	idx := k.tx.cachedCons
	for i := range n {
		d := k.s.tx.descs[(idx+i)&k.tx.mask]
		if !k.s.umem.fits(d.Addr, d.Len) {
			k.txInvalid++
			continue
		}
		if sent != nil {
			sent(k.s.umem.mem[d.Addr : d.Addr+uint64(d.Len)])
		}
		// The completion ring is at least as large as TX (Validate).
		k.comp.free(1)
		k.s.comp.addrs[k.comp.cachedProd&k.comp.mask] = d.Addr
		k.comp.submit(1)
	}
	k.tx.release(n)
	return int(n)
}

// setFlag sets or clears XDP_RING_NEED_WAKEUP on one of the rings.
func setFlag(q *queue, on bool) {
	if on {
		q.flags.Store(unix.XDP_RING_NEED_WAKEUP)
	} else {
		q.flags.Store(0)
	}
}

// frameCount returns where the socket's chunks are: on the free stack, on
// the fill ring, on the rx ring, held by the caller, on the TX ring, and on
// the completion ring. They must add up to NumFrames.
func (k *fakeKernel) frameCount() (free, fill, rx, held, tx, comp int) {
	s := k.s
	free = int(s.umem.nfree)
	fill = int(s.fill.cachedProd - s.fill.consumer.Load())
	rx = int(s.rx.producer.Load() - s.rx.cachedCons)
	for _, w := range s.umem.held {
		for ; w != 0; w &= w - 1 {
			held++
		}
	}
	tx = int(s.tx.cachedProd - s.tx.consumer.Load())
	comp = int(s.comp.producer.Load() - s.comp.cachedCons)
	return
}

func (k *fakeKernel) checkAccounting(tb testing.TB) {
	tb.Helper()
	free, fill, rx, held, tx, comp := k.frameCount()
	if sum := free + fill + rx + held + tx + comp; sum != int(k.s.opts.NumFrames) {
		tb.Fatalf("frames: free %d + fill %d + rx %d + held %d + tx %d + completion %d = %d, want NumFrames %d",
			free, fill, rx, held, tx, comp, sum, k.s.opts.NumFrames)
	}
}

// smallOpts are options with small rings, so tests wrap them often.
func smallOpts() Opts {
	o := DefaultOpts()
	o.NumFrames = 16
	o.FrameSize = 2048
	o.FillRingSize = 8
	o.CompletionRingSize = 8
	o.RxRingSize = 8
	o.TxRingSize = 4
	return o
}

// testFrame returns an n-byte frame whose bytes encode seq.
func testFrame(seq, n int) []byte {
	f := make([]byte, n)
	for i := range f {
		f[i] = byte(seq*7 + i)
	}
	return f
}

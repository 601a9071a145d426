package xdpprog

import (
	"errors"
	"fmt"
	"testing"
	"unsafe"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"xlb/internal/nettest"
)

// testNS is a throwaway network namespace ("xdpt…") with a veth pair: In
// carries the program, Peer injects frames into it.
type testNS struct {
	*nettest.NS
	nl       *netlink.Handle
	In, Peer netlink.Link
}

// newTestNS creates the namespace and the veth pair (rxQueues rx queues on
// In, one tx queue on Peer, which native XDP on veth needs) and removes
// them when the test ends.
func newTestNS(tb testing.TB, rxQueues int) *testNS {
	tb.Helper()
	ns := nettest.NewNS(tb, nettest.UniqueName("xdpt"))
	h, err := netlink.NewHandleAt(ns.Handle)
	if err != nil {
		tb.Fatalf("netlink handle in %s: %v", ns.Name, err)
	}
	tb.Cleanup(h.Close)

	in, peer := ns.AddVeth(tb, nettest.Veth{
		Name: "xdpt-in", PeerName: "xdpt-peer",
		RxQueues: rxQueues, TxQueues: 1, PeerRxQueues: 1, PeerTxQueues: 1,
	})
	t := &testNS{NS: ns, nl: h}
	for _, x := range []struct {
		l   *netlink.Link
		idx int
	}{{&t.In, in}, {&t.Peer, peer}} {
		l, err := h.LinkByIndex(x.idx)
		if err != nil {
			tb.Fatalf("link %d: %v", x.idx, err)
		}
		*x.l = l
	}
	return t
}

// xdpState is what netlink says about the XDP program on the link.
func (t *testNS) xdpState(tb testing.TB, l netlink.Link) *netlink.LinkXdp {
	tb.Helper()
	cur, err := t.nl.LinkByIndex(l.Attrs().Index)
	if err != nil {
		tb.Fatalf("link %d: %v", l.Attrs().Index, err)
	}
	if cur.Attrs().Xdp == nil {
		return &netlink.LinkXdp{}
	}
	return cur.Attrs().Xdp
}

// xsk is a minimal AF_XDP socket: a UMEM, fill/completion and RX rings
// (never mmapped: nothing is read from them), bound in copy mode.
type xsk struct {
	fd  int
	mem []byte
}

// newXSK creates the socket in t's namespace, bound to queue of link l.
func newXSK(tb testing.TB, t *testNS, l netlink.Link, queue int) *xsk {
	tb.Helper()
	const frames, frameSize = 16, 4096
	s := &xsk{fd: -1}
	err := t.Do(func() error {
		fd, err := unix.Socket(unix.AF_XDP, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return err
		}
		s.fd = fd
		if s.mem, err = unix.Mmap(-1, 0, frames*frameSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS); err != nil {
			return fmt.Errorf("mmap umem: %w", err)
		}
		reg := unix.XDPUmemReg{Addr: uint64(uintptr(unsafe.Pointer(&s.mem[0]))), Len: uint64(len(s.mem)), Size: frameSize}
		if _, _, e := unix.Syscall6(unix.SYS_SETSOCKOPT, uintptr(fd), unix.SOL_XDP, unix.XDP_UMEM_REG,
			uintptr(unsafe.Pointer(&reg)), unsafe.Sizeof(reg), 0); e != 0 {
			return fmt.Errorf("XDP_UMEM_REG: %w", e)
		}
		for _, opt := range []int{unix.XDP_UMEM_FILL_RING, unix.XDP_UMEM_COMPLETION_RING, unix.XDP_RX_RING} {
			if err := unix.SetsockoptInt(fd, unix.SOL_XDP, opt, frames); err != nil {
				return fmt.Errorf("ring option %d: %w", opt, err)
			}
		}
		sa := &unix.SockaddrXDP{Flags: unix.XDP_COPY, Ifindex: uint32(l.Attrs().Index), QueueID: uint32(queue)}
		if err := unix.Bind(fd, sa); err != nil {
			return fmt.Errorf("bind to ifindex %d queue %d: %w", l.Attrs().Index, queue, err)
		}
		return nil
	})
	tb.Cleanup(func() {
		if s.fd >= 0 {
			unix.Close(s.fd)
		}
		if s.mem != nil {
			unix.Munmap(s.mem)
		}
	})
	if errors.Is(err, unix.EAFNOSUPPORT) {
		tb.Skipf("kernel lacks AF_XDP sockets: %v", err)
	}
	if err != nil {
		tb.Fatalf("AF_XDP socket: %v", err)
	}
	return s
}

// rxDropped is the number of frames the socket received and dropped for
// want of a fill ring entry (it has none): proof that a redirect reached it.
func (s *xsk) rxDropped(tb testing.TB) uint64 {
	tb.Helper()
	var st unix.XDPStatistics
	n := uint32(unsafe.Sizeof(st))
	if _, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(s.fd), unix.SOL_XDP, unix.XDP_STATISTICS,
		uintptr(unsafe.Pointer(&st)), uintptr(unsafe.Pointer(&n)), 0); e != 0 {
		tb.Fatalf("XDP_STATISTICS: %v", e)
	}
	return st.Rx_dropped
}

// inject sends frames out of t.Peer through a packet socket; they arrive
// on t.In.
func (t *testNS) inject(tb testing.TB, frames ...[]byte) {
	tb.Helper()
	err := t.Do(func() error {
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		sa := &unix.SockaddrLinklayer{Ifindex: t.Peer.Attrs().Index, Halen: 6}
		for _, f := range frames {
			copy(sa.Addr[:], f[:6])
			if err := unix.Sendto(fd, f, 0, sa); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		tb.Fatalf("injecting frames: %v", err)
	}
}

// addBridge adds a bridge, a device without native XDP, to the namespace.
func (t *testNS) addBridge(tb testing.TB) netlink.Link {
	tb.Helper()
	if err := t.nl.LinkAdd(&netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: "xdpt-br"}}); err != nil {
		tb.Fatalf("adding bridge: %v", err)
	}
	l, err := t.nl.LinkByName("xdpt-br")
	if err != nil {
		tb.Fatalf("xdpt-br: %v", err)
	}
	return l
}

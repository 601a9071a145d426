package afxdp

import (
	"bufio"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/asavie/xdp"
	"golang.org/x/sys/unix"
)

// Helpers for comparing our socket with github.com/asavie/xdp v0.3.3 on the
// same veth pair and redirect program (asavie_compare_test.go).

// asavieOpts gives asavie's socket our DefaultOpts geometry, so both sides
// of a comparison run with the same umem and rings.
func asavieOpts() xdp.SocketOptions {
	o := DefaultOpts()
	return xdp.SocketOptions{
		NumFrames:              int(o.NumFrames),
		FrameSize:              int(o.FrameSize),
		FillRingNumDescs:       int(o.FillRingSize),
		CompletionRingNumDescs: int(o.CompletionRingSize),
		RxRingNumDescs:         int(o.RxRingSize),
		TxRingNumDescs:         int(o.TxRingSize),
	}
}

// newAsavie makes an asavie socket on afxt-x queue 0 inside the namespace
// and, if it has an rx ring, puts it in our XSKMAP: asavie's own program
// would redirect every frame and abort on queues it was not sized for. At
// the end of the test it is closed and then the ring mappings its Close
// leaves behind are unmapped (see TestAsavie_CloseLeavesQueueBound);
// without that the socket, its pinned umem and the namespace would live
// until the process exits.
func newAsavie(tb testing.TB, e *env, o xdp.SocketOptions) *xdp.Socket {
	tb.Helper()
	var x *xdp.Socket
	err := e.ns.Do(func() (err error) {
		x, err = xdp.NewSocket(e.veth.x, 0, &o)
		return err
	})
	if err != nil {
		tb.Fatalf("asavie NewSocket: %v", err)
	}
	ino := socketInode(tb, x.FD())
	tb.Cleanup(func() {
		_ = x.Close() // idempotent: it checks fd and umem
		unmapSocket(tb, ino)
	})
	if o.RxRingNumDescs > 0 {
		if err := e.prog.xsks.Put(uint32(0), uint32(x.FD())); err != nil {
			tb.Fatalf("XSKMAP[0] = asavie fd %d: %v", x.FD(), err)
		}
	}
	return x
}

func socketInode(tb testing.TB, fd int) uint64 {
	tb.Helper()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		tb.Fatalf("fstat fd %d: %v", fd, err)
	}
	return st.Ino
}

// socketMappings returns the address ranges of this process's mappings of
// socket inode ino (the rings of an AF_XDP socket).
func socketMappings(tb testing.TB, ino uint64) [][2]uintptr {
	tb.Helper()
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	tag := fmt.Sprintf("socket:[%d]", ino)
	var out [][2]uintptr
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if !strings.HasSuffix(sc.Text(), tag) {
			continue
		}
		var lo, hi uintptr
		if _, err := fmt.Sscanf(sc.Text(), "%x-%x", &lo, &hi); err == nil {
			out = append(out, [2]uintptr{lo, hi})
		}
	}
	if err := sc.Err(); err != nil {
		tb.Fatal(err)
	}
	return out
}

// unmapSocket unmaps whatever of socket ino is still mapped. The mappings
// were made by syscall.Mmap inside asavie and are no Go memory; asavie
// must not touch the socket afterwards.
func unmapSocket(tb testing.TB, ino uint64) {
	tb.Helper()
	for _, m := range socketMappings(tb, ino) {
		if _, _, errno := unix.Syscall(unix.SYS_MUNMAP, m[0], m[1]-m[0], 0); errno != 0 {
			tb.Errorf("munmap %#x-%#x of socket:[%d]: %v", m[0], m[1], ino, errno)
		}
	}
}

// injector sends a fixed burst of frames from the peer with one
// sendmmsg(2), so injecting costs few syscalls and allocates nothing. Its
// AF_PACKET socket (the env's, bound to afxt-p) ignores its own outgoing
// frames, so its PACKET_STATISTICS count exactly what arrives at the peer.
type injector struct {
	fd   int
	iov  []unix.Iovec
	msgs []unix.Mmsghdr
}

func newInjector(tb testing.TB, e *env, frames [][]byte) *injector {
	tb.Helper()
	if err := unix.SetsockoptInt(e.pkt, unix.SOL_PACKET, unix.PACKET_IGNORE_OUTGOING, 1); err != nil {
		tb.Fatalf("PACKET_IGNORE_OUTGOING: %v", err)
	}
	in := &injector{fd: e.pkt, iov: make([]unix.Iovec, len(frames)), msgs: make([]unix.Mmsghdr, len(frames))}
	for i, f := range frames {
		in.iov[i].Base = &f[0]
		in.iov[i].SetLen(len(f))
		// No msg_name: the socket is bound to the peer and the frames
		// carry their Ethernet header.
		in.msgs[i].Hdr.Iov = &in.iov[i]
		in.msgs[i].Hdr.SetIovlen(1)
	}
	in.arrived(tb) // PACKET_STATISTICS reset on read
	return in
}

// send injects the whole burst.
func (in *injector) send(tb testing.TB) {
	for off := 0; off < len(in.msgs); {
		n, _, errno := unix.Syscall6(unix.SYS_SENDMMSG, uintptr(in.fd),
			uintptr(unsafe.Pointer(&in.msgs[off])), uintptr(len(in.msgs)-off), 0, 0, 0)
		if errno == unix.EINTR {
			continue
		}
		if errno != 0 {
			tb.Fatalf("sendmmsg on the peer: %v", errno)
		}
		off += int(n)
	}
}

// arrived returns how many frames reached the peer since the last call
// (queued or dropped by the socket's full buffer: tp_packets counts both).
func (in *injector) arrived(tb testing.TB) uint64 {
	var st unix.TpacketStats
	n := uint32(unsafe.Sizeof(st))
	_, _, errno := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(in.fd), unix.SOL_PACKET, unix.PACKET_STATISTICS,
		uintptr(unsafe.Pointer(&st)), uintptr(unsafe.Pointer(&n)), 0)
	if errno != 0 {
		tb.Fatalf("PACKET_STATISTICS: %v", errno)
	}
	return uint64(st.Packets)
}

// awaitArrived waits until want frames reached the peer since the last
// call, failing after timeout.
func (in *injector) awaitArrived(tb testing.TB, want uint64, timeout time.Duration) {
	tb.Helper()
	var got uint64
	deadline := time.Now().Add(timeout)
	for {
		got += in.arrived(tb)
		if got >= want {
			break
		}
		if time.Now().After(deadline) {
			tb.Fatalf("peer got %d of %d frames in %v", got, want, timeout)
		}
		time.Sleep(50 * time.Microsecond)
	}
	if got != want {
		tb.Fatalf("peer got %d frames, want %d", got, want)
	}
}

// swapMACs turns a frame from the peer around.
func swapMACs(f []byte) {
	var tmp [6]byte
	copy(tmp[:], f[0:6])
	copy(f[0:6], f[6:12])
	copy(f[6:12], tmp[:])
}

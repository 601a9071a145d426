package appliance

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// runNS is a throwaway network namespace "xrt<pid>-<n>" holding a veth
// pair: xrt-b, where `xlb run` attaches, and xrt-p, the peer that sends
// frames to it and captures what xlb sends back. Removed with the test.
type runNS struct {
	name         string
	h            netns.NsHandle
	bName, pName string
	bMAC, pMAC   net.HardwareAddr
	b, p         int // ifindexes
}

var runNSSeq atomic.Int32

// requireRoot skips a test that needs root: namespaces, XDP, AF_XDP. CI
// runs as root.
func requireRoot(tb testing.TB) {
	tb.Helper()
	if os.Geteuid() != 0 {
		tb.Skip("needs root (network namespaces, XDP, AF_XDP); CI runs as root")
	}
}

func newRunNS(tb testing.TB) *runNS {
	tb.Helper()
	requireRoot(tb)
	n := &runNS{
		name:  fmt.Sprintf("xrt%d-%d", os.Getpid(), runNSSeq.Add(1)),
		bName: "xrt-b", pName: "xrt-p",
		bMAC: net.HardwareAddr{0x02, 0x7e, 0, 0, 0, 0x0b},
		pMAC: net.HardwareAddr{0x02, 0x7e, 0, 0, 0, 0x0c},
	}
	err := onLockedThread(func() error {
		h, err := netns.NewNamed(n.name) // moves this thread into it
		n.h = h
		return err
	})
	if err != nil {
		tb.Fatalf("creating netns %s: %v", n.name, err)
	}
	tb.Cleanup(func() {
		n.h.Close()
		if err := netns.DeleteNamed(n.name); err != nil {
			tb.Errorf("deleting netns %s: %v", n.name, err)
		}
	})
	err = n.do(func() error {
		// No IPv6: the kernel then sends nothing on the links by itself.
		for _, p := range []string{"default", "all"} {
			f := "/proc/sys/net/ipv6/conf/" + p + "/disable_ipv6"
			if err := os.WriteFile(f, []byte("1"), 0); err != nil && !errors.Is(err, os.ErrNotExist) {
				return err
			}
		}
		lo, err := netlink.LinkByName("lo")
		if err == nil {
			err = netlink.LinkSetUp(lo) // the admin listener is on 127.0.0.1
		}
		if err != nil {
			return fmt.Errorf("lo up: %w", err)
		}
		// One queue each way: native XDP on veth needs xrt-b's rx queues
		// >= xrt-p's tx queues.
		veth := &netlink.Veth{
			LinkAttrs:        netlink.LinkAttrs{Name: n.bName, HardwareAddr: n.bMAC, NumTxQueues: 1, NumRxQueues: 1},
			PeerName:         n.pName,
			PeerHardwareAddr: n.pMAC,
			PeerNumTxQueues:  1,
			PeerNumRxQueues:  1,
		}
		if err := netlink.LinkAdd(veth); err != nil {
			return fmt.Errorf("adding veth: %w", err)
		}
		for _, x := range []struct {
			name string
			idx  *int
		}{{n.bName, &n.b}, {n.pName, &n.p}} {
			l, err := netlink.LinkByName(x.name)
			if err != nil {
				return err
			}
			if err := netlink.LinkSetUp(l); err != nil {
				return err
			}
			*x.idx = l.Attrs().Index
		}
		return nil
	})
	if err != nil {
		tb.Fatalf("setting up %s: %v", n.name, err)
	}
	return n
}

// onLockedThread runs fn on a locked OS thread and puts the thread back in
// its namespace afterwards; if that fails the thread stays locked and dies
// with the goroutine, so no other goroutine runs in the wrong namespace.
func onLockedThread(fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			errc <- err
			return
		}
		defer orig.Close()
		ferr := fn()
		if err := netns.Set(orig); err != nil {
			errc <- errors.Join(ferr, fmt.Errorf("returning to the original netns: %w", err))
			return
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}

// do runs fn inside the namespace: sockets and links it creates, and
// processes it starts, belong to it.
func (n *runNS) do(fn func() error) error {
	return onLockedThread(func() error {
		if err := netns.Set(n.h); err != nil {
			return fmt.Errorf("entering netns %s: %w", n.name, err)
		}
		return fn()
	})
}

// start starts cmd inside the namespace (a child inherits the network
// namespace of the thread that forks it).
func (n *runNS) start(cmd *exec.Cmd) error {
	return n.do(cmd.Start)
}

// httpClient dials inside the namespace, where xlb's admin listener is.
func (n *runNS) httpClient() *http.Client {
	return &http.Client{
		Timeout: 2 * time.Second,
		Transport: &http.Transport{
			DisableKeepAlives: true,
			DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
				var c net.Conn
				err := n.do(func() (err error) {
					c, err = (&net.Dialer{}).DialContext(ctx, network, addr)
					return err
				})
				return c, err
			},
		},
	}
}

// xdpAttached reports whether xrt-b has an XDP program.
func (n *runNS) xdpAttached(tb testing.TB) bool {
	tb.Helper()
	var attached bool
	err := n.do(func() error {
		l, err := netlink.LinkByName(n.bName)
		if err != nil {
			return err
		}
		x := l.Attrs().Xdp
		attached = x != nil && x.Attached
		return nil
	})
	if err != nil {
		tb.Fatalf("reading %s's XDP state: %v", n.bName, err)
	}
	return attached
}

// packetSocket is an AF_PACKET socket on xrt-p: it sends raw frames to
// xrt-b and captures every frame xrt-p receives.
type packetSocket struct {
	fd int
	n  *runNS
}

func (n *runNS) packetSocket(tb testing.TB) *packetSocket {
	tb.Helper()
	var fd int
	err := n.do(func() error {
		var err error
		fd, err = unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, int(htons(unix.ETH_P_ALL)))
		if err != nil {
			return err
		}
		return unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: n.p})
	})
	if err != nil {
		if fd > 0 {
			unix.Close(fd)
		}
		tb.Fatalf("AF_PACKET socket on %s: %v", n.pName, err)
	}
	tb.Cleanup(func() { unix.Close(fd) })
	return &packetSocket{fd: fd, n: n}
}

func (s *packetSocket) send(frame []byte) error {
	return unix.Sendto(s.fd, frame, 0, &unix.SockaddrLinklayer{Ifindex: s.n.p, Halen: 6, Addr: [8]byte(append(append([]byte{}, frame[:6]...), 0, 0))})
}

// recv returns the next frame received on xrt-p (not one it sent), or nil
// after d.
func (s *packetSocket) recv(d time.Duration) ([]byte, error) {
	deadline := time.Now().Add(d)
	buf := make([]byte, 4096)
	for {
		left := time.Until(deadline)
		if left <= 0 {
			return nil, nil
		}
		tv := unix.NsecToTimeval(left.Nanoseconds())
		if err := unix.SetsockoptTimeval(s.fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
			return nil, err
		}
		n, from, err := unix.Recvfrom(s.fd, buf, 0)
		if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if ll, ok := from.(*unix.SockaddrLinklayer); ok && ll.Pkttype == unix.PACKET_OUTGOING {
			continue
		}
		return append([]byte(nil), buf[:n]...), nil
	}
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

package appliance

import (
	"context"
	"net"
	"net/http"
	"os/exec"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"xlb/internal/nettest"
)

// runNS is a throwaway network namespace "xrt<pid>-<n>" holding a veth
// pair: xrt-b, where `xlb run` attaches, and xrt-p, the peer that sends
// frames to it and captures what xlb sends back. Removed with the test.
type runNS struct {
	*nettest.NS
	bName, pName string
	bMAC, pMAC   net.HardwareAddr
	b, p         int // ifindexes
}

func newRunNS(tb testing.TB) *runNS {
	tb.Helper()
	n := &runNS{
		NS:    nettest.NewNS(tb, nettest.UniqueName("xrt")),
		bName: "xrt-b", pName: "xrt-p",
		bMAC: net.HardwareAddr{0x02, 0x7e, 0, 0, 0, 0x0b},
		pMAC: net.HardwareAddr{0x02, 0x7e, 0, 0, 0, 0x0c},
	}
	// One queue each way: native XDP on veth needs xrt-b's rx queues >=
	// xrt-p's tx queues. No IPv6: the kernel then sends nothing on the
	// links by itself.
	n.b, n.p = n.AddVeth(tb, nettest.Veth{
		Name: n.bName, PeerName: n.pName,
		MAC: n.bMAC, PeerMAC: n.pMAC,
		RxQueues: 1, TxQueues: 1, PeerRxQueues: 1, PeerTxQueues: 1,
		NoIPv6: true,
	})
	err := n.Do(func() error {
		lo, err := netlink.LinkByName("lo")
		if err != nil {
			return err
		}
		return netlink.LinkSetUp(lo) // the admin listener is on 127.0.0.1
	})
	if err != nil {
		tb.Fatalf("lo up in %s: %v", n.Name, err)
	}
	return n
}

// start starts cmd inside the namespace (a child inherits the network
// namespace of the thread that forks it).
func (n *runNS) start(cmd *exec.Cmd) error {
	return n.Do(cmd.Start)
}

// httpClient dials inside the namespace, where xlb's admin listener is.
func (n *runNS) httpClient() *http.Client {
	return &http.Client{
		Timeout: 2 * time.Second,
		Transport: &http.Transport{
			DisableKeepAlives: true,
			DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
				var c net.Conn
				err := n.Do(func() (err error) {
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
	err := n.Do(func() error {
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
	err := n.Do(func() error {
		var err error
		fd, err = unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, int(nettest.Htons(unix.ETH_P_ALL)))
		if err != nil {
			return err
		}
		return unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: nettest.Htons(unix.ETH_P_ALL), Ifindex: n.p})
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
		n, ok, err := nettest.RecvIncoming(s.fd, buf)
		if err != nil {
			return nil, err
		}
		if ok {
			return append([]byte(nil), buf[:n]...), nil
		}
	}
}

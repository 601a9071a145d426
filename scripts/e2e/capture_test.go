package e2e

import (
	"errors"
	"net"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"xlb/scripts/testbed"

	"xlb/internal/nettest"
	"xlb/internal/nsx"
)

// packetSocket is an AF_PACKET socket on one interface of a namespace: it
// sends raw frames out of it and captures every frame it receives.
type packetSocket struct {
	fd int
}

func openPacketSocket(t *testing.T, h testbed.Host) *packetSocket {
	t.Helper()
	ps := &packetSocket{fd: -1}
	err := nsx.Do(h.NS, func() error {
		ifc, err := net.InterfaceByName(h.Iface)
		if err != nil {
			return err
		}
		proto := nettest.Htons(unix.ETH_P_ALL)
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, int(proto))
		if err != nil {
			return err
		}
		ps.fd = fd
		tv := unix.NsecToTimeval((50 * time.Millisecond).Nanoseconds())
		if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
			return err
		}
		return unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: proto, Ifindex: ifc.Index})
	})
	if ps.fd >= 0 {
		t.Cleanup(func() { unix.Close(ps.fd) })
	}
	if err != nil {
		t.Fatalf("packet socket on %s in %s: %v", h.Iface, h.NS, err)
	}
	return ps
}

func (ps *packetSocket) send(frame []byte) error {
	_, err := unix.Write(ps.fd, frame)
	return err
}

// capture returns the first frame received (not sent) within d for which
// match is true, or nil.
func (ps *packetSocket) capture(d time.Duration, match func([]byte) bool) ([]byte, error) {
	buf := make([]byte, 9216)
	for deadline := time.Now().Add(d); time.Now().Before(deadline); {
		n, from, err := unix.Recvfrom(ps.fd, buf, 0)
		if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if ll, ok := from.(*unix.SockaddrLinklayer); ok && ll.Pkttype == unix.PACKET_OUTGOING {
			continue
		}
		if match(buf[:n]) {
			return append([]byte(nil), buf[:n]...), nil
		}
	}
	return nil, nil
}

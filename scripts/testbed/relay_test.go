package testbed

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"xlb/internal/nettest"
	"xlb/internal/nsx"
)

// relay stands in for xlb's L2 DSR with a packet socket on the balancer's
// interface: frames to a VIP go back out of the same interface with the
// backend's MAC as destination and the balancer's as source, nothing else
// changed. A packet socket sees the frame bytes an AF_XDP socket would, so
// the bed passes this only if clients put complete checksums on the wire.
type relay struct {
	fd      int
	stop    atomic.Bool
	done    sync.WaitGroup
	relayed atomic.Int64
}

func startRelay(t *testing.T, b *Bed, to *Backend) *relay {
	t.Helper()
	r := &relay{fd: -1}
	err := nsx.Do(b.LB.NS, func() error {
		ifc, err := net.InterfaceByName(b.LB.Iface)
		if err != nil {
			return err
		}
		proto := nettest.Htons(unix.ETH_P_ALL)
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, int(proto))
		if err != nil {
			return err
		}
		r.fd = fd
		// Wake up now and then to notice stop: close does not end a blocked read.
		tv := unix.NsecToTimeval((50 * time.Millisecond).Nanoseconds())
		if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
			return err
		}
		return unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: proto, Ifindex: ifc.Index})
	})
	if err != nil {
		if r.fd >= 0 {
			unix.Close(r.fd)
		}
		t.Fatalf("relay: %v", err)
	}
	r.done.Go(func() { r.loop(t, to.MAC) })
	t.Cleanup(r.close)
	return r
}

func (r *relay) loop(t *testing.T, dst net.HardwareAddr) {
	buf := make([]byte, 9000)
	for !r.stop.Load() {
		n, from, err := unix.Recvfrom(r.fd, buf, 0)
		if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			t.Errorf("relay: read: %v", err)
			return
		}
		if ll, ok := from.(*unix.SockaddrLinklayer); !ok || ll.Pkttype == unix.PACKET_OUTGOING {
			continue // our own sends, and the kernel's
		}
		f := buf[:n]
		if !toVIP(f) {
			continue
		}
		copy(f[0:6], dst)
		copy(f[6:12], LBMAC)
		if _, err := unix.Write(r.fd, f); err != nil {
			t.Errorf("relay: write: %v", err)
			return
		}
		r.relayed.Add(1)
	}
}

func (r *relay) close() {
	if r.stop.Swap(true) {
		return
	}
	r.done.Wait()
	unix.Close(r.fd)
}

// toVIP reports an untagged IPv4 or IPv6 frame whose destination is a VIP.
func toVIP(f []byte) bool {
	if len(f) < 14 {
		return false
	}
	switch binary.BigEndian.Uint16(f[12:14]) {
	case unix.ETH_P_IP:
		vip := VIP4.As4()
		return len(f) >= 34 && bytes.Equal(f[30:34], vip[:])
	case unix.ETH_P_IPV6:
		vip := VIP6.As16()
		return len(f) >= 54 && bytes.Equal(f[38:54], vip[:])
	}
	return false
}

package e2e

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"xlb/scripts/testbed"

	"xlb/internal/nsx"
)

// ping sends one ICMP or ICMPv6 echo request from namespace ns to dst over
// a raw socket (no ping binary needed) and waits up to timeout for the
// matching reply.
func ping(ns string, dst netip.Addr, id uint16, timeout time.Duration) error {
	return nsx.Do(ns, func() error {
		family, proto, reqType, replyType := unix.AF_INET, unix.IPPROTO_ICMP, byte(8), byte(0)
		if dst.Is6() {
			family, proto, reqType, replyType = unix.AF_INET6, unix.IPPROTO_ICMPV6, 128, 129
		}
		fd, err := unix.Socket(family, unix.SOCK_RAW|unix.SOCK_CLOEXEC, proto)
		if err != nil {
			return fmt.Errorf("raw ICMP socket: %w", err)
		}
		defer unix.Close(fd)
		tv := unix.NsecToTimeval((50 * time.Millisecond).Nanoseconds())
		if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
			return err
		}
		msg := []byte{reqType, 0, 0, 0, byte(id >> 8), byte(id), 0, 1, 'x', 'l', 'b', '!'}
		var sa unix.Sockaddr
		if dst.Is4() {
			// The kernel computes ICMPv6 checksums of raw sockets, not ICMP's.
			binary.BigEndian.PutUint16(msg[2:], inetChecksum(msg))
			sa = &unix.SockaddrInet4{Addr: dst.As4()}
		} else {
			sa = &unix.SockaddrInet6{Addr: dst.As16()}
		}
		if err := unix.Sendto(fd, msg, 0, sa); err != nil {
			return fmt.Errorf("echo request to %s: %w", dst, err)
		}
		buf := make([]byte, 1500)
		for deadline := time.Now().Add(timeout); time.Now().Before(deadline); {
			n, _, err := unix.Recvfrom(fd, buf, 0)
			if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
				continue
			}
			if err != nil {
				return err
			}
			icmp := buf[:n]
			if dst.Is4() && n >= 20 {
				icmp = buf[int(buf[0]&0x0f)*4 : n] // an IPv4 raw socket reads the IP header too
			}
			if len(icmp) >= 8 && icmp[0] == replyType && binary.BigEndian.Uint16(icmp[4:]) == id {
				return nil
			}
		}
		return fmt.Errorf("no echo reply from %s within %v", dst, timeout)
	})
}

// inetChecksum is the Internet checksum of b (RFC 1071).
func inetChecksum(b []byte) uint16 {
	var s uint32
	for i := 0; i+1 < len(b); i += 2 {
		s += uint32(b[i])<<8 | uint32(b[i+1])
	}
	if len(b)%2 == 1 {
		s += uint32(b[len(b)-1]) << 8
	}
	for s > 0xffff {
		s = s>>16 + s&0xffff
	}
	return ^uint16(s)
}

// hostPort is where the balancer's own TCP service listens in the tests.
const hostPort = 2222

// listenHost starts a TCP echo service of the balancer's kernel on its
// client-side addresses, removed with the test.
func listenHost(t *testing.T, b *testbed.Bed) {
	t.Helper()
	for _, a := range []netip.Addr{testbed.LBClientSide4, testbed.LBClientSide6} {
		var ln net.Listener
		err := nsx.Do(b.LB.NS, func() error {
			var err error
			ln, err = net.Listen("tcp", netip.AddrPortFrom(a, hostPort).String())
			return err
		})
		if err != nil {
			t.Fatalf("listening on the balancer: %v", err)
		}
		t.Cleanup(func() { ln.Close() })
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				go func() {
					defer c.Close()
					_ = c.SetDeadline(time.Now().Add(5 * time.Second))
					_, _ = io.Copy(c, c)
				}()
			}
		}()
	}
}

// hostTraffic checks that the balancer's own kernel answers the client on
// its addresses, IPv4 and IPv6: ICMP echo, and a TCP exchange with the
// service of listenHost.
func hostTraffic(t *testing.T, b *testbed.Bed) {
	t.Helper()
	c := b.Clients[0]
	for i, a := range []netip.Addr{testbed.LBClientSide4, testbed.LBClientSide6} {
		if err := ping(c.NS, a, uint16(0x7800+i), 2*time.Second); err != nil {
			t.Errorf("ping %s from %s: %v", a, c.Name, err)
		}
		if err := tcpEcho(c.NS, netip.AddrPortFrom(a, hostPort)); err != nil {
			t.Errorf("TCP to the balancer's %s: %v", a, err)
		}
	}
}

// tcpEcho connects from ns to dst, sends a line and expects it back.
func tcpEcho(ns string, dst netip.AddrPort) error {
	conn, err := testbed.Dial(ns, "tcp", dst, 2*time.Second)
	if err != nil {
		return err
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(2 * time.Second)); err != nil {
		return err
	}
	msg := []byte("hello, balancer\n")
	if _, err := conn.Write(msg); err != nil {
		return err
	}
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(conn, got); err != nil {
		return err
	}
	if string(got) != string(msg) {
		return fmt.Errorf("echoed %q, sent %q", got, msg)
	}
	return nil
}

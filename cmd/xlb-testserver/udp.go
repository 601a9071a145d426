package main

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"

	"golang.org/x/sys/unix"
)

// udpEcho is one UDP socket of the echo. A socket bound to a wildcard
// address would reply from the address the route to the client prefers
// (the backend's own), not the VIP the client sent to, and the client's
// connected socket would drop the answer. So it asks the kernel for each
// datagram's destination (IP_PKTINFO / IPV6_RECVPKTINFO) and replies from it.
type udpEcho struct {
	conn *net.UDPConn
	v6   bool
}

func listenUDPEcho(ap netip.AddrPort) (*udpEcho, error) {
	conn, err := net.ListenUDP(network("udp", ap), net.UDPAddrFromAddrPort(ap))
	if err != nil {
		return nil, err
	}
	u := &udpEcho{conn: conn, v6: ap.Addr().Is6()}
	raw, err := conn.SyscallConn()
	if err != nil {
		conn.Close()
		return nil, err
	}
	var serr error
	err = raw.Control(func(fd uintptr) {
		if u.v6 {
			serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IPV6, unix.IPV6_RECVPKTINFO, 1)
		} else {
			serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_PKTINFO, 1)
		}
	})
	if err = errors.Join(err, serr); err != nil {
		conn.Close()
		return nil, fmt.Errorf("asking for packet info: %w", err)
	}
	return u, nil
}

// serve echoes until the socket is closed: "NAME: payload".
func (u *udpEcho) serve(name string, logf func(from, to netip.AddrPort, n int)) error {
	buf := make([]byte, 65536)
	oob := make([]byte, 256)
	prefix := []byte(name + ": ")
	reply := make([]byte, 0, len(prefix)+len(buf))
	for {
		n, oobn, _, from, err := u.conn.ReadMsgUDPAddrPort(buf, oob)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			return err
		}
		dst, ifindex, ok := destination(oob[:oobn])
		reply = append(append(reply[:0], prefix...), buf[:n]...)
		var out []byte
		if ok {
			out = u.pktinfo(dst, ifindex)
		}
		if _, _, err := u.conn.WriteMsgUDPAddrPort(reply, out, from); err != nil {
			// One unreachable client must not stop the echo.
			continue
		}
		if logf != nil {
			logf(from, netip.AddrPortFrom(dst, u.port()), n)
		}
	}
}

func (u *udpEcho) port() uint16 { return u.conn.LocalAddr().(*net.UDPAddr).AddrPort().Port() }

// pktinfo builds the control message that sets the reply's source. The
// interface is left to routing except for IPv6 link-local sources, which
// only mean something on the interface they came in on.
func (u *udpEcho) pktinfo(src netip.Addr, ifindex int32) []byte {
	if !u.v6 {
		return unix.PktInfo4(&unix.Inet4Pktinfo{Spec_dst: src.As4()})
	}
	info := &unix.Inet6Pktinfo{Addr: src.As16()}
	if src.IsLinkLocalUnicast() {
		info.Ifindex = uint32(ifindex)
	}
	return unix.PktInfo6(info)
}

// destination finds the datagram's destination address in the control
// messages of a receive.
func destination(oob []byte) (netip.Addr, int32, bool) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return netip.Addr{}, 0, false
	}
	for _, m := range msgs {
		switch {
		case m.Header.Level == unix.IPPROTO_IP && m.Header.Type == unix.IP_PKTINFO &&
			len(m.Data) >= unix.SizeofInet4Pktinfo:
			// struct in_pktinfo: ifindex int32, spec_dst [4]byte, addr [4]byte.
			var a [4]byte
			copy(a[:], m.Data[8:12])
			return netip.AddrFrom4(a), int32(binary.NativeEndian.Uint32(m.Data[0:4])), true
		case m.Header.Level == unix.IPPROTO_IPV6 && m.Header.Type == unix.IPV6_PKTINFO &&
			len(m.Data) >= unix.SizeofInet6Pktinfo:
			// struct in6_pktinfo: addr [16]byte, ifindex uint32.
			var a [16]byte
			copy(a[:], m.Data[0:16])
			return netip.AddrFrom16(a), int32(binary.NativeEndian.Uint32(m.Data[16:20])), true
		}
	}
	return netip.Addr{}, 0, false
}

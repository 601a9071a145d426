package packet

import (
	"encoding/binary"
	"net/netip"
)

// ICMP errors the balancer sends when its encapsulation makes a packet
// larger than the path to the backend takes: IPv4 destination unreachable,
// fragmentation needed (RFC 792, with the next-hop MTU of RFC 1191), and
// ICMPv6 packet too big (RFC 4443 3.2).
const (
	// IPv6MinMTU is the smallest MTU an IPv6 link has (RFC 8200 5); a
	// packet too big never reports less.
	IPv6MinMTU = 1280

	icmpv4Unreachable = 3
	icmpv4FragNeeded  = 4
	icmpv6TooBig      = 2
	// Bounds of the whole error, so that it reaches any sender: 576 bytes
	// for IPv4 (RFC 1812 4.3.2.3), the IPv6 minimum MTU for ICMPv6 (RFC
	// 4443 2.4 (c)).
	icmpv4ErrorMax = 576
	icmpv6ErrorMax = IPv6MinMTU
	// ipv4TOSControl is the precedence of ICMP errors (internetwork
	// control, RFC 1812 4.3.2.5).
	ipv4TOSControl = 0xc0
)

// TooBigHeadroom is the headroom TooBig needs in front of the frame.
const TooBigHeadroom = IPv6FixedLen + ICMPHeaderLen

// CanSendTooBig reports whether the sender of p may be told that p was
// too big: an IPv4 packet must have asked for it (DF; without it, the
// sender expects routers to fragment), not be a later fragment (RFC 1812
// 4.3.2.7); neither family's error may answer an ICMP error, nor a source
// that is not one host's (unspecified, multicast, broadcast, loopback).
func CanSendTooBig(p *Parsed) bool {
	if p.IsICMPError() {
		return false
	}
	src := netip.AddrFrom16(p.Src).Unmap()
	if src.IsUnspecified() || src.IsMulticast() || src.IsLoopback() || src == netip.AddrFrom4([4]byte{255, 255, 255, 255}) {
		return false
	}
	switch p.IPVersion {
	case 4:
		return p.DF && p.Frag != FragLater
	case 6:
		return true
	}
	return false
}

// TooBig turns the frame buf[off:] that p describes, in place, into the
// ICMP error that tells its sender the path takes packets of at most mtu
// bytes: fragmentation needed for IPv4, packet too big for IPv6 (mtu
// raised to IPv6MinMTU if lower), from p's destination (the address the
// sender used) to p's source, quoting the start of the packet. The
// Ethernet header goes back to the frame's source MAC from srcMAC, with
// the frame's VLAN tags. It returns the new frame's offset and length in
// buf; it needs TooBigHeadroom bytes before off (ErrNoHeadroom), and p
// must describe an IP packet within buf[off:] (ErrNotIP, ErrTruncated).
// ipid is the error's IPv4 identification.
func TooBig(buf []byte, off int, p *Parsed, srcMAC [6]byte, mtu int, ipid uint16) (newOff, newLen int, err error) {
	l3 := p.L3Off
	ipLen, maxErr := IPv4MinLen, icmpv4ErrorMax
	switch p.IPVersion {
	case 4:
	case 6:
		ipLen, maxErr = IPv6FixedLen, icmpv6ErrorMax
		mtu = max(mtu, IPv6MinMTU)
	default:
		return 0, 0, ErrNotIP
	}
	if off < 0 || l3 < EthernetLen || l3 > maxVLANTags*VLANTagLen+EthernetLen || p.IPLen < ipLen ||
		off > len(buf) || l3 > len(buf)-off || p.IPLen > len(buf)-off-l3 {
		return 0, 0, ErrTruncated
	}
	hdr := ipLen + ICMPHeaderLen // in front of the quote, where the old Ethernet header was
	if off < hdr {
		return 0, 0, ErrNoHeadroom
	}
	quote := min(p.IPLen, maxErr-hdr)
	newOff, newLen = off-hdr, l3+hdr+quote
	// The new Ethernet header lies wholly before the old one (hdr > l3):
	// written first, from the old, before the IP header covers the old.
	old, eth := buf[off:off+l3], buf[newOff:newOff+l3]
	copy(eth[ethAddrsLen:], old[ethAddrsLen:]) // tags and EtherType
	copy(eth[ethDstOff:ethSrcOff], old[ethSrcOff:ethAddrsLen])
	*(*[6]byte)(eth[ethSrcOff:]) = srcMAC

	ip := buf[newOff+l3 : newOff+l3+ipLen]
	icmp := buf[newOff+l3+ipLen : newOff+newLen]
	binary.BigEndian.PutUint32(icmp[4:], 0)
	if p.IPVersion == 4 {
		ip[ipv4VerIHLOff] = ipv4VerIHL
		ip[ipv4TOSOff] = ipv4TOSControl
		binary.BigEndian.PutUint16(ip[ipv4TotalLenOff:], uint16(ipLen+ICMPHeaderLen+quote))
		binary.BigEndian.PutUint16(ip[ipv4IDOff:], ipid)
		binary.BigEndian.PutUint16(ip[ipv4FlagsOff:], 0)
		ip[ipv4TTLOff] = outerTTL
		ip[ipv4ProtoOff] = uint8(ProtoICMP)
		binary.BigEndian.PutUint16(ip[ipv4ChecksumOff:], 0)
		copy(ip[ipv4SrcOff:ipv4DstOff], p.Dst[mapped4Off:])
		copy(ip[ipv4DstOff:IPv4MinLen], p.Src[mapped4Off:])
		putIPv4Checksum(ip)
		icmp[0], icmp[1] = icmpv4Unreachable, icmpv4FragNeeded
		binary.BigEndian.PutUint16(icmp[6:], uint16(min(mtu, 0xffff)))
		binary.BigEndian.PutUint16(icmp[2:], 0)
		binary.BigEndian.PutUint16(icmp[2:], Checksum(icmp, 0))
		return newOff, newLen, nil
	}
	binary.BigEndian.PutUint32(ip[ipv6VerClassFlowOff:], ipv6Version)
	binary.BigEndian.PutUint16(ip[ipv6PayloadLenOff:], uint16(ICMPHeaderLen+quote))
	ip[ipv6NextHeaderOff] = uint8(ProtoICMPv6)
	ip[ipv6HopLimitOff] = outerTTL
	copy(ip[ipv6SrcOff:ipv6DstOff], p.Dst[:])
	copy(ip[ipv6DstOff:IPv6FixedLen], p.Src[:])
	icmp[0], icmp[1] = icmpv6TooBig, 0
	binary.BigEndian.PutUint32(icmp[4:], uint32(mtu))
	binary.BigEndian.PutUint16(icmp[2:], 0)
	s := PseudoHeaderSum(ProtoICMPv6, p.Dst[:], p.Src[:], uint32(len(icmp)))
	binary.BigEndian.PutUint16(icmp[2:], Checksum(icmp, s))
	return newOff, newLen, nil
}

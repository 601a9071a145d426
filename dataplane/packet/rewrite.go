package packet

import "encoding/binary"

// Outer header constants for Encapsulate.
const (
	GUEHeaderLen = 4  // GUE version 0, no optional fields
	outerTTL     = 64 // outer IPv4 TTL / IPv6 hop limit
	// GUE source ports come from the ephemeral range 49152..65535 (14 bits),
	// so that receivers and ECMP spread flows by them.
	gueSrcPortBase = 0xc000
	gueSrcPortMask = 0x3fff
)

// RewriteL2 sets the destination MAC to dst and the source MAC to src: L2
// direct server return. The VLAN tags and everything after them are kept.
// A frame shorter than two MACs is left alone.
func RewriteL2(frame []byte, dst, src [6]byte) {
	if len(frame) < 12 {
		return
	}
	*(*[6]byte)(frame[0:6]) = dst
	*(*[6]byte)(frame[6:12]) = src
}

// Encap describes the outer headers Encapsulate builds.
type Encap struct {
	SrcMAC, DstMAC     [6]byte  // outer Ethernet (the next hop)
	OuterSrc, OuterDst [16]byte // IPv4-mapped form when !OuterV6
	OuterV6            bool
	GUE                bool   // GUE over UDP instead of plain IPIP / IPv6-in-IP
	GUEPort            uint16 // outer UDP destination port (the receiver's `ip fou add port N gue`)
	FlowHash           uint32 // entropy: outer UDP source port (GUE) and IPv6 flow label
	// IPID is the outer IPv4 identification. It matters only when the outer
	// header may be fragmented (inner IPv4 without DF): the caller gives a
	// per-sender counter so reassembly never mixes datagrams (RFC 6864).
	IPID uint16
}

// Overhead returns how many bytes Encapsulate adds in front of the inner IP
// packet, not counting the Ethernet header (which replaces the original one).
func (e *Encap) Overhead() int {
	n := IPv4MinLen
	if e.OuterV6 {
		n = IPv6FixedLen
	}
	if e.GUE {
		n += UDPLen + GUEHeaderLen
	}
	return n
}

// Encapsulate wraps the IP packet that p describes, buf[off+p.L3Off :
// off+p.L3Off+p.IPLen] (Ethernet padding dropped), in a new Ethernet header
// (with the frame's VLAN tags, if any), an outer IP header and, for GUE, a
// UDP and a GUE header. The headers are written into the headroom buf[:off]
// and over the old Ethernet header; the inner packet is not touched or
// moved. It returns where the new frame starts and how long it is.
//
// Plain IPIP uses protocol 4 for an IPv4 inner packet and 41 for IPv6. GUE
// (version 0, no options) carries the same numbers in its proto field, as
// Linux fou's GUE receive path expects. The outer UDP checksum is 0 over IPv4
// and computed over IPv6 (where a zero checksum is dropped by default).
//
// Errors: ErrNoHeadroom when off is too small, ErrTooBig when the new frame
// would be longer than maxLen or than an outer IP header allows, ErrNotIP or
// ErrTruncated when p does not describe an IP packet inside buf.
func Encapsulate(buf []byte, off int, p *Parsed, e *Encap, maxLen int) (newOff, newLen int, err error) {
	l3 := p.L3Off
	var innerProto uint8
	switch p.IPVersion {
	case 4:
		innerProto = uint8(ProtoIPIP)
	case 6:
		innerProto = uint8(ProtoIPv6)
	default:
		return 0, 0, ErrNotIP
	}
	tagLen := l3 - EthernetLen
	if off < 0 || tagLen < 0 || tagLen > maxVLANTags*VLANTagLen || p.IPLen < IPv4MinLen ||
		off > len(buf) || l3 > len(buf)-off || p.IPLen > len(buf)-off-l3 {
		return 0, 0, ErrTruncated
	}

	ipLen := IPv4MinLen
	if e.OuterV6 {
		ipLen = IPv6FixedLen
	}
	udpLen := 0
	if e.GUE {
		udpLen = UDPLen + GUEHeaderLen + p.IPLen
	}
	hdr := ipLen // bytes added in front of the inner packet
	if e.GUE {
		hdr += UDPLen + GUEHeaderLen
	}
	outerPayload := hdr - ipLen + p.IPLen
	if (!e.OuterV6 && ipLen+outerPayload > 0xffff) || (e.OuterV6 && outerPayload > 0xffff) {
		return 0, 0, ErrTooBig
	}
	newOff, newLen = off-hdr, l3+hdr+p.IPLen
	if newLen > maxLen {
		return 0, 0, ErrTooBig
	}
	if newOff < 0 {
		return 0, 0, ErrNoHeadroom
	}

	inner := buf[off+l3 : off+l3+p.IPLen : off+l3+p.IPLen]
	// Traffic class copied whole, DSCP and ECN (RFC 6040 normal mode).
	var tos uint8
	if p.IPVersion == 4 {
		tos = inner[1]
	} else {
		tos = inner[0]<<4 | inner[1]>>4
	}
	out := buf[newOff : off+l3 : off+l3] // everything before the inner packet
	// The new headers overlap the old Ethernet header: move the VLAN tags
	// first (copy is a memmove), then write over the rest.
	copy(out[12:12+tagLen], buf[off+12:off+12+tagLen])
	*(*[6]byte)(out[0:6]) = e.DstMAC
	*(*[6]byte)(out[6:12]) = e.SrcMAC
	ip := out[l3 : l3+ipLen]
	nextProto := innerProto
	if e.GUE {
		nextProto = uint8(ProtoUDP)
	}
	var src, dst []byte
	if !e.OuterV6 {
		binary.BigEndian.PutUint16(out[l3-2:], EtherTypeIPv4)
		ip[0] = 0x45
		ip[1] = tos
		binary.BigEndian.PutUint16(ip[2:], uint16(ipLen+outerPayload))
		binary.BigEndian.PutUint16(ip[4:], e.IPID)
		// DF whenever the sender asked for it (or is IPv6, which never lets
		// routers fragment): PMTU discovery then reaches the client.
		var fl uint16
		if p.IPVersion == 6 || p.DF {
			fl = ipv4FlagDF
		}
		binary.BigEndian.PutUint16(ip[6:], fl)
		ip[8] = outerTTL
		ip[9] = nextProto
		binary.BigEndian.PutUint16(ip[10:], 0)
		copy(ip[12:16], e.OuterSrc[12:16])
		copy(ip[16:20], e.OuterDst[12:16])
		binary.BigEndian.PutUint16(ip[10:], Checksum(ip[:IPv4MinLen], 0))
		src, dst = ip[12:16], ip[16:20]
	} else {
		binary.BigEndian.PutUint16(out[l3-2:], EtherTypeIPv6)
		binary.BigEndian.PutUint32(ip[0:], 6<<28|uint32(tos)<<20|e.FlowHash&0xfffff)
		binary.BigEndian.PutUint16(ip[4:], uint16(outerPayload))
		ip[6] = nextProto
		ip[7] = outerTTL
		copy(ip[8:24], e.OuterSrc[:])
		copy(ip[24:40], e.OuterDst[:])
		src, dst = ip[8:24], ip[24:40]
	}
	if !e.GUE {
		return newOff, newLen, nil
	}

	u := out[l3+ipLen : l3+ipLen+UDPLen+GUEHeaderLen]
	h := e.FlowHash ^ e.FlowHash>>16
	binary.BigEndian.PutUint16(u[0:], gueSrcPortBase|uint16(h)&gueSrcPortMask)
	binary.BigEndian.PutUint16(u[2:], e.GUEPort)
	binary.BigEndian.PutUint16(u[4:], uint16(udpLen))
	binary.BigEndian.PutUint16(u[6:], 0)
	// GUE: version 0, C=0, hlen 0; proto = inner family; no flags.
	u[8], u[9], u[10], u[11] = 0, innerProto, 0, 0
	if e.OuterV6 {
		s := PseudoHeaderSum(ProtoUDP, src, dst, uint32(udpLen))
		c := Checksum(inner, Sum(u, s))
		if c == 0 {
			c = 0xffff
		}
		binary.BigEndian.PutUint16(u[6:], c)
	}
	return newOff, newLen, nil
}

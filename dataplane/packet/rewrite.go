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
	var innerProto Proto
	switch p.IPVersion {
	case 4:
		innerProto = ProtoIPIP
	case 6:
		innerProto = ProtoIPv6
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
	hdr := e.Overhead()                   // bytes added in front of the inner packet
	outerPayload := hdr - ipLen + p.IPLen // what follows the outer IP header
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
	// Everything before the inner packet: Ethernet (with the VLAN tags) in
	// out[:l3], then the outer IP header and, for GUE, the UDP and GUE
	// headers.
	out := buf[newOff : off+l3 : off+l3]
	eth := out[:l3]
	nextProto := innerProto
	if e.GUE {
		nextProto = ProtoUDP
	}
	tos := trafficClass(inner, p.IPVersion)
	// The new headers overlap the old Ethernet header: the VLAN tags move
	// first, then the rest is written over.
	tags := buf[off+ethAddrsLen : off+l3-etherTypeLen]
	if !e.OuterV6 {
		writeEthernet(eth, tags, e.DstMAC, e.SrcMAC, EtherTypeIPv4)
		// DF whenever the sender asked for it (or is IPv6, which never lets
		// routers fragment): PMTU discovery then reaches the client.
		var flags uint16
		if p.IPVersion == 6 || p.DF {
			flags = ipv4FlagDF
		}
		ip := out[l3 : l3+IPv4MinLen : l3+IPv4MinLen]
		writeIPv4Header(ip, e, tos, uint16(ipLen+outerPayload), flags, nextProto)
		putIPv4Checksum(ip)
	} else {
		writeEthernet(eth, tags, e.DstMAC, e.SrcMAC, EtherTypeIPv6)
		ip := out[l3 : l3+IPv6FixedLen : l3+IPv6FixedLen]
		writeIPv6Header(ip, e, tos, uint16(outerPayload), nextProto)
	}
	if !e.GUE {
		return newOff, newLen, nil
	}

	udp := out[l3+ipLen : l3+ipLen+UDPLen+GUEHeaderLen] // UDP and GUE headers
	udpLen := uint16(outerPayload)                      // and the inner packet
	writeUDPHeader(udp, gueSrcPort(e.FlowHash), e.GUEPort, udpLen)
	writeGUEHeader(udp[UDPLen:], innerProto)
	if e.OuterV6 {
		// Over UDP and GUE headers (checksum 0) and the inner packet.
		s := PseudoHeaderSum(ProtoUDP, e.OuterSrc[:], e.OuterDst[:], uint32(udpLen))
		putUDPChecksum(udp, Checksum(inner, Sum(udp, s)))
	}
	return newOff, newLen, nil
}

// Offsets of the fields Encapsulate writes, from the start of each header:
// Ethernet (IEEE 802.3), IPv4 (RFC 791), IPv6 (RFC 8200), UDP (RFC 768) and
// GUE version 0 (draft-ietf-intarea-gue).
const (
	ethDstOff    = 0
	ethSrcOff    = 6
	ethAddrsLen  = 12 // both MACs; the VLAN tags, then the EtherType, follow
	etherTypeLen = 2

	ipv4VerIHLOff   = 0
	ipv4TOSOff      = 1
	ipv4TotalLenOff = 2
	ipv4IDOff       = 4
	ipv4FlagsOff    = 6 // flags and fragment offset
	ipv4TTLOff      = 8
	ipv4ProtoOff    = 9
	ipv4ChecksumOff = 10
	ipv4SrcOff      = 12
	ipv4DstOff      = 16
	ipv4VerIHL      = 4<<4 | IPv4MinLen/4 // version 4, no options
	mapped4Off      = 12                  // the IPv4 address in an IPv4-mapped [16]byte

	ipv6VerClassFlowOff = 0 // version (4 bits), traffic class (8), flow label (20)
	ipv6PayloadLenOff   = 4
	ipv6NextHeaderOff   = 6
	ipv6HopLimitOff     = 7
	ipv6SrcOff          = 8
	ipv6DstOff          = 24
	ipv6Version         = 6 << 28
	ipv6ClassShift      = 20
	ipv6FlowLabelMask   = 0xfffff

	udpSrcPortOff  = 0
	udpDstPortOff  = 2
	udpLengthOff   = 4
	udpChecksumOff = 6

	gueVerFlagsHlenOff = 0 // version 0, C=0, hlen 0
	gueProtoOff        = 1
	gueFlagsOff        = 2 // no flags
)

// trafficClass returns the DSCP and ECN bits of the inner IP header ip, to
// be copied whole into the outer header (RFC 6040 normal mode).
func trafficClass(ip []byte, version uint8) uint8 {
	if version == 4 {
		return ip[ipv4TOSOff]
	}
	return ip[0]<<4 | ip[1]>>4 // between the version and the flow label
}

// writeEthernet writes an Ethernet header into eth: dst, src, the VLAN tags
// tags, and etherType in its last two bytes. The tags may overlap eth (the
// old header under the new one): they are moved first (copy is a memmove).
func writeEthernet(eth, tags []byte, dst, src [6]byte, etherType uint16) {
	copy(eth[ethAddrsLen:len(eth)-etherTypeLen], tags)
	*(*[6]byte)(eth[ethDstOff:]) = dst
	*(*[6]byte)(eth[ethSrcOff:]) = src
	binary.BigEndian.PutUint16(eth[len(eth)-etherTypeLen:], etherType)
}

// writeIPv4Header writes the outer IPv4 header (no options) from e into ip:
// total length totalLen, flags (ipv4FlagDF or 0; fragment offset 0),
// protocol proto, checksum 0 (see putIPv4Checksum).
func writeIPv4Header(ip []byte, e *Encap, tos uint8, totalLen, flags uint16, proto Proto) {
	_ = ip[IPv4MinLen-1] // one bounds check for the whole header
	ip[ipv4VerIHLOff] = ipv4VerIHL
	ip[ipv4TOSOff] = tos
	binary.BigEndian.PutUint16(ip[ipv4TotalLenOff:], totalLen)
	binary.BigEndian.PutUint16(ip[ipv4IDOff:], e.IPID)
	binary.BigEndian.PutUint16(ip[ipv4FlagsOff:], flags)
	ip[ipv4TTLOff] = outerTTL
	ip[ipv4ProtoOff] = uint8(proto)
	binary.BigEndian.PutUint16(ip[ipv4ChecksumOff:], 0)
	copy(ip[ipv4SrcOff:ipv4DstOff], e.OuterSrc[mapped4Off:])
	copy(ip[ipv4DstOff:IPv4MinLen], e.OuterDst[mapped4Off:])
}

// putIPv4Checksum sets the header checksum of the IPv4 header at the start
// of ip, whose checksum field is 0.
func putIPv4Checksum(ip []byte) {
	binary.BigEndian.PutUint16(ip[ipv4ChecksumOff:], Checksum(ip[:IPv4MinLen], 0))
}

// writeIPv6Header writes the outer IPv6 header from e into ip: payload
// length payloadLen, next header proto, e.FlowHash as the flow label.
func writeIPv6Header(ip []byte, e *Encap, tos uint8, payloadLen uint16, proto Proto) {
	_ = ip[IPv6FixedLen-1] // one bounds check for the whole header
	word := ipv6Version | uint32(tos)<<ipv6ClassShift | e.FlowHash&ipv6FlowLabelMask
	binary.BigEndian.PutUint32(ip[ipv6VerClassFlowOff:], word)
	binary.BigEndian.PutUint16(ip[ipv6PayloadLenOff:], payloadLen)
	ip[ipv6NextHeaderOff] = uint8(proto)
	ip[ipv6HopLimitOff] = outerTTL
	copy(ip[ipv6SrcOff:ipv6DstOff], e.OuterSrc[:])
	copy(ip[ipv6DstOff:IPv6FixedLen], e.OuterDst[:])
}

// gueSrcPort is the outer UDP source port of a flow: its hash folded into
// the ephemeral range, so that receivers and ECMP spread flows by it.
func gueSrcPort(flowHash uint32) uint16 {
	h := flowHash ^ flowHash>>16
	return gueSrcPortBase | uint16(h)&gueSrcPortMask
}

// writeUDPHeader writes a UDP header with a zero checksum into udp.
func writeUDPHeader(udp []byte, srcPort, dstPort, length uint16) {
	_ = udp[UDPLen-1] // one bounds check for the whole header
	binary.BigEndian.PutUint16(udp[udpSrcPortOff:], srcPort)
	binary.BigEndian.PutUint16(udp[udpDstPortOff:], dstPort)
	binary.BigEndian.PutUint16(udp[udpLengthOff:], length)
	binary.BigEndian.PutUint16(udp[udpChecksumOff:], 0)
}

// writeGUEHeader writes a GUE header (version 0, no options, no flags)
// carrying proto, the inner packet's IP protocol number, into gue.
func writeGUEHeader(gue []byte, proto Proto) {
	_ = gue[GUEHeaderLen-1] // one bounds check for the whole header
	gue[gueVerFlagsHlenOff] = 0
	gue[gueProtoOff] = uint8(proto)
	binary.BigEndian.PutUint16(gue[gueFlagsOff:], 0)
}

// putUDPChecksum sets the checksum of the UDP header at the start of udp to
// the computed c; a computed 0 is sent as 0xffff, since 0 means no checksum
// (RFC 768), which IPv6 receivers drop by default.
func putUDPChecksum(udp []byte, c uint16) {
	if c == 0 {
		c = 0xffff
	}
	binary.BigEndian.PutUint16(udp[udpChecksumOff:], c)
}

package packet

import (
	"encoding/binary"
	"errors"
)

// Errors that Parse and Encapsulate return. They are built once so that the
// hot path never allocates to report a bad frame.
var (
	// ErrNotIP is returned for frames whose EtherType is neither IPv4 nor IPv6
	// (ARP, LLDP, ...): they belong to the host.
	ErrNotIP = errors.New("packet: not IP")
	// ErrTruncated is returned when a header or the length an IP header
	// announces does not fit in the frame.
	ErrTruncated = errors.New("packet: truncated")
	// ErrMalformed is returned for headers that cannot be valid whatever the
	// frame length: wrong IP version, IHL < 5, total length shorter than the
	// header, a bad IPv6 extension header chain, TCP data offset < 5.
	ErrMalformed = errors.New("packet: malformed")
	// ErrNoHeadroom is returned by Encapsulate when the buffer has too little
	// room before the frame for the outer headers.
	ErrNoHeadroom = errors.New("packet: not enough headroom")
	// ErrTooBig is returned by Encapsulate when the encapsulated frame would
	// exceed maxLen (or what an outer IP header can describe).
	ErrTooBig = errors.New("packet: encapsulated frame too big")
)

// EtherTypes and header sizes the parser knows (IP protocols: Proto).
const (
	EtherTypeIPv4  = 0x0800
	EtherTypeARP   = 0x0806
	EtherTypeVLAN  = 0x8100 // IEEE 802.1Q
	EtherTypeQinQ  = 0x88a8 // IEEE 802.1ad service tag
	EtherTypeIPv6  = 0x86dd
	EthernetLen    = 14
	VLANTagLen     = 4
	IPv4MinLen     = 20
	IPv6FixedLen   = 40
	TCPMinLen      = 20
	UDPLen         = 8
	ICMPHeaderLen  = 8
	maxVLANTags    = 2 // 802.1Q, or 802.1ad + 802.1Q (QinQ)
	ipv4FlagDF     = 0x4000
	ipv4FlagMF     = 0x2000
	ipv4OffsetMask = 0x1fff
)

// MaxExtHeaders is how many IPv6 extension headers (and IPv4 AH headers)
// Parse follows (real traffic carries one or two); a packet with more is
// malformed. The XDP program follows exactly as many
// (xdpprog.MaxExtHeaders; more would exceed what the verifier accepts), so
// that the workers never see NDP they would have to pass: a worker cannot
// hand a frame back to the kernel.
const MaxExtHeaders = 8

const maxExtHeaders = MaxExtHeaders

// TCP flags as they appear in Parsed.TCPFlags.
const (
	TCPFin = 0x01
	TCPSyn = 0x02
	TCPRst = 0x04
	TCPPsh = 0x08
	TCPAck = 0x10
)

// Frag says where a packet sits in a fragmented datagram.
type Frag uint8

const (
	// FragNone: not a fragment (IPv4 MF=0 and offset 0; IPv6 without a
	// Fragment header).
	FragNone Frag = iota
	// FragFirst: offset 0 with more fragments to come (IPv4), or any IPv6
	// packet with a Fragment header at offset 0, atomic fragments included
	// (SPEC §0 ties port information to the header's absence). Its L4 header
	// is there and parsed, but it has no port information for hashing.
	FragFirst
	// FragLater: a middle or last fragment (offset > 0); no L4 header.
	FragLater
)

func (f Frag) String() string {
	switch f {
	case FragNone:
		return "none"
	case FragFirst:
		return "first"
	case FragLater:
		return "later"
	}
	return "invalid"
}

// Parsed is a decoded frame. It holds no reference to the frame, so a worker
// keeps one per frame slot (or one per batch) and reuses it.
type Parsed struct {
	L3Off     int    // offset of the IP header (after Ethernet and up to two VLAN tags)
	VLAN      uint16 // VLAN ID of the outermost tag, 0 if untagged
	HasVLAN   bool
	EtherType uint16 // after the VLAN tags
	IPVersion uint8  // 4 or 6 (from the EtherType), 0 when not IP
	// DstValid says Dst was read. It is set as early as possible, so that a
	// malformed frame can still be classified as VIP traffic or not.
	DstValid bool
	Src, Dst [16]byte // IPv4 in IPv4-mapped form (::ffff:a.b.c.d)
	// Proto is the upper-layer protocol, after IPv6 extension headers (and an
	// IPv4 AH header). For FragLater it is the Fragment header's next header.
	Proto Proto
	IPLen int // L3 length per the IP header; the frame may be longer (Ethernet padding)
	IHL   int // IP header length incl. options / extension headers: L4Off - L3Off
	L4Off int // offset of the L4 header (meaningful when Frag != FragLater)
	Frag  Frag
	DF    bool  // IPv4 don't-fragment
	TTL   uint8 // TTL / hop limit

	HasPorts         bool // TCP/UDP ports were read (never on FragLater)
	SrcPort, DstPort uint16
	TCPFlags         uint8 // TCPFin, TCPSyn, ...

	ICMPType, ICMPCode uint8 // ICMP for IPv4, ICMPv6 for IPv6

	// HasInner says Inner holds the packet quoted by an ICMP error (v4 types
	// 3, 4, 11, 12; v6 types 1, 2, 3, 4): its addresses, and for TCP/UDP its
	// ports, were in the quote. SPEC X1 steers such errors by it.
	HasInner bool
	Inner    Inner
}

// Inner is the flow of a packet quoted in an ICMP error. The quoted packet
// went from the VIP towards the client, so its reverse is the client's flow.
type Inner struct {
	IPVersion        uint8
	Src, Dst         [16]byte
	Proto            Proto
	HasPorts         bool
	SrcPort, DstPort uint16
}

// IsV4 reports whether p is an IPv4 packet.
func (p *Parsed) IsV4() bool { return p.IPVersion == 4 }

// HasPortInfo reports whether p has port information in the sense of SPEC §0:
// TCP or UDP and not a fragment at all (a first fragment carries ports, for
// FR3, but hashes without them).
func (p *Parsed) HasPortInfo() bool { return p.HasPorts && p.Frag == FragNone }

// IsICMPError reports whether p is an ICMP or ICMPv6 error message (whether
// or not its quote could be read).
func (p *Parsed) IsICMPError() bool {
	switch {
	case p.IPVersion == 4 && p.Proto == ProtoICMP:
		return isICMPv4Error(p.ICMPType)
	case p.IPVersion == 6 && p.Proto == ProtoICMPv6:
		return isICMPv6Error(p.ICMPType)
	}
	return false
}

// Parse decodes frame into p, overwriting all of it. It never panics and
// never allocates. It returns ErrNotIP for non-IP EtherTypes and
// ErrTruncated or ErrMalformed for bad IP frames; on error the fields read so
// far (notably DstValid and Dst) stay set. IP checksums are not verified: the
// balancer passes packets through and the endpoints check them.
func Parse(frame []byte, p *Parsed) error {
	*p = Parsed{}
	n := len(frame)
	b := frame[:n:n]

	// Ethernet, then at most two VLAN tags.
	if len(b) < EthernetLen {
		return ErrTruncated
	}
	off := 12
	et := binary.BigEndian.Uint16(b[off:])
	for tags := 0; (et == EtherTypeVLAN || et == EtherTypeQinQ) && tags < maxVLANTags; tags++ {
		if len(b) < off+2+VLANTagLen {
			return ErrTruncated
		}
		if !p.HasVLAN {
			p.HasVLAN = true
			p.VLAN = binary.BigEndian.Uint16(b[off+2:]) & 0x0fff
		}
		off += VLANTagLen
		et = binary.BigEndian.Uint16(b[off:])
	}
	off += 2
	p.EtherType = et
	p.L3Off = off

	switch et {
	case EtherTypeIPv4:
		return p.parseIPv4(b)
	case EtherTypeIPv6:
		return p.parseIPv6(b)
	}
	return ErrNotIP
}

func (p *Parsed) parseIPv4(frame []byte) error {
	p.IPVersion = 4
	b := frame[p.L3Off:]
	if len(b) < IPv4MinLen {
		return ErrTruncated
	}
	b = b[:len(b):len(b)]
	putMapped(&p.Src, b[12:16])
	putMapped(&p.Dst, b[16:20])
	p.DstValid = true
	p.TTL = b[8]
	p.Proto = Proto(b[9])
	fl := binary.BigEndian.Uint16(b[6:])
	p.DF = fl&ipv4FlagDF != 0
	switch {
	case fl&ipv4OffsetMask != 0:
		p.Frag = FragLater
	case fl&ipv4FlagMF != 0:
		p.Frag = FragFirst
	}

	if b[0]>>4 != 4 {
		return ErrMalformed
	}
	ihl := int(b[0]&0x0f) * 4
	tot := int(binary.BigEndian.Uint16(b[2:]))
	if ihl < IPv4MinLen || tot < ihl {
		return ErrMalformed
	}
	if tot > len(b) {
		return ErrTruncated
	}
	p.IPLen = tot
	b = b[:tot:tot] // drop Ethernet padding

	// An AH header sits between IPv4 and the upper layer just as in IPv6;
	// look through it so that both families see the same upper protocol.
	proto, l4, err := walkExt(b, ihl, p.Proto, false, &p.Frag)
	p.Proto = proto
	p.L4Off = p.L3Off + l4
	p.IHL = l4
	if err != nil {
		return err
	}
	return p.parseL4(b[l4:])
}

// putMapped writes the IPv4 address a4 into a in mapped form. It writes the
// address as two words rather than building a [16]byte, which Parse's
// profile showed to cost as much as the rest of the IPv4 header.
func putMapped(a *[16]byte, a4 []byte) {
	binary.BigEndian.PutUint64(a[0:], 0)
	binary.BigEndian.PutUint64(a[8:], 0xffff_0000_0000|uint64(binary.BigEndian.Uint32(a4)))
}

func (p *Parsed) parseIPv6(frame []byte) error {
	p.IPVersion = 6
	b := frame[p.L3Off:]
	if len(b) < IPv6FixedLen {
		return ErrTruncated
	}
	b = b[:len(b):len(b)]
	p.Src = [16]byte(b[8:24])
	p.Dst = [16]byte(b[24:40])
	p.DstValid = true
	p.TTL = b[7]
	p.Proto = Proto(b[6])

	if b[0]>>4 != 6 {
		return ErrMalformed
	}
	tot := IPv6FixedLen + int(binary.BigEndian.Uint16(b[4:]))
	if tot > len(b) {
		return ErrTruncated
	}
	p.IPLen = tot
	b = b[:tot:tot]

	proto, l4, err := walkExt(b, IPv6FixedLen, p.Proto, true, &p.Frag)
	p.Proto = proto
	p.L4Off = p.L3Off + l4
	p.IHL = l4
	if err != nil {
		return err
	}
	return p.parseL4(b[l4:])
}

// walkExt follows the extension headers of the IP packet b from offset off,
// where a header of type proto starts. IPv4 packets (v6 false) only have AH.
// It returns the upper-layer protocol and its offset in b, and records a
// Fragment header in *frag. After a non-first fragment it stops: what follows
// is payload, not headers.
func walkExt(b []byte, off int, proto Proto, v6 bool, frag *Frag) (Proto, int, error) {
	for n := 0; ; n++ {
		if *frag == FragLater {
			return proto, off, nil
		}
		var hlen int
		switch {
		case proto == ProtoAH:
			if len(b) < off+2 {
				return proto, off, ErrTruncated
			}
			hlen = (int(b[off+1]) + 2) * 4 // RFC 4302: in 4-octet units, minus 2
		case !v6:
			return proto, off, nil
		case proto == ProtoHopByHop && n != 0:
			return proto, off, ErrMalformed // RFC 8200 4.1: only right after the fixed header
		case proto == ProtoHopByHop || proto == ProtoRouting || proto == ProtoDstOpts:
			if len(b) < off+2 {
				return proto, off, ErrTruncated
			}
			hlen = (int(b[off+1]) + 1) * 8
		case proto == ProtoFragment:
			hlen = 8
			if len(b) < off+hlen {
				return proto, off, ErrTruncated
			}
			fo := binary.BigEndian.Uint16(b[off+2:])
			switch {
			case fo>>3 != 0:
				*frag = FragLater
			case *frag == FragNone:
				*frag = FragFirst
			}
		default:
			return proto, off, nil
		}
		if n >= maxExtHeaders {
			return proto, off, ErrMalformed
		}
		if len(b) < off+hlen {
			return proto, off, ErrTruncated
		}
		proto = Proto(b[off])
		off += hlen
	}
}

// parseL4 reads the L4 header l4 (cut to the IP length) of a packet that is
// not a later fragment.
func (p *Parsed) parseL4(l4 []byte) error {
	if p.Frag == FragLater {
		return nil
	}
	switch p.Proto {
	case ProtoTCP:
		if len(l4) < TCPMinLen {
			return ErrTruncated
		}
		p.SrcPort = binary.BigEndian.Uint16(l4[0:])
		p.DstPort = binary.BigEndian.Uint16(l4[2:])
		p.TCPFlags = l4[13]
		p.HasPorts = true
		doff := int(l4[12]>>4) * 4
		if doff < TCPMinLen {
			return ErrMalformed
		}
		if doff > len(l4) {
			return ErrTruncated
		}
	case ProtoUDP:
		if len(l4) < UDPLen {
			return ErrTruncated
		}
		p.SrcPort = binary.BigEndian.Uint16(l4[0:])
		p.DstPort = binary.BigEndian.Uint16(l4[2:])
		p.HasPorts = true
	case ProtoICMP, ProtoICMPv6:
		v4 := p.IPVersion == 4
		if v4 != (p.Proto == ProtoICMP) {
			return nil // ICMP over IPv6 or ICMPv6 over IPv4: just a protocol number
		}
		if len(l4) < ICMPHeaderLen {
			return ErrTruncated
		}
		p.ICMPType, p.ICMPCode = l4[0], l4[1]
		if (v4 && isICMPv4Error(p.ICMPType)) || (!v4 && isICMPv6Error(p.ICMPType)) {
			p.HasInner = p.Inner.parse(l4[ICMPHeaderLen:], p.IPVersion)
			if !p.HasInner {
				p.Inner = Inner{}
			}
		}
	}
	return nil
}

func isICMPv4Error(t uint8) bool {
	// Destination unreachable, source quench, time exceeded, parameter problem.
	return t == 3 || t == 4 || t == 11 || t == 12
}

func isICMPv6Error(t uint8) bool {
	// Destination unreachable, packet too big, time exceeded, parameter problem.
	return t >= 1 && t <= 4
}

// parse reads the packet an ICMP error quotes (q: the quote, as much as the
// error carries). It reports whether the addresses, and for TCP/UDP the
// ports, were there. A quote is often cut short, so IP lengths are not
// checked against it.
func (in *Inner) parse(q []byte, version uint8) bool {
	n := len(q)
	q = q[:n:n]
	var (
		l4   int
		frag Frag
	)
	switch version {
	case 4:
		if len(q) < IPv4MinLen || q[0]>>4 != 4 {
			return false
		}
		ihl := int(q[0]&0x0f) * 4
		if ihl < IPv4MinLen {
			return false
		}
		putMapped(&in.Src, q[12:16])
		putMapped(&in.Dst, q[16:20])
		if binary.BigEndian.Uint16(q[6:])&ipv4OffsetMask != 0 {
			frag = FragLater
		}
		proto, off, err := walkExt(q, ihl, Proto(q[9]), false, &frag)
		if err != nil {
			return false
		}
		in.Proto = proto
		l4 = off
	case 6:
		if len(q) < IPv6FixedLen || q[0]>>4 != 6 {
			return false
		}
		in.Src = [16]byte(q[8:24])
		in.Dst = [16]byte(q[24:40])
		proto, off, err := walkExt(q, IPv6FixedLen, Proto(q[6]), true, &frag)
		if err != nil {
			return false
		}
		in.Proto = proto
		l4 = off
	default:
		return false
	}
	in.IPVersion = version
	if frag == FragLater || (in.Proto != ProtoTCP && in.Proto != ProtoUDP) {
		return true
	}
	if len(q) < l4+4 {
		return false
	}
	in.SrcPort = binary.BigEndian.Uint16(q[l4:])
	in.DstPort = binary.BigEndian.Uint16(q[l4+2:])
	in.HasPorts = true
	return true
}

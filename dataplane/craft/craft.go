// Package craft builds real Ethernet frames from flow descriptions with
// gopacket, for `xlb sim`, `xlb explain`, tests and benchmark generators.
// It is never on the per-packet path.
package craft

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

	"xlb/dataplane/packet"
)

// Frag is where a packet sits in a fragmented datagram.
type Frag uint8

const (
	FragNone Frag = iota
	FragFirst
	FragMiddle
	FragLast
)

// ParseFrag reads the sim/explain spelling: none, first, middle, last.
func ParseFrag(s string) (Frag, error) {
	switch s {
	case "", "none":
		return FragNone, nil
	case "first":
		return FragFirst, nil
	case "middle":
		return FragMiddle, nil
	case "last":
		return FragLast, nil
	}
	return 0, fmt.Errorf("frag %q: want none, first, middle or last", s)
}

// Packet describes one frame to build.
type Packet struct {
	Src, Dst         netip.Addr
	Proto            packet.Proto
	SrcPort, DstPort uint16
	// Flags for TCP: any of S A F R P; "" means A.
	Flags string
	Frag  Frag
	// DF sets IPv4's don't-fragment flag.
	DF bool
	// ICMPType/ICMPCode for ICMP and ICMPv6; Inner is the quoted packet of
	// an ICMP error.
	ICMPType, ICMPCode uint8
	Inner              *Packet
	// VLAN > 0 adds an 802.1Q tag.
	VLAN uint16
	// PayloadLen is the L4 payload size (default 32; fragments need >= 48).
	PayloadLen int
	// Payload, when set, is the L4 payload (PayloadLen is then ignored
	// unless a fragment needs more: zeros are appended).
	Payload []byte
	// SrcMAC/DstMAC default to fixed locally administered addresses.
	SrcMAC, DstMAC net.HardwareAddr
}

// Default MACs of crafted frames.
var (
	ClientMAC = net.HardwareAddr{0x02, 0xc1, 0x1e, 0x00, 0x00, 0x01}
	LocalMAC  = net.HardwareAddr{0x02, 0x1b, 0x00, 0x00, 0x00, 0x01}
)

// Sizes of the fragments crafted: first fragment carries fragFirst bytes of
// the L4 datagram, middle the next fragMiddle, last the rest.
const (
	fragFirst  = 32
	fragMiddle = 16
)

// Build returns the frame for p.
func Build(p *Packet) ([]byte, error) {
	if !p.Src.IsValid() || !p.Dst.IsValid() {
		return nil, errors.New("src and dst addresses are required")
	}
	if p.Src.Is4() != p.Dst.Is4() {
		return nil, fmt.Errorf("src %s and dst %s are of different families", p.Src, p.Dst)
	}
	v6 := p.Dst.Is6()
	if (p.Proto == packet.ProtoICMP && v6) || (p.Proto == packet.ProtoICMPv6 && !v6) {
		return nil, fmt.Errorf("%s over IPv%d", p.Proto, map[bool]int{true: 6, false: 4}[v6])
	}
	l4, err := buildL4(p)
	if err != nil {
		return nil, err
	}

	srcMAC, dstMAC := p.SrcMAC, p.DstMAC
	if srcMAC == nil {
		srcMAC = ClientMAC
	}
	if dstMAC == nil {
		dstMAC = LocalMAC
	}
	eth := &layers.Ethernet{SrcMAC: srcMAC, DstMAC: dstMAC, EthernetType: layers.EthernetTypeIPv4}
	if v6 {
		eth.EthernetType = layers.EthernetTypeIPv6
	}
	ls := []gopacket.SerializableLayer{eth}
	if p.VLAN > 0 {
		eth.EthernetType = layers.EthernetTypeDot1Q
		et := layers.EthernetTypeIPv4
		if v6 {
			et = layers.EthernetTypeIPv6
		}
		ls = append(ls, &layers.Dot1Q{VLANIdentifier: p.VLAN, Type: et})
	}

	payload := l4
	var fragOff uint16
	more := false
	switch p.Frag {
	case FragFirst:
		payload, more = l4[:fragFirst], true
	case FragMiddle:
		payload, fragOff, more = l4[fragFirst:fragFirst+fragMiddle], fragFirst/8, true
	case FragLast:
		payload, fragOff = l4[fragFirst+fragMiddle:], (fragFirst+fragMiddle)/8
	}
	if v6 {
		ip := &layers.IPv6{Version: 6, HopLimit: 64, SrcIP: p.Src.AsSlice(), DstIP: p.Dst.AsSlice(), NextHeader: layers.IPProtocol(p.Proto)}
		if p.Frag != FragNone {
			ip.NextHeader = layers.IPProtocolIPv6Fragment
			fh := make([]byte, 8)
			fh[0] = byte(p.Proto)
			v := fragOff << 3
			if more {
				v |= 1
			}
			binary.BigEndian.PutUint16(fh[2:], v)
			binary.BigEndian.PutUint32(fh[4:], 0x1234)
			payload = append(fh, payload...)
		}
		ls = append(ls, ip)
	} else {
		ip := &layers.IPv4{Version: 4, IHL: 5, TTL: 64, Id: 0x1234, SrcIP: p.Src.AsSlice(), DstIP: p.Dst.AsSlice(),
			Protocol: layers.IPProtocol(p.Proto), FragOffset: fragOff}
		if more {
			ip.Flags = layers.IPv4MoreFragments
		}
		if p.DF {
			ip.Flags |= layers.IPv4DontFragment
		}
		ls = append(ls, ip)
	}
	ls = append(ls, gopacket.Payload(payload))
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, ls...); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// BuildIP returns the IP packet of p without the Ethernet header (used for
// the quote of an ICMP error).
func BuildIP(p *Packet) ([]byte, error) {
	q := *p
	q.VLAN = 0
	f, err := Build(&q)
	if err != nil {
		return nil, err
	}
	return f[14:], nil
}

// buildL4 serializes the whole L4 datagram (header and payload) with a
// correct checksum, before any fragmentation.
func buildL4(p *Packet) ([]byte, error) {
	n := p.PayloadLen
	if n == 0 {
		n = 32
	}
	if p.Frag != FragNone && n < 48 {
		n = 48
	}
	var data []byte
	if p.Payload != nil {
		data = append([]byte(nil), p.Payload...)
		if p.Frag != FragNone && len(data) < 48 {
			data = append(data, make([]byte, 48-len(data))...)
		}
	} else {
		data = make([]byte, n)
		for i := range data {
			data[i] = byte(i)
		}
	}
	var netLayer gopacket.NetworkLayer
	if p.Dst.Is6() {
		netLayer = &layers.IPv6{SrcIP: p.Src.AsSlice(), DstIP: p.Dst.AsSlice(), NextHeader: layers.IPProtocol(p.Proto)}
	} else {
		netLayer = &layers.IPv4{SrcIP: p.Src.AsSlice(), DstIP: p.Dst.AsSlice(), Protocol: layers.IPProtocol(p.Proto)}
	}
	var ls []gopacket.SerializableLayer
	switch p.Proto {
	case packet.ProtoTCP:
		t := &layers.TCP{SrcPort: layers.TCPPort(p.SrcPort), DstPort: layers.TCPPort(p.DstPort), Seq: 1000, Window: 65535, DataOffset: 5}
		flags := p.Flags
		if flags == "" {
			flags = "A"
		}
		for _, c := range strings.ToUpper(flags) {
			switch c {
			case 'S':
				t.SYN = true
			case 'A':
				t.ACK = true
			case 'F':
				t.FIN = true
			case 'R':
				t.RST = true
			case 'P':
				t.PSH = true
			default:
				return nil, fmt.Errorf("tcp flag %q: want any of S A F R P", c)
			}
		}
		if t.ACK {
			t.Ack = 1
		}
		if err := t.SetNetworkLayerForChecksum(netLayer); err != nil {
			return nil, err
		}
		ls = append(ls, t)
	case packet.ProtoUDP:
		u := &layers.UDP{SrcPort: layers.UDPPort(p.SrcPort), DstPort: layers.UDPPort(p.DstPort)}
		if err := u.SetNetworkLayerForChecksum(netLayer); err != nil {
			return nil, err
		}
		ls = append(ls, u)
	case packet.ProtoICMP:
		ls = append(ls, &layers.ICMPv4{TypeCode: layers.CreateICMPv4TypeCode(p.ICMPType, p.ICMPCode), Id: 1, Seq: 1})
		if p.Inner != nil {
			q, err := BuildIP(p.Inner)
			if err != nil {
				return nil, fmt.Errorf("inner: %w", err)
			}
			data = q
		}
	case packet.ProtoICMPv6:
		ic := &layers.ICMPv6{TypeCode: layers.CreateICMPv6TypeCode(p.ICMPType, p.ICMPCode)}
		if err := ic.SetNetworkLayerForChecksum(netLayer); err != nil {
			return nil, err
		}
		ls = append(ls, ic)
		body := []byte{0, 0, 0x05, 0xdc} // MTU 1500 / unused / id+seq
		if p.Inner != nil {
			q, err := BuildIP(p.Inner)
			if err != nil {
				return nil, fmt.Errorf("inner: %w", err)
			}
			data = q
		}
		data = append(body, data...)
	case packet.ProtoESP:
		data = append([]byte{0, 0, 0x10, 0x01, 0, 0, 0, 1}, data...) // SPI, sequence
	case packet.ProtoGRE:
		data = append([]byte{0, 0, 0x08, 0x00}, data...) // no flags, IPv4 payload
	}
	ls = append(ls, gopacket.Payload(data))
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, ls...); err != nil {
		return nil, err
	}
	out := buf.Bytes()
	if p.Frag != FragNone && len(out) < fragFirst+fragMiddle+8 {
		// Only protocols with a short header get here (GRE, numbered
		// protocols), and none of them has a checksum: pad the payload so
		// that every fragment has bytes.
		out = append(out, make([]byte, fragFirst+fragMiddle+8-len(out))...)
	}
	return out, nil
}

package packet

import (
	"encoding/binary"
	"net"
	"net/netip"
	"testing"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
)

// Test frames are built with gopacket, never by the code under test.

var (
	macClient = net.HardwareAddr{0x02, 0, 0, 0, 0, 0x01}
	macLB     = net.HardwareAddr{0x02, 0, 0, 0, 0, 0x02}
	cli4      = netip.MustParseAddr("198.51.100.7")
	vip4      = netip.MustParseAddr("203.0.113.10")
	cli6      = netip.MustParseAddr("2001:db8:1::7")
	vip6      = netip.MustParseAddr("2001:db8:ffff::10")
)

func a16(a netip.Addr) [16]byte { return AddrFromNetip(a) }

func serialize(tb testing.TB, ls ...gopacket.SerializableLayer) []byte {
	tb.Helper()
	buf := gopacket.NewSerializeBuffer()
	opts := gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}
	if err := gopacket.SerializeLayers(buf, opts, ls...); err != nil {
		tb.Fatalf("serialize: %v", err)
	}
	return append([]byte(nil), buf.Bytes()...)
}

func ethL(t layers.EthernetType) *layers.Ethernet {
	return &layers.Ethernet{SrcMAC: macClient, DstMAC: macLB, EthernetType: t}
}

func dot1q(vlan uint16, t layers.EthernetType) *layers.Dot1Q {
	return &layers.Dot1Q{VLANIdentifier: vlan, Type: t}
}

func ip4L(proto layers.IPProtocol) *layers.IPv4 {
	return &layers.IPv4{
		Version: 4, TTL: 64, Flags: layers.IPv4DontFragment, Protocol: proto,
		SrcIP: cli4.AsSlice(), DstIP: vip4.AsSlice(),
	}
}

func ip6L(next layers.IPProtocol) *layers.IPv6 {
	return &layers.IPv6{
		Version: 6, HopLimit: 63, NextHeader: next,
		SrcIP: cli6.AsSlice(), DstIP: vip6.AsSlice(),
	}
}

// tcpL returns a TCP header whose checksum covers net (an *IPv4 or *IPv6).
func tcpL(net gopacket.NetworkLayer, sport, dport uint16) *layers.TCP {
	t := &layers.TCP{SrcPort: layers.TCPPort(sport), DstPort: layers.TCPPort(dport), Seq: 1, Window: 65535}
	if err := t.SetNetworkLayerForChecksum(net); err != nil {
		panic(err)
	}
	return t
}

func udpL(net gopacket.NetworkLayer, sport, dport uint16) *layers.UDP {
	u := &layers.UDP{SrcPort: layers.UDPPort(sport), DstPort: layers.UDPPort(dport)}
	if err := u.SetNetworkLayerForChecksum(net); err != nil {
		panic(err)
	}
	return u
}

// ext6 is a generic IPv6 extension header (hop-by-hop, routing, destination
// options) of 8*(hdrExtLen+1) bytes, as raw bytes for layers gopacket cannot
// serialize.
func ext6(next layers.IPProtocol, hdrExtLen uint8) gopacket.Payload {
	b := make([]byte, 8*(int(hdrExtLen)+1))
	b[0], b[1] = byte(next), hdrExtLen
	// PadN over the rest, so the header is valid for real stacks too.
	b[2], b[3] = 1, byte(len(b)-4)
	return b
}

// frag6 is an IPv6 Fragment header (RFC 8200 4.5); offset in 8-byte units.
func frag6(next layers.IPProtocol, offset uint16, more bool, id uint32) gopacket.Payload {
	b := make([]byte, 8)
	b[0] = byte(next)
	fo := offset << 3
	if more {
		fo |= 1
	}
	binary.BigEndian.PutUint16(b[2:], fo)
	binary.BigEndian.PutUint32(b[4:], id)
	return b
}

// ah is an Authentication Header (RFC 4302) with a 12-byte ICV: 24 bytes.
func ah(next layers.IPProtocol) gopacket.Payload {
	b := make([]byte, 24)
	b[0], b[1] = byte(next), 24/4-2
	binary.BigEndian.PutUint32(b[4:], 0x1000) // SPI
	return b
}

func payload(n int) gopacket.Payload {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + 3)
	}
	return b
}

// mutate returns a copy of b with f applied.
func mutate(b []byte, f func(b []byte)) []byte {
	c := append([]byte(nil), b...)
	f(c)
	return c
}

// refChecksum is a deliberately naive RFC 1071 checksum, independent of the
// package's Sum, for checking headers Encapsulate writes.
func refChecksum(bs ...[]byte) uint16 {
	var all []byte
	for _, b := range bs {
		all = append(all, b...)
	}
	if len(all)%2 == 1 {
		all = append(all, 0)
	}
	var s uint32
	for i := 0; i < len(all); i += 2 {
		s += uint32(all[i])<<8 | uint32(all[i+1])
	}
	for s > 0xffff {
		s = s>>16 + s&0xffff
	}
	return ^uint16(s)
}

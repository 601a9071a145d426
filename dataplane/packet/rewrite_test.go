package packet

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"testing"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
)

const headroom = 256 // as XDP_PACKET_HEADROOM

var (
	macLBOut   = [6]byte{0x02, 0, 0, 0, 0, 0x0a}
	macBackend = [6]byte{0x02, 0, 0, 0, 0, 0x0b}
	lb4        = netip.MustParseAddr("10.0.0.1")
	backend4   = netip.MustParseAddr("10.0.1.5")
	lb6        = netip.MustParseAddr("fd00::1")
	backend6   = netip.MustParseAddr("fd00:1::5")
	guePort    = uint16(5555) // no gopacket decoder on it
)

func encap(outerV6, gue bool) Encap {
	e := Encap{SrcMAC: macLBOut, DstMAC: macBackend, OuterV6: outerV6, GUE: gue, GUEPort: guePort, FlowHash: 0xdeadbeef}
	if outerV6 {
		e.OuterSrc, e.OuterDst = a16(lb6), a16(backend6)
	} else {
		e.OuterSrc, e.OuterDst = a16(lb4), a16(backend4)
	}
	return e
}

// encapRow is one golden case: an input frame, the encapsulation, and what
// the outer headers must say. Lengths, checksums and the inner bytes are
// derived from the input and checked for every row.
type encapRow struct {
	name  string
	frame []byte
	encap Encap
	proto Proto    // outer IP protocol / next header
	inner Proto    // 4 or 41: the inner family as IPIP protocol / GUE proto
	tos   uint8    // outer TOS / traffic class
	df    bool     // outer IPv4 DF
	vlans []uint16 // VLAN IDs on the outer frame
}

func encapRows(tb testing.TB) []encapRow {
	tb.Helper()
	s := func(ls ...gopacket.SerializableLayer) []byte { return serialize(tb, ls...) }

	ip := ip4L(layers.IPProtocolTCP)
	ip.TOS = 0xb9 // EF, ECT(1)
	v4 := s(ethL(layers.EthernetTypeIPv4), ip, tcpL(ip, 40000, 80), payload(200))
	ip = ip4L(layers.IPProtocolTCP)
	ip.Flags = 0
	v4NoDF := s(ethL(layers.EthernetTypeIPv4), ip, tcpL(ip, 40000, 80), payload(200))
	ip6 := ip6L(layers.IPProtocolTCP)
	ip6.TrafficClass, ip6.FlowLabel = 0x2e, 0x12345
	v6 := s(ethL(layers.EthernetTypeIPv6), ip6, tcpL(ip6, 40000, 443), payload(300))
	ip6 = ip6L(layers.IPProtocolUDP)
	v6Odd := s(ethL(layers.EthernetTypeDot1Q), dot1q(7, layers.EthernetTypeIPv6), ip6, udpL(ip6, 4000, 7000), payload(101))
	ip = ip4L(layers.IPProtocolTCP)
	v4VLAN := s(ethL(layers.EthernetTypeDot1Q), dot1q(100, layers.EthernetTypeIPv4), ip, tcpL(ip, 40000, 80), payload(64))
	ip = ip4L(layers.IPProtocolUDP)
	v4QinQ := s(ethL(layers.EthernetTypeQinQ), dot1q(10, layers.EthernetTypeDot1Q), dot1q(20, layers.EthernetTypeIPv4),
		ip, udpL(ip, 5000, 7000), payload(30))
	ip = ip4L(layers.IPProtocolUDP)
	v4Padded := s(ethL(layers.EthernetTypeIPv4), ip, udpL(ip, 5000, 7000), payload(1))
	v4Padded = append(v4Padded, 0xee, 0xee, 0xee, 0xee) // beyond gopacket's own padding

	return []encapRow{
		{"ipip: ipv4 in ipv4", v4, encap(false, false), ProtoIPIP, ProtoIPIP, 0xb9, true, nil},
		{"ipip: ipv4 without DF in ipv4", v4NoDF, encap(false, false), ProtoIPIP, ProtoIPIP, 0, false, nil},
		{"ipip: ipv6 in ipv6", v6, encap(true, false), ProtoIPv6, ProtoIPv6, 0x2e, false, nil},
		{"ipip: ipv6 in ipv4", v6, encap(false, false), ProtoIPv6, ProtoIPv6, 0x2e, true, nil},
		{"ipip: ipv4 in ipv6", v4, encap(true, false), ProtoIPIP, ProtoIPIP, 0xb9, false, nil},
		{"ipip: 802.1Q ipv4 in ipv4", v4VLAN, encap(false, false), ProtoIPIP, ProtoIPIP, 0, true, []uint16{100}},
		{"ipip: qinq ipv4 in ipv4 (new headers overlap the old)", v4QinQ, encap(false, false), ProtoIPIP, ProtoIPIP, 0, true, []uint16{10, 20}},
		{"ipip: ethernet padding dropped", v4Padded, encap(false, false), ProtoIPIP, ProtoIPIP, 0, true, nil},
		{"gue: ipv4 in ipv4", v4, encap(false, true), ProtoUDP, ProtoIPIP, 0xb9, true, nil},
		{"gue: ipv6 in ipv6", v6, encap(true, true), ProtoUDP, ProtoIPv6, 0x2e, false, nil},
		{"gue: ipv4 in ipv6", v4NoDF, encap(true, true), ProtoUDP, ProtoIPIP, 0, false, nil},
		{"gue: ipv6 in ipv4", v6, encap(false, true), ProtoUDP, ProtoIPv6, 0x2e, true, nil},
		{"gue: 802.1Q ipv6 odd length in ipv6", v6Odd, encap(true, true), ProtoUDP, ProtoIPv6, 0, false, []uint16{7}},
		{"gue: qinq ipv4 in ipv6", v4QinQ, encap(true, true), ProtoUDP, ProtoIPIP, 0, false, []uint16{10, 20}},
	}
}

// place puts frame at buf[headroom:], the headroom filled with a marker.
func place(frame []byte) []byte {
	buf := make([]byte, headroom+len(frame))
	for i := range headroom {
		buf[i] = 0xa5
	}
	copy(buf[headroom:], frame)
	return buf
}

func TestEncapsulateGolden(t *testing.T) {
	for _, r := range encapRows(t) {
		t.Run(r.name, func(t *testing.T) {
			buf := place(r.frame)
			var p Parsed
			if err := Parse(buf[headroom:], &p); err != nil {
				t.Fatal(err)
			}
			innerWant := append([]byte(nil), r.frame[p.L3Off:p.L3Off+p.IPLen]...)
			tailWant := append([]byte(nil), buf[headroom+p.L3Off+p.IPLen:]...)
			e := r.encap
			newOff, newLen, err := Encapsulate(buf, headroom, &p, &e, 9000)
			if err != nil {
				t.Fatal(err)
			}
			hdr := e.Overhead()
			if newOff != headroom-hdr || newLen != p.L3Off+hdr+p.IPLen {
				t.Fatalf("newOff, newLen = %d, %d; want %d, %d", newOff, newLen, headroom-hdr, p.L3Off+hdr+p.IPLen)
			}
			out := buf[newOff : newOff+newLen]

			// Nothing outside the new headers moved.
			if !bytes.Equal(buf[:newOff], bytes.Repeat([]byte{0xa5}, newOff)) {
				t.Error("headroom before the new frame was written")
			}
			if !bytes.Equal(buf[headroom+p.L3Off+p.IPLen:], tailWant) {
				t.Error("bytes after the inner packet changed")
			}
			if !bytes.Equal(out[len(out)-p.IPLen:], innerWant) {
				t.Fatal("inner packet changed")
			}
			checkOuter(t, r, out, p.L3Off, innerWant)
		})
	}
}

// checkOuter decodes out with gopacket and checks every outer field.
func checkOuter(t *testing.T, r encapRow, out []byte, l3 int, inner []byte) {
	t.Helper()
	e := r.encap
	pkt := gopacket.NewPacket(out, layers.LayerTypeEthernet, gopacket.Default)
	eth, _ := pkt.Layer(layers.LayerTypeEthernet).(*layers.Ethernet)
	if eth == nil {
		t.Fatal("no Ethernet layer")
	}
	if !bytes.Equal(eth.SrcMAC, e.SrcMAC[:]) || !bytes.Equal(eth.DstMAC, e.DstMAC[:]) {
		t.Errorf("MACs %v→%v, want %v→%v", eth.SrcMAC, eth.DstMAC, net.HardwareAddr(e.SrcMAC[:]), net.HardwareAddr(e.DstMAC[:]))
	}
	var vlans []uint16
	for _, l := range pkt.Layers() {
		if q, ok := l.(*layers.Dot1Q); ok {
			vlans = append(vlans, q.VLANIdentifier)
		}
	}
	if len(vlans) != len(r.vlans) || (len(vlans) > 0 && !equalU16(vlans, r.vlans)) {
		t.Errorf("VLANs %v, want %v", vlans, r.vlans)
	}
	if got := 14 + 4*len(vlans); got != l3 {
		t.Fatalf("outer L3 offset %d, want %d", got, l3)
	}

	ipLen := IPv4MinLen
	var src, dst []byte
	if !e.OuterV6 {
		ip, _ := pkt.Layer(layers.LayerTypeIPv4).(*layers.IPv4)
		if ip == nil {
			t.Fatal("no outer IPv4 layer")
		}
		if ip.Version != 4 || ip.IHL != 5 || ip.TOS != r.tos || int(ip.Length) != len(out)-l3 ||
			ip.Id != 0 || ip.FragOffset != 0 || ip.TTL != 64 || Proto(ip.Protocol) != r.proto {
			t.Errorf("outer IPv4 %+v", *ip)
		}
		if df := ip.Flags&layers.IPv4DontFragment != 0; df != r.df || ip.Flags&^layers.IPv4DontFragment != 0 {
			t.Errorf("outer flags %v, want DF=%v", ip.Flags, r.df)
		}
		if !ip.SrcIP.Equal(lb4.AsSlice()) || !ip.DstIP.Equal(backend4.AsSlice()) {
			t.Errorf("outer %v→%v", ip.SrcIP, ip.DstIP)
		}
		if c := refChecksum(out[l3 : l3+20]); c != 0 {
			t.Errorf("outer IPv4 header checksum %#04x does not verify", ip.Checksum)
		}
		src, dst = out[l3+12:l3+16], out[l3+16:l3+20]
	} else {
		ipLen = IPv6FixedLen
		ip, _ := pkt.Layer(layers.LayerTypeIPv6).(*layers.IPv6)
		if ip == nil {
			t.Fatal("no outer IPv6 layer")
		}
		if ip.Version != 6 || ip.TrafficClass != r.tos || ip.FlowLabel != e.FlowHash&0xfffff ||
			int(ip.Length) != len(out)-l3-40 || Proto(ip.NextHeader) != r.proto || ip.HopLimit != 64 {
			t.Errorf("outer IPv6 %+v", *ip)
		}
		if !ip.SrcIP.Equal(lb6.AsSlice()) || !ip.DstIP.Equal(backend6.AsSlice()) {
			t.Errorf("outer %v→%v", ip.SrcIP, ip.DstIP)
		}
		src, dst = out[l3+8:l3+24], out[l3+24:l3+40]
	}

	if e.GUE {
		udp, _ := pkt.Layer(layers.LayerTypeUDP).(*layers.UDP)
		if udp == nil {
			t.Fatal("no outer UDP layer")
		}
		if udp.SrcPort < 49152 || uint16(udp.DstPort) != guePort || int(udp.Length) != len(out)-l3-ipLen {
			t.Errorf("outer UDP %+v", *udp)
		}
		seg := out[l3+ipLen:]
		if !e.OuterV6 {
			if udp.Checksum != 0 {
				t.Errorf("UDP checksum over IPv4 = %#04x, want 0", udp.Checksum)
			}
		} else {
			// Verify with a pseudo-header built here, not by the package.
			ph := append(append([]byte(nil), src...), dst...)
			ph = binary.BigEndian.AppendUint32(ph, uint32(len(seg)))
			ph = append(ph, 0, 0, 0, byte(ProtoUDP))
			if udp.Checksum == 0 || refChecksum(ph, seg) != 0 {
				t.Errorf("UDP checksum over IPv6 %#04x does not verify", udp.Checksum)
			}
		}
		if g := seg[8:12]; !bytes.Equal(g, []byte{0, byte(r.inner), 0, 0}) {
			t.Errorf("GUE header % x, want 00 %02x 00 00", g, r.inner)
		}
	} else if pkt.ErrorLayer() != nil {
		// gopacket decodes IPIP and IPv6-in-IP all the way down.
		t.Errorf("gopacket: %v", pkt.ErrorLayer().Error())
	}

	// Our own parser reads the outer packet too.
	var q Parsed
	if err := Parse(out, &q); err != nil {
		t.Fatalf("Parse(outer): %v", err)
	}
	if q.Proto != r.proto || q.Dst != e.OuterDst || q.Src != e.OuterSrc || q.IPLen != len(out)-l3 || q.TTL != 64 {
		t.Errorf("Parse(outer) = %+v", q)
	}
	if !bytes.Equal(out[l3+e.Overhead():], inner) {
		t.Error("inner packet not where the outer headers end")
	}
}

func equalU16(a, b []uint16) bool {
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestEncapsulateErrors(t *testing.T) {
	ip := ip4L(layers.IPProtocolTCP)
	frame := serialize(t, ethL(layers.EthernetTypeIPv4), ip, tcpL(ip, 1, 2), payload(100))
	var p Parsed
	if err := Parse(frame, &p); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ v6, gue bool }{{false, false}, {true, false}, {false, true}, {true, true}} {
		e := encap(c.v6, c.gue)
		hdr := e.Overhead()
		want := p.L3Off + hdr + p.IPLen

		// One byte short of headroom, then exactly enough.
		buf := make([]byte, hdr-1+len(frame))
		copy(buf[hdr-1:], frame)
		before := append([]byte(nil), buf...)
		if _, _, err := Encapsulate(buf, hdr-1, &p, &e, 9000); !errors.Is(err, ErrNoHeadroom) {
			t.Errorf("%+v: headroom %d: err = %v, want ErrNoHeadroom", c, hdr-1, err)
		}
		if !bytes.Equal(buf, before) {
			t.Errorf("%+v: buffer written on error", c)
		}
		buf = make([]byte, hdr+len(frame))
		copy(buf[hdr:], frame)
		if off, n, err := Encapsulate(buf, hdr, &p, &e, 9000); err != nil || off != 0 || n != want {
			t.Errorf("%+v: headroom %d: %d, %d, %v", c, hdr, off, n, err)
		}

		// maxLen one short, then exact.
		buf = place(frame)
		if _, _, err := Encapsulate(buf, headroom, &p, &e, want-1); !errors.Is(err, ErrTooBig) {
			t.Errorf("%+v: maxLen %d: err = %v, want ErrTooBig", c, want-1, err)
		}
		if _, n, err := Encapsulate(buf, headroom, &p, &e, want); err != nil || n != want {
			t.Errorf("%+v: maxLen %d: %d, %v", c, want, n, err)
		}
	}

	// An inner packet of 65535 bytes fits no outer IPv4 header, nor IPv6 with GUE.
	ip = ip4L(layers.IPProtocolUDP)
	huge := serialize(t, ethL(layers.EthernetTypeIPv4), ip, udpL(ip, 1, 2), payload(0xffff-28))
	if err := Parse(huge, &p); err != nil || p.IPLen != 0xffff {
		t.Fatalf("huge: %v, IPLen %d", err, p.IPLen)
	}
	for _, c := range []struct {
		v6, gue bool
		err     error
	}{{false, false, ErrTooBig}, {false, true, ErrTooBig}, {true, false, nil}, {true, true, ErrTooBig}} {
		e := encap(c.v6, c.gue)
		if _, _, err := Encapsulate(place(huge), headroom, &p, &e, 1<<20); !errors.Is(err, c.err) {
			t.Errorf("huge %+v: err = %v, want %v", c, err, c.err)
		}
	}

	// A Parsed that is not IP, or that does not fit the buffer.
	arp := serialize(t, ethL(layers.EthernetTypeARP), payload(28))
	_ = Parse(arp, &p)
	e := encap(false, false)
	if _, _, err := Encapsulate(place(arp), headroom, &p, &e, 9000); !errors.Is(err, ErrNotIP) {
		t.Errorf("arp: err = %v, want ErrNotIP", err)
	}
	if err := Parse(frame, &p); err != nil {
		t.Fatal(err)
	}
	if _, _, err := Encapsulate(place(frame)[:headroom+p.L3Off+p.IPLen-1], headroom, &p, &e, 9000); !errors.Is(err, ErrTruncated) {
		t.Errorf("short buffer: err = %v, want ErrTruncated", err)
	}
	for _, off := range []int{-1, 1 << 30} {
		if _, _, err := Encapsulate(place(frame), off, &p, &e, 9000); !errors.Is(err, ErrTruncated) {
			t.Errorf("off %d: err = %v, want ErrTruncated", off, err)
		}
	}
}

func TestRewriteL2(t *testing.T) {
	ip := ip4L(layers.IPProtocolTCP)
	frame := serialize(t, ethL(layers.EthernetTypeDot1Q), dot1q(42, layers.EthernetTypeIPv4), ip, tcpL(ip, 1, 2), payload(10))
	out := append([]byte(nil), frame...)
	RewriteL2(out, macBackend, macLBOut)
	if !bytes.Equal(out[12:], frame[12:]) {
		t.Error("bytes after the MACs changed")
	}
	pkt := gopacket.NewPacket(out, layers.LayerTypeEthernet, gopacket.Default)
	eth := pkt.Layer(layers.LayerTypeEthernet).(*layers.Ethernet)
	if !bytes.Equal(eth.DstMAC, macBackend[:]) || !bytes.Equal(eth.SrcMAC, macLBOut[:]) {
		t.Errorf("MACs %v→%v", eth.SrcMAC, eth.DstMAC)
	}
	if q, _ := pkt.Layer(layers.LayerTypeDot1Q).(*layers.Dot1Q); q == nil || q.VLANIdentifier != 42 {
		t.Error("VLAN tag lost")
	}
	RewriteL2(out[:11], macBackend, macLBOut) // too short: left alone, no panic
}

func TestRewriteAllocs(t *testing.T) {
	frame := encapRows(t)[0].frame
	buf := place(frame)
	var p Parsed
	if err := Parse(buf[headroom:], &p); err != nil {
		t.Fatal(err)
	}
	l2 := append([]byte(nil), frame[:p.L3Off]...)
	for _, e := range []Encap{encap(false, false), encap(true, true)} {
		if n := testing.AllocsPerRun(100, func() {
			copy(buf[headroom:], l2)
			if _, _, err := Encapsulate(buf, headroom, &p, &e, 9000); err != nil {
				t.Fatal(err)
			}
		}); n != 0 {
			t.Errorf("%v allocs per Encapsulate", n)
		}
	}
	if n := testing.AllocsPerRun(100, func() { RewriteL2(frame, macBackend, macLBOut) }); n != 0 {
		t.Errorf("%v allocs per RewriteL2", n)
	}
}

func BenchmarkEncapsulate(b *testing.B) {
	ip := ip4L(layers.IPProtocolTCP)
	v4 := serialize(b, ethL(layers.EthernetTypeIPv4), ip, tcpL(ip, 40000, 80), payload(1400))
	ip6 := ip6L(layers.IPProtocolTCP)
	v6 := serialize(b, ethL(layers.EthernetTypeIPv6), ip6, tcpL(ip6, 40000, 443), payload(1400))
	for _, c := range []struct {
		name  string
		frame []byte
		e     Encap
	}{
		{"IPIPv4", v4, encap(false, false)},
		{"IPIPv6", v6, encap(true, false)},
		{"GUEv4", v4, encap(false, true)},
		{"GUEv6", v6, encap(true, true)}, // includes the UDP checksum over ~1.4 KB
	} {
		b.Run(c.name, func(b *testing.B) {
			buf := place(c.frame)
			var p Parsed
			if err := Parse(buf[headroom:], &p); err != nil {
				b.Fatal(err)
			}
			l2 := append([]byte(nil), c.frame[:p.L3Off]...)
			b.ReportAllocs()
			for b.Loop() {
				copy(buf[headroom:], l2) // the last run wrote over the old Ethernet header
				if _, _, err := Encapsulate(buf, headroom, &p, &c.e, 9000); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkRewriteL2(b *testing.B) {
	frame := payload(64)
	b.ReportAllocs()
	for b.Loop() {
		RewriteL2(frame, macBackend, macLBOut)
	}
}

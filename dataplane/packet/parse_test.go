package packet

import (
	"encoding/binary"
	"errors"
	"net/netip"
	"testing"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
)

var (
	router4 = netip.MustParseAddr("192.0.2.1")
	router6 = netip.MustParseAddr("2001:db8:2::1")
)

// want4 and want6 are the Parsed of a plain client→VIP packet as the helpers
// build it; rows adjust them.
func want4(proto Proto, ipLen int) Parsed {
	return Parsed{
		L3Off: 14, EtherType: EtherTypeIPv4, IPVersion: 4, DstValid: true,
		Src: a16(cli4), Dst: a16(vip4), Proto: proto, IPLen: ipLen,
		IHL: 20, L4Off: 34, DF: true, TTL: 64,
	}
}

func want6(proto Proto, ipLen, ihl int) Parsed {
	return Parsed{
		L3Off: 14, EtherType: EtherTypeIPv6, IPVersion: 6, DstValid: true,
		Src: a16(cli6), Dst: a16(vip6), Proto: proto, IPLen: ipLen,
		IHL: ihl, L4Off: 14 + ihl, TTL: 63,
	}
}

func with(p Parsed, f func(p *Parsed)) Parsed {
	f(&p)
	return p
}

func ports(p Parsed, sport, dport uint16, flags uint8) Parsed {
	p.HasPorts, p.SrcPort, p.DstPort, p.TCPFlags = true, sport, dport, flags
	return p
}

func vlan(p Parsed, id uint16, l3 int) Parsed {
	p.HasVLAN, p.VLAN = true, id
	p.L4Off += l3 - p.L3Off
	p.L3Off = l3
	return p
}

type parseRow struct {
	name  string
	frame []byte
	err   error
	want  Parsed
}

func parseRows(tb testing.TB) []parseRow {
	tb.Helper()
	s := func(ls ...gopacket.SerializableLayer) []byte { return serialize(tb, ls...) }

	// TCP variants over IPv4.
	ip := ip4L(layers.IPProtocolTCP)
	syn := tcpL(ip, 40000, 80)
	syn.SYN = true
	ipv4SYN := s(ethL(layers.EthernetTypeIPv4), ip, syn)

	ip = ip4L(layers.IPProtocolTCP)
	finack := tcpL(ip, 40001, 80)
	finack.FIN, finack.ACK = true, true
	vlanFinAck := s(ethL(layers.EthernetTypeDot1Q), dot1q(100, layers.EthernetTypeIPv4), ip, finack, payload(100))

	ip = ip4L(layers.IPProtocolTCP)
	rstpsh := tcpL(ip, 40002, 80)
	rstpsh.RST, rstpsh.PSH = true, true
	rstpsh.Options = []layers.TCPOption{{OptionType: layers.TCPOptionKindMSS, OptionLength: 4, OptionData: []byte{0x05, 0xb4}}}
	tcpOpts := s(ethL(layers.EthernetTypeIPv4), ip, rstpsh)

	ip = ip4L(layers.IPProtocolUDP)
	qinq := s(ethL(layers.EthernetTypeQinQ), dot1q(10, layers.EthernetTypeDot1Q), dot1q(20, layers.EthernetTypeIPv4),
		ip, udpL(ip, 5353, 53), payload(10))

	ip = ip4L(layers.IPProtocolUDP)
	ip.Options = []layers.IPv4Option{{OptionType: 148, OptionLength: 4, OptionData: []byte{0, 0}}} // router alert
	ipOpts := s(ethL(layers.EthernetTypeIPv4), ip, udpL(ip, 1000, 2000), payload(4))

	// IPv4 fragments.
	ip = ip4L(layers.IPProtocolUDP)
	ip.Flags = layers.IPv4MoreFragments
	frag1 := s(ethL(layers.EthernetTypeIPv4), ip, udpL(ip, 1234, 53), payload(32))
	ip = ip4L(layers.IPProtocolUDP)
	ip.Flags, ip.FragOffset = layers.IPv4MoreFragments, 5
	fragMid := s(ethL(layers.EthernetTypeIPv4), ip, payload(40))
	ip = ip4L(layers.IPProtocolUDP)
	ip.Flags, ip.FragOffset = 0, 10
	fragLast := s(ethL(layers.EthernetTypeIPv4), ip, payload(12))
	ip = ip4L(layers.IPProtocolTCP)
	ip.FragOffset = 3
	fragTiny := s(ethL(layers.EthernetTypeIPv4), ip, payload(2))

	// Ethernet padding after a short UDP packet.
	ip = ip4L(layers.IPProtocolUDP)
	padded := s(ethL(layers.EthernetTypeIPv4), ip, udpL(ip, 1000, 2000), payload(2))
	padded = append(padded, make([]byte, 60-len(padded))...)

	// ICMP.
	ip = ip4L(layers.IPProtocolICMPv4)
	echo4 := s(ethL(layers.EthernetTypeIPv4), ip,
		&layers.ICMPv4{TypeCode: layers.CreateICMPv4TypeCode(8, 0), Id: 1, Seq: 1}, payload(8))

	// The quoted packets went from the VIP (via a backend, DSR) to the client.
	qip := ip4L(layers.IPProtocolTCP)
	qip.SrcIP, qip.DstIP = vip4.AsSlice(), cli4.AsSlice()
	quotedTCP4 := s(qip, tcpL(qip, 80, 40000), payload(1000))
	fromRouter4 := func(proto layers.IPProtocol) *layers.IPv4 {
		ip := ip4L(proto)
		ip.SrcIP = router4.AsSlice()
		ip.Flags = 0
		return ip
	}
	fragNeeded := s(ethL(layers.EthernetTypeIPv4), fromRouter4(layers.IPProtocolICMPv4),
		&layers.ICMPv4{TypeCode: layers.CreateICMPv4TypeCode(3, 4), Seq: 1400}, gopacket.Payload(quotedTCP4[:28]))
	noPorts := s(ethL(layers.EthernetTypeIPv4), fromRouter4(layers.IPProtocolICMPv4),
		&layers.ICMPv4{TypeCode: layers.CreateICMPv4TypeCode(3, 1)}, gopacket.Payload(quotedTCP4[:22]))
	qip = ip4L(layers.IPProtocolUDP)
	qip.SrcIP, qip.DstIP = vip4.AsSlice(), cli4.AsSlice()
	quotedUDP4 := s(qip, udpL(qip, 53, 5353), payload(10))
	timeExceeded := s(ethL(layers.EthernetTypeIPv4), fromRouter4(layers.IPProtocolICMPv4),
		&layers.ICMPv4{TypeCode: layers.CreateICMPv4TypeCode(11, 0)}, gopacket.Payload(quotedUDP4))

	// Other protocols over IPv4.
	esp4 := s(ethL(layers.EthernetTypeIPv4), ip4L(layers.IPProtocolESP), payload(24))
	gre4 := s(ethL(layers.EthernetTypeIPv4), ip4L(layers.IPProtocolGRE),
		&layers.GRE{Protocol: layers.EthernetTypeIPv4}, payload(20))
	ip = ip4L(layers.IPProtocolAH)
	ahSyn := tcpL(ip, 40003, 80)
	ahSyn.SYN = true
	ah4 := s(ethL(layers.EthernetTypeIPv4), ip, ah(layers.IPProtocolTCP), ahSyn)
	sctp4 := s(ethL(layers.EthernetTypeIPv4), ip4L(layers.IPProtocolSCTP), payload(12))

	// IPv6.
	ip6 := ip6L(layers.IPProtocolTCP)
	synack := tcpL(ip6, 40000, 443)
	synack.SYN, synack.ACK = true, true
	ipv6SynAck := s(ethL(layers.EthernetTypeIPv6), ip6, synack)

	hbh := func(next layers.IPProtocol) *layers.IPv6HopByHop {
		h := &layers.IPv6HopByHop{Options: []*layers.IPv6HopByHopOption{{OptionType: 1, OptionData: make([]byte, 4)}}}
		h.NextHeader = next
		return h
	}
	dstOpts := func(next layers.IPProtocol) *layers.IPv6Destination {
		d := &layers.IPv6Destination{Options: []*layers.IPv6DestinationOption{{OptionType: 1, OptionData: make([]byte, 4)}}}
		d.NextHeader = next
		return d
	}
	ip6 = ip6L(layers.IPProtocolIPv6HopByHop)
	fsyn := tcpL(ip6, 40010, 443)
	fsyn.SYN = true
	v6First := s(ethL(layers.EthernetTypeIPv6), ip6, hbh(layers.IPProtocolIPv6Destination),
		dstOpts(layers.IPProtocolIPv6Fragment), frag6(layers.IPProtocolTCP, 0, true, 7), fsyn, payload(8))
	v6Later := s(ethL(layers.EthernetTypeIPv6), ip6L(layers.IPProtocolIPv6HopByHop), hbh(layers.IPProtocolIPv6Fragment),
		frag6(layers.IPProtocolUDP, 100, true, 8), payload(16))
	v6Last := s(ethL(layers.EthernetTypeIPv6), ip6L(layers.IPProtocolIPv6Fragment),
		frag6(layers.IPProtocolUDP, 200, false, 8), payload(9))
	ip6 = ip6L(layers.IPProtocolIPv6Fragment)
	v6Atomic := s(ethL(layers.EthernetTypeIPv6), ip6, frag6(layers.IPProtocolUDP, 0, false, 9), udpL(ip6, 1111, 53), payload(4))
	ip6 = ip6L(layers.IPProtocolIPv6Routing)
	v6Routing := s(ethL(layers.EthernetTypeIPv6), ip6, ext6(layers.IPProtocolUDP, 1), udpL(ip6, 2222, 53), payload(4))
	ip6 = ip6L(layers.IPProtocolAH)
	v6AH := s(ethL(layers.EthernetTypeIPv6), ip6, ah(layers.IPProtocolTCP), tcpL(ip6, 40011, 443))
	ip6 = ip6L(layers.IPProtocolUDP)
	v6UDPVLAN := s(ethL(layers.EthernetTypeDot1Q), dot1q(4094, layers.EthernetTypeIPv6), ip6, udpL(ip6, 3333, 53), payload(20))
	ip6 = ip6L(layers.IPProtocolICMPv6)
	icmp6 := &layers.ICMPv6{TypeCode: layers.CreateICMPv6TypeCode(128, 0)}
	_ = icmp6.SetNetworkLayerForChecksum(ip6)
	echo6 := s(ethL(layers.EthernetTypeIPv6), ip6, icmp6, &layers.ICMPv6Echo{Identifier: 1, SeqNumber: 2}, payload(4))

	qip6 := ip6L(layers.IPProtocolTCP)
	qip6.SrcIP, qip6.DstIP = vip6.AsSlice(), cli6.AsSlice()
	quotedTCP6 := s(qip6, tcpL(qip6, 443, 40000), payload(1400))
	fromRouter6 := func() *layers.IPv6 {
		ip := ip6L(layers.IPProtocolICMPv6)
		ip.SrcIP = router6.AsSlice()
		return ip
	}
	ip6 = fromRouter6()
	ptb := &layers.ICMPv6{TypeCode: layers.CreateICMPv6TypeCode(2, 0)}
	_ = ptb.SetNetworkLayerForChecksum(ip6)
	mtu := binary.BigEndian.AppendUint32(nil, 1280)
	packetTooBig := s(ethL(layers.EthernetTypeIPv6), ip6, ptb, gopacket.Payload(append(mtu, quotedTCP6[:48]...)))

	qip6 = ip6L(layers.IPProtocolIPv6Destination)
	qip6.SrcIP, qip6.DstIP = vip6.AsSlice(), cli6.AsSlice()
	quotedUDP6 := s(qip6, dstOpts(layers.IPProtocolUDP), udpL(qip6, 53, 5353), payload(3))
	ip6 = fromRouter6()
	unreach6 := &layers.ICMPv6{TypeCode: layers.CreateICMPv6TypeCode(1, 4)}
	_ = unreach6.SetNetworkLayerForChecksum(ip6)
	unreachable6 := s(ethL(layers.EthernetTypeIPv6), ip6, unreach6, gopacket.Payload(append(make([]byte, 4), quotedUDP6...)))

	esp6 := s(ethL(layers.EthernetTypeIPv6), ip6L(layers.IPProtocolESP), payload(24))
	noNext := s(ethL(layers.EthernetTypeIPv6), ip6L(layers.IPProtocolNoNextHeader))

	arp := &layers.ARP{
		AddrType: layers.LinkTypeEthernet, Protocol: layers.EthernetTypeIPv4, HwAddressSize: 6, ProtAddressSize: 4,
		Operation: layers.ARPRequest, SourceHwAddress: macClient, SourceProtAddress: cli4.AsSlice(),
		DstHwAddress: make([]byte, 6), DstProtAddress: vip4.AsSlice(),
	}
	arpFrame := s(ethL(layers.EthernetTypeARP), arp)
	arpVLAN := s(ethL(layers.EthernetTypeDot1Q), dot1q(5, layers.EthernetTypeARP), arp)

	fromRouterWant4 := func(ipLen int, typ, code uint8) Parsed {
		return with(want4(ProtoICMP, ipLen), func(p *Parsed) {
			p.Src, p.DF, p.ICMPType, p.ICMPCode = a16(router4), false, typ, code
		})
	}
	fromRouterWant6 := func(ipLen int, typ, code uint8) Parsed {
		return with(want6(ProtoICMPv6, ipLen, 40), func(p *Parsed) {
			p.Src, p.ICMPType, p.ICMPCode = a16(router6), typ, code
		})
	}

	return []parseRow{
		{"ipv4 tcp syn", ipv4SYN, nil, ports(want4(ProtoTCP, 40), 40000, 80, TCPSyn)},
		{"ipv4 802.1Q tcp fin+ack with payload", vlanFinAck, nil,
			vlan(ports(want4(ProtoTCP, 140), 40001, 80, TCPFin|TCPAck), 100, 18)},
		{"ipv4 tcp rst+psh with options", tcpOpts, nil, ports(want4(ProtoTCP, 44), 40002, 80, TCPRst|TCPPsh)},
		{"ipv4 qinq udp", qinq, nil, vlan(ports(want4(ProtoUDP, 38), 5353, 53, 0), 10, 22)},
		{"ipv4 with options", ipOpts, nil, with(ports(want4(ProtoUDP, 36), 1000, 2000, 0), func(p *Parsed) {
			p.IHL, p.L4Off = 24, 38
		})},
		{"ipv4 first fragment", frag1, nil, with(ports(want4(ProtoUDP, 60), 1234, 53, 0), func(p *Parsed) {
			p.Frag, p.DF = FragFirst, false
		})},
		{"ipv4 middle fragment", fragMid, nil, with(want4(ProtoUDP, 60), func(p *Parsed) {
			p.Frag, p.DF = FragLater, false
		})},
		{"ipv4 last fragment", fragLast, nil, with(want4(ProtoUDP, 32), func(p *Parsed) {
			p.Frag, p.DF = FragLater, false
		})},
		{"ipv4 later fragment shorter than a tcp header", fragTiny, nil, with(want4(ProtoTCP, 22), func(p *Parsed) {
			p.Frag = FragLater
		})},
		{"ipv4 udp with ethernet padding", padded, nil, ports(want4(ProtoUDP, 30), 1000, 2000, 0)},
		{"ipv4 icmp echo", echo4, nil, with(want4(ProtoICMP, 36), func(p *Parsed) { p.ICMPType = 8 })},
		{"ipv4 icmp frag needed quoting tcp", fragNeeded, nil, with(fromRouterWant4(56, 3, 4), func(p *Parsed) {
			p.HasInner = true
			p.Inner = Inner{IPVersion: 4, Src: a16(vip4), Dst: a16(cli4), Proto: ProtoTCP, HasPorts: true, SrcPort: 80, DstPort: 40000}
		})},
		{"ipv4 icmp unreachable, quote without ports", noPorts, nil, fromRouterWant4(50, 3, 1)},
		{"ipv4 icmp time exceeded quoting udp", timeExceeded, nil, with(fromRouterWant4(20+8+38, 11, 0), func(p *Parsed) {
			p.HasInner = true
			p.Inner = Inner{IPVersion: 4, Src: a16(vip4), Dst: a16(cli4), Proto: ProtoUDP, HasPorts: true, SrcPort: 53, DstPort: 5353}
		})},
		{"ipv4 esp", esp4, nil, want4(ProtoESP, 44)},
		{"ipv4 gre", gre4, nil, want4(ProtoGRE, 44)},
		{"ipv4 ah tcp", ah4, nil, with(ports(want4(ProtoTCP, 64), 40003, 80, TCPSyn), func(p *Parsed) {
			p.IHL, p.L4Off = 44, 58
		})},
		{"ipv4 sctp", sctp4, nil, want4(132, 32)},

		{"ipv6 tcp syn+ack", ipv6SynAck, nil, ports(want6(ProtoTCP, 60, 40), 40000, 443, TCPSyn|TCPAck)},
		{"ipv6 hop-by-hop, dest options, first fragment, tcp", v6First, nil,
			with(ports(want6(ProtoTCP, 40+24+20+8, 64), 40010, 443, TCPSyn), func(p *Parsed) { p.Frag = FragFirst })},
		{"ipv6 hop-by-hop, later fragment", v6Later, nil,
			with(want6(ProtoUDP, 40+16+16, 56), func(p *Parsed) { p.Frag = FragLater })},
		{"ipv6 last fragment", v6Last, nil, with(want6(ProtoUDP, 40+8+9, 48), func(p *Parsed) { p.Frag = FragLater })},
		{"ipv6 atomic fragment", v6Atomic, nil,
			with(ports(want6(ProtoUDP, 40+8+12, 48), 1111, 53, 0), func(p *Parsed) { p.Frag = FragFirst })},
		{"ipv6 routing header udp", v6Routing, nil, ports(want6(ProtoUDP, 40+16+12, 56), 2222, 53, 0)},
		{"ipv6 ah tcp", v6AH, nil, ports(want6(ProtoTCP, 40+24+20, 64), 40011, 443, 0)},
		{"ipv6 802.1Q udp", v6UDPVLAN, nil, vlan(ports(want6(ProtoUDP, 68, 40), 3333, 53, 0), 4094, 18)},
		{"ipv6 icmpv6 echo", echo6, nil, with(want6(ProtoICMPv6, 52, 40), func(p *Parsed) { p.ICMPType = 128 })},
		{"ipv6 packet too big quoting tcp", packetTooBig, nil, with(fromRouterWant6(40+8+48, 2, 0), func(p *Parsed) {
			p.HasInner = true
			p.Inner = Inner{IPVersion: 6, Src: a16(vip6), Dst: a16(cli6), Proto: ProtoTCP, HasPorts: true, SrcPort: 443, DstPort: 40000}
		})},
		{"ipv6 unreachable quoting dest options udp", unreachable6, nil, with(fromRouterWant6(40+8+len(quotedUDP6), 1, 4), func(p *Parsed) {
			p.HasInner = true
			p.Inner = Inner{IPVersion: 6, Src: a16(vip6), Dst: a16(cli6), Proto: ProtoUDP, HasPorts: true, SrcPort: 53, DstPort: 5353}
		})},
		{"ipv6 esp", esp6, nil, want6(ProtoESP, 64, 40)},
		{"ipv6 no next header", noNext, nil, want6(ProtoNoNext, 40, 40)},

		{"arp", arpFrame, ErrNotIP, Parsed{L3Off: 14, EtherType: EtherTypeARP}},
		{"arp in 802.1Q", arpVLAN, ErrNotIP, Parsed{L3Off: 18, EtherType: EtherTypeARP, HasVLAN: true, VLAN: 5}},
	}
}

func TestParse(t *testing.T) {
	var p Parsed
	for _, r := range parseRows(t) {
		t.Run(r.name, func(t *testing.T) {
			// Leave the previous row's result in p: Parse must overwrite it all.
			err := Parse(r.frame, &p)
			if !errors.Is(err, r.err) {
				t.Fatalf("err = %v, want %v", err, r.err)
			}
			if p != r.want {
				t.Errorf("got  %+v\nwant %+v", p, r.want)
			}
			if err == nil {
				checkAgainstGopacket(t, r.frame, &p)
			}
		})
	}
}

// checkAgainstGopacket compares what both decoders agree on: addresses and,
// where gopacket decodes them, ports.
func checkAgainstGopacket(t *testing.T, frame []byte, p *Parsed) {
	t.Helper()
	pkt := gopacket.NewPacket(frame, layers.LayerTypeEthernet, gopacket.Default)
	if nl := pkt.NetworkLayer(); nl != nil {
		src, _ := netip.AddrFromSlice(nl.NetworkFlow().Src().Raw())
		dst, _ := netip.AddrFromSlice(nl.NetworkFlow().Dst().Raw())
		if p.SrcAddr() != src || p.DstAddr() != dst {
			t.Errorf("addresses %v→%v, gopacket %v→%v", p.SrcAddr(), p.DstAddr(), src, dst)
		}
	}
	if !p.HasPorts || p.Frag != FragNone || p.HasInner {
		return
	}
	if tl := pkt.TransportLayer(); tl != nil && tl.LayerType() != gopacket.LayerTypeFragment {
		f := tl.TransportFlow()
		if sp, dp := binary.BigEndian.Uint16(f.Src().Raw()), binary.BigEndian.Uint16(f.Dst().Raw()); sp != p.SrcPort || dp != p.DstPort {
			t.Errorf("ports %d→%d, gopacket %d→%d", p.SrcPort, p.DstPort, sp, dp)
		}
	}
}

type malformedRow struct {
	name     string
	frame    []byte
	err      error
	dstValid bool
}

func malformedRows(tb testing.TB) []malformedRow {
	tb.Helper()
	s := func(ls ...gopacket.SerializableLayer) []byte { return serialize(tb, ls...) }
	ip := ip4L(layers.IPProtocolTCP)
	base4 := s(ethL(layers.EthernetTypeIPv4), ip, tcpL(ip, 1, 2)) // 54 bytes
	ip6 := ip6L(layers.IPProtocolTCP)
	base6 := s(ethL(layers.EthernetTypeIPv6), ip6, tcpL(ip6, 1, 2)) // 74 bytes
	ip = ip4L(layers.IPProtocolUDP)
	udp4 := s(ethL(layers.EthernetTypeIPv4), ip, udpL(ip, 1, 2))
	ip = ip4L(layers.IPProtocolTCP)
	ip.Flags = layers.IPv4MoreFragments
	firstFragCut := s(ethL(layers.EthernetTypeIPv4), ip, payload(8))
	icmpCut := s(ethL(layers.EthernetTypeIPv4), ip4L(layers.IPProtocolICMPv4), payload(4))
	ahCut := s(ethL(layers.EthernetTypeIPv4), ip4L(layers.IPProtocolAH), payload(1))

	ip6 = ip6L(layers.IPProtocolIPv6Destination)
	hbhNotFirst := s(ethL(layers.EthernetTypeIPv6), ip6, ext6(layers.IPProtocolIPv6HopByHop, 0),
		ext6(layers.IPProtocolTCP, 0), tcpL(ip6, 1, 2))
	ip6 = ip6L(layers.IPProtocolIPv6Destination)
	extBeyond := mutate(s(ethL(layers.EthernetTypeIPv6), ip6, ext6(layers.IPProtocolTCP, 0), tcpL(ip6, 1, 2)),
		func(b []byte) { b[14+40+1] = 5 }) // 48 bytes claimed, 28 there
	extLenCut := s(ethL(layers.EthernetTypeIPv6), ip6L(layers.IPProtocolIPv6Destination), payload(1))
	long := []gopacket.SerializableLayer{ethL(layers.EthernetTypeIPv6), ip6L(layers.IPProtocolIPv6Destination)}
	for i := 0; i < maxExtHeaders; i++ {
		long = append(long, ext6(layers.IPProtocolIPv6Destination, 0))
	}
	long = append(long, ext6(layers.IPProtocolTCP, 0), payload(20))
	tooManyExt := s(long...)
	fragHdrCut := s(ethL(layers.EthernetTypeIPv6), ip6L(layers.IPProtocolIPv6Fragment), payload(4))
	tcp6Cut := s(ethL(layers.EthernetTypeIPv6), ip6L(layers.IPProtocolTCP), payload(10))
	threeTags := s(ethL(layers.EthernetTypeQinQ), dot1q(1, layers.EthernetTypeDot1Q), dot1q(2, layers.EthernetTypeDot1Q),
		dot1q(3, layers.EthernetTypeIPv4), ip4L(layers.IPProtocolUDP), payload(8))

	setTotal := func(n uint16) func([]byte) {
		return func(b []byte) { binary.BigEndian.PutUint16(b[14+2:], n) }
	}
	return []malformedRow{
		{"empty", nil, ErrTruncated, false},
		{"shorter than ethernet", base4[:13], ErrTruncated, false},
		{"vlan tag cut", mutate(base4[:16], func(b []byte) { binary.BigEndian.PutUint16(b[12:], EtherTypeVLAN) }), ErrTruncated, false},
		{"three vlan tags", threeTags, ErrNotIP, false},
		{"ipv4 cut before dst", base4[:14+19], ErrTruncated, false},
		{"ipv4 cut after dst", base4[:14+20], ErrTruncated, true},
		{"ipv4 version 6", mutate(base4, func(b []byte) { b[14] = 0x65 }), ErrMalformed, true},
		{"ipv4 ihl 4", mutate(base4, func(b []byte) { b[14] = 0x44 }), ErrMalformed, true},
		{"ipv4 total length below 20", mutate(base4, setTotal(19)), ErrMalformed, true},
		{"ipv4 ihl beyond total length", mutate(base4, func(b []byte) { b[14] = 0x4f }), ErrMalformed, true},
		{"ipv4 total length beyond frame", mutate(base4, setTotal(uint16(len(base4)-14+1))), ErrTruncated, true},
		{"ah cut", ahCut, ErrTruncated, true},
		{"tcp data offset 4", mutate(base4, func(b []byte) { b[14+20+12] = 0x40 }), ErrMalformed, true},
		{"tcp options beyond packet", mutate(base4, func(b []byte) { b[14+20+12] = 0x60 }), ErrTruncated, true},
		{"tcp cut by ip length", mutate(base4, setTotal(39)), ErrTruncated, true},
		{"tcp cut by frame", mutate(base4[:53], setTotal(39)), ErrTruncated, true},
		{"udp cut", mutate(udp4, setTotal(27)), ErrTruncated, true},
		{"first fragment with cut tcp", firstFragCut, ErrTruncated, true},
		{"icmp cut", icmpCut, ErrTruncated, true},
		{"ipv6 cut before dst", base6[:14+39], ErrTruncated, false},
		{"ipv6 version 4", mutate(base6, func(b []byte) { b[14] = 0x40 }), ErrMalformed, true},
		{"ipv6 payload length beyond frame", mutate(base6, func(b []byte) { b[14+5] = 21 }), ErrTruncated, true},
		{"ipv6 hop-by-hop not first", hbhNotFirst, ErrMalformed, true},
		{"ipv6 extension header beyond packet", extBeyond, ErrTruncated, true},
		{"ipv6 extension header length cut", extLenCut, ErrTruncated, true},
		{"ipv6 too many extension headers", tooManyExt, ErrMalformed, true},
		{"ipv6 fragment header cut", fragHdrCut, ErrTruncated, true},
		{"ipv6 tcp cut", tcp6Cut, ErrTruncated, true},
	}
}

func TestParseMalformed(t *testing.T) {
	for _, r := range malformedRows(t) {
		t.Run(r.name, func(t *testing.T) {
			var p Parsed
			err := Parse(r.frame, &p)
			if !errors.Is(err, r.err) {
				t.Fatalf("err = %v, want %v", err, r.err)
			}
			if p.DstValid != r.dstValid {
				t.Fatalf("DstValid = %v, want %v", p.DstValid, r.dstValid)
			}
			if p.DstValid && p.Dst != a16(vip4) && p.Dst != a16(vip6) {
				t.Errorf("Dst = %v, want the VIP", p.DstAddr())
			}
		})
	}
}

// TestParseFirstFragmentPorts pins SPEC §0 / FR3: a first fragment carries
// its ports (for rule matching) but has no port information (for hashing).
func TestParseFirstFragmentPorts(t *testing.T) {
	for _, r := range parseRows(t) {
		var p Parsed
		if err := Parse(r.frame, &p); err != nil {
			continue
		}
		wantInfo := (p.Proto == ProtoTCP || p.Proto == ProtoUDP) && p.Frag == FragNone
		if p.HasPortInfo() != wantInfo {
			t.Errorf("%s: HasPortInfo = %v, want %v", r.name, p.HasPortInfo(), wantInfo)
		}
		if p.Frag == FragFirst && (p.Proto == ProtoTCP || p.Proto == ProtoUDP) && !p.HasPorts {
			t.Errorf("%s: first fragment without ports", r.name)
		}
	}
}

func TestIsICMPError(t *testing.T) {
	for _, r := range parseRows(t) {
		var p Parsed
		_ = Parse(r.frame, &p)
		want := p.ICMPType != 0 && p.ICMPType != 8 && p.ICMPType != 128
		if p.IsICMPError() != want {
			t.Errorf("%s: IsICMPError = %v", r.name, p.IsICMPError())
		}
	}
}

func TestAddr(t *testing.T) {
	a := AddrFrom4([4]byte{203, 0, 113, 10})
	if a != a16(vip4) || !Is4(a) || Is4(a16(vip6)) {
		t.Fatalf("AddrFrom4 = %x", a)
	}
	if AddrToNetip(a) != vip4 || AddrToNetip(a16(vip6)) != vip6 {
		t.Fatal("AddrToNetip does not round-trip")
	}
}

func TestParseAllocs(t *testing.T) {
	rows := parseRows(t)
	var p Parsed
	for _, r := range rows {
		if n := testing.AllocsPerRun(100, func() { _ = Parse(r.frame, &p) }); n != 0 {
			t.Errorf("%s: %v allocs per Parse", r.name, n)
		}
	}
	for _, r := range malformedRows(t) {
		if n := testing.AllocsPerRun(100, func() { _ = Parse(r.frame, &p) }); n != 0 {
			t.Errorf("%s: %v allocs per Parse", r.name, n)
		}
	}
}

func BenchmarkParse(b *testing.B) {
	ip := ip4L(layers.IPProtocolTCP)
	t4 := tcpL(ip, 40000, 80)
	t4.ACK = true
	v4 := serialize(b, ethL(layers.EthernetTypeIPv4), ip, t4, payload(1400))
	ip6 := ip6L(layers.IPProtocolTCP)
	t6 := tcpL(ip6, 40000, 443)
	t6.ACK = true
	v6 := serialize(b, ethL(layers.EthernetTypeIPv6), ip6, t6, payload(1400))
	for _, c := range []struct {
		name  string
		frame []byte
	}{{"IPv4TCP", v4}, {"IPv6TCP", v6}} {
		b.Run(c.name, func(b *testing.B) {
			var p Parsed
			b.ReportAllocs()
			for b.Loop() {
				if err := Parse(c.frame, &p); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

package dataplane_test

// Golden rewrite table, Katran style: one row per behaviour, with its
// description, the input frame, the forwarding method it is configured
// with, the expected verdict and the expected output frame. Inputs and
// expected outputs are built independently with gopacket; outputs are
// also decoded with gopacket and checked field by field, and the IPv4
// header and UDP checksums are verified by a sum written here.

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"testing"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

	"xlb/controlplane/cptest"
	"xlb/controlplane/sim"
	"xlb/dataplane"
	"xlb/dataplane/craft"
	"xlb/dataplane/packet"
)

const goldenGUEPort = 6080 // not the default (5555): the configured port must be used

var goldenBackendMAC = net.HardwareAddr{0x02, 0x00, 0x00, 0x00, 0xbe, 0x01}

// goldenIn describes an input frame.
type goldenIn struct {
	v6    bool
	vlan  uint16       // 802.1Q VLAN ID (with priority 5), 0: untagged
	proto packet.Proto // TCP, UDP, or another protocol number (raw payload)
	tos   uint8        // IPv4 TOS / IPv6 traffic class
	df    bool         // IPv4 don't fragment
	later bool         // a non-first IPv4 fragment (offset 64 bytes, raw payload)
	pad   int          // Ethernet padding added after the IP packet (beyond gopacket's own)
	arp   bool         // an ARP request for the VIP instead
}

type goldenRow struct {
	desc    string
	method  string // forwarding_method
	backend string // the one backend's address
	in      goldenIn
	verdict dataplane.Verdict
	reason  dataplane.Reason
}

var goldenRows = []goldenRow{
	// L2 direct server return: only the MACs change.
	{desc: "L2_DSR IPv4 TCP", method: "L2_DSR", backend: "10.10.0.11", in: goldenIn{proto: packet.ProtoTCP, df: true}, verdict: dataplane.VerdictForward},
	{desc: "L2_DSR IPv6 UDP", method: "L2_DSR", backend: "2001:db8:10::11", in: goldenIn{v6: true, proto: packet.ProtoUDP}, verdict: dataplane.VerdictForward},
	{desc: "L2_DSR IPv4 802.1Q keeps the tag", method: "L2_DSR", backend: "10.10.0.11", in: goldenIn{proto: packet.ProtoTCP, vlan: 100}, verdict: dataplane.VerdictForward},
	{desc: "L2_DSR IPv6 802.1Q keeps the tag", method: "L2_DSR", backend: "2001:db8:10::11", in: goldenIn{v6: true, proto: packet.ProtoTCP, vlan: 4000}, verdict: dataplane.VerdictForward},
	{desc: "L2_DSR keeps Ethernet padding", method: "L2_DSR", backend: "10.10.0.11", in: goldenIn{proto: packet.ProtoTCP, pad: 6}, verdict: dataplane.VerdictForward},
	{desc: "L2_DSR IPv4 later fragment", method: "L2_DSR", backend: "10.10.0.11", in: goldenIn{proto: packet.ProtoUDP, later: true}, verdict: dataplane.VerdictForward},

	// IPIP: protocol 4 for IPv4 inside, 41 for IPv6 inside.
	{desc: "IPIP v4-in-v4, DF and DSCP/ECN copied", method: "IPIP", backend: "10.10.0.11", in: goldenIn{proto: packet.ProtoTCP, df: true, tos: 0xb9}, verdict: dataplane.VerdictForward},
	{desc: "IPIP v4-in-v4, no DF stays fragmentable", method: "IPIP", backend: "10.10.0.11", in: goldenIn{proto: packet.ProtoUDP}, verdict: dataplane.VerdictForward},
	{desc: "IPIP v4-in-v4 802.1Q keeps the tag", method: "IPIP", backend: "10.10.0.11", in: goldenIn{proto: packet.ProtoTCP, df: true, vlan: 100}, verdict: dataplane.VerdictForward},
	{desc: "IPIP v4-in-v4 drops Ethernet padding", method: "IPIP", backend: "10.10.0.11", in: goldenIn{proto: packet.ProtoTCP, df: true, pad: 6}, verdict: dataplane.VerdictForward},
	{desc: "IPIP v4-in-v4 later fragment", method: "IPIP", backend: "10.10.0.11", in: goldenIn{proto: packet.ProtoUDP, later: true}, verdict: dataplane.VerdictForward},
	{desc: "IPIP v6-in-v6", method: "IPIP", backend: "2001:db8:10::11", in: goldenIn{v6: true, proto: packet.ProtoTCP, tos: 0x2a}, verdict: dataplane.VerdictForward},
	{desc: "IPIP v6-in-v4, DF always", method: "IPIP", backend: "10.10.0.11", in: goldenIn{v6: true, proto: packet.ProtoUDP}, verdict: dataplane.VerdictForward},
	{desc: "IPIP v4-in-v6", method: "IPIP", backend: "2001:db8:10::11", in: goldenIn{proto: packet.ProtoTCP, df: true}, verdict: dataplane.VerdictForward},

	// GUE (variant 0): UDP to gue_port, a 4-byte header naming the inner family.
	{desc: "GUE v4-in-v4, UDP checksum 0", method: "GUE", backend: "10.10.0.11", in: goldenIn{proto: packet.ProtoTCP, df: true}, verdict: dataplane.VerdictForward},
	{desc: "GUE v6-in-v6, UDP checksum set", method: "GUE", backend: "2001:db8:10::11", in: goldenIn{v6: true, proto: packet.ProtoUDP, tos: 0x2a}, verdict: dataplane.VerdictForward},
	{desc: "GUE v6-in-v4", method: "GUE", backend: "10.10.0.11", in: goldenIn{v6: true, proto: packet.ProtoTCP}, verdict: dataplane.VerdictForward},
	{desc: "GUE v4-in-v6", method: "GUE", backend: "2001:db8:10::11", in: goldenIn{proto: packet.ProtoUDP}, verdict: dataplane.VerdictForward},
	{desc: "GUE v4-in-v4 802.1Q", method: "GUE", backend: "10.10.0.11", in: goldenIn{proto: packet.ProtoTCP, vlan: 7}, verdict: dataplane.VerdictForward},

	// Not rewritten.
	{desc: "ARP for the VIP is passed", method: "IPIP", backend: "10.10.0.11", in: goldenIn{arp: true}, verdict: dataplane.VerdictPass},
	{desc: "SCTP to the VIP is dropped (no rule)", method: "IPIP", backend: "10.10.0.11", in: goldenIn{proto: 132}, verdict: dataplane.VerdictDrop, reason: dataplane.ReasonNoRule},
}

// goldenConfig is one L3_DEFAULT service with one backend (so the backend is
// known) on the VIPs its method can serve.
func goldenConfig(row goldenRow) string {
	svc := specSvc{Name: "svc", Protocol: "UNSPECIFIED", Method: row.method,
		Primary: []string{row.backend + " " + goldenBackendMAC.String()}}
	if row.method == "GUE" {
		svc.Extra = []string{fmt.Sprintf("gue_port = %d", goldenGUEPort)}
	}
	v4Backend := netip.MustParseAddr(row.backend).Is4()
	var rules []string
	if row.method != "L2_DSR" || v4Backend {
		rules = append(rules, specRule{Name: "v4", VIP: specVIP4, Proto: "L3_DEFAULT", Service: "svc"}.String())
	}
	if row.method != "L2_DSR" || !v4Backend {
		rules = append(rules, specRule{Name: "v6", VIP: specVIP6, Proto: "L3_DEFAULT", Service: "svc"}.String())
	}
	return specFile(append([]string{svc.String()}, rules...)...)
}

// goldenFrame builds the input frame of in, and returns where its IP packet
// is (l3 offset and IP length).
func goldenFrame(tb testing.TB, in goldenIn) (frame []byte, l3, ipLen int) {
	tb.Helper()
	src, dst := netip.MustParseAddr(specClient4), netip.MustParseAddr(specVIP4)
	if in.v6 {
		src, dst = netip.MustParseAddr(specClient6), netip.MustParseAddr(specVIP6)
	}
	eth := &layers.Ethernet{SrcMAC: craft.ClientMAC, DstMAC: craft.LocalMAC, EthernetType: layers.EthernetTypeIPv4}
	if in.v6 {
		eth.EthernetType = layers.EthernetTypeIPv6
	}
	if in.arp {
		return specBuild(tb,
			&layers.Ethernet{SrcMAC: craft.ClientMAC, DstMAC: layers.EthernetBroadcast, EthernetType: layers.EthernetTypeARP},
			&layers.ARP{AddrType: layers.LinkTypeEthernet, Protocol: layers.EthernetTypeIPv4, HwAddressSize: 6, ProtAddressSize: 4,
				Operation: layers.ARPRequest, SourceHwAddress: craft.ClientMAC, SourceProtAddress: src.AsSlice(),
				DstHwAddress: make([]byte, 6), DstProtAddress: dst.AsSlice()}), 0, 0
	}
	ls := []gopacket.SerializableLayer{eth}
	l3 = 14
	if in.vlan != 0 {
		ls = append(ls, &layers.Dot1Q{Priority: 5, VLANIdentifier: in.vlan, Type: eth.EthernetType})
		eth.EthernetType = layers.EthernetTypeDot1Q
		l3 += 4
	}
	var ip gopacket.NetworkLayer
	if in.v6 {
		ip = &layers.IPv6{Version: 6, TrafficClass: in.tos, FlowLabel: 0x5eed, HopLimit: 57,
			NextHeader: layers.IPProtocol(in.proto), SrcIP: src.AsSlice(), DstIP: dst.AsSlice()}
	} else {
		v4 := &layers.IPv4{Version: 4, IHL: 5, TOS: in.tos, Id: 0x4242, TTL: 57,
			Protocol: layers.IPProtocol(in.proto), SrcIP: src.AsSlice(), DstIP: dst.AsSlice()}
		if in.df {
			v4.Flags = layers.IPv4DontFragment
		}
		if in.later {
			v4.FragOffset = 8 // 64 bytes
		}
		ip = v4
	}
	ls = append(ls, ip.(gopacket.SerializableLayer))
	payload := []byte("golden rewrite payload")
	switch {
	case in.later:
		ls = append(ls, gopacket.Payload(bytes.Repeat([]byte{0xab}, 40)))
	case in.proto == packet.ProtoTCP:
		tcp := &layers.TCP{SrcPort: 40000, DstPort: 443, Seq: 7, Ack: 9, ACK: true, PSH: true, Window: 512}
		tcp.SetNetworkLayerForChecksum(ip)
		ls = append(ls, tcp)
		if in.pad > 0 {
			payload = nil // a bare segment: short enough to need padding
		}
	case in.proto == packet.ProtoUDP:
		udp := &layers.UDP{SrcPort: 40000, DstPort: 443}
		udp.SetNetworkLayerForChecksum(ip)
		ls = append(ls, udp)
	}
	ls = append(ls, gopacket.Payload(payload))
	// gopacket pads an Ethernet frame to 60 bytes itself; the IP header
	// says where the packet ends.
	frame = specBuild(tb, ls...)
	frame = append(frame, make([]byte, in.pad)...)
	if in.v6 {
		ipLen = 40 + int(binary.BigEndian.Uint16(frame[l3+4:]))
	} else {
		ipLen = int(binary.BigEndian.Uint16(frame[l3+2:]))
	}
	if in.pad > 0 && len(frame) <= l3+ipLen {
		tb.Fatalf("frame of %d bytes has no padding after its %d-byte IP packet", len(frame), ipLen)
	}
	return frame, l3, ipLen
}

// goldenSum is the Internet checksum fold of b added to sum: 0xffff over a
// header or segment whose checksum is right.
func goldenSum(sum uint32, b []byte) uint16 {
	for i := 0; i+1 < len(b); i += 2 {
		sum += uint32(b[i])<<8 | uint32(b[i+1])
	}
	if len(b)%2 == 1 {
		sum += uint32(b[len(b)-1]) << 8
	}
	for sum > 0xffff {
		sum = sum>>16 + sum&0xffff
	}
	return uint16(sum)
}

// goldenPseudo6 is the IPv6 pseudo-header sum for UDP.
func goldenPseudo6(src, dst net.IP, length int) uint32 {
	var s uint32
	for i := 0; i < 16; i += 2 {
		s += uint32(src[i])<<8 | uint32(src[i+1])
		s += uint32(dst[i])<<8 | uint32(dst[i+1])
	}
	return s + uint32(length) + 17
}

// goldenEncapWant builds the frame an encapsulating method must send, with
// gopacket: new Ethernet header (the input's VLAN tag kept), outer IP from the
// balancer's encap source to the backend, GUE's UDP and header, then the
// input's IP packet byte for byte. The entropy fields (GUE source port, IPv6
// flow label) and the outer IPv4 ID are not rules: they are taken from got,
// after the caller checked them.
func goldenEncapWant(tb testing.TB, row goldenRow, in []byte, l3, ipLen int, got gopacket.Packet) []byte {
	tb.Helper()
	local := sim.SimLocal()
	backend := netip.MustParseAddr(row.backend)
	inner := in[l3 : l3+ipLen]
	innerV6 := inner[0]>>4 == 6
	tos := inner[1]
	innerProto := layers.IPProtocolIPv4
	if innerV6 {
		tos = inner[0]<<4 | inner[1]>>4
		innerProto = layers.IPProtocolIPv6
	}
	nextProto := innerProto
	if row.method == "GUE" {
		nextProto = layers.IPProtocolUDP
	}

	eth := &layers.Ethernet{SrcMAC: local.MAC[:], DstMAC: goldenBackendMAC, EthernetType: layers.EthernetTypeIPv4}
	if backend.Is6() {
		eth.EthernetType = layers.EthernetTypeIPv6
	}
	ls := []gopacket.SerializableLayer{eth}
	if l3 > 14 {
		var q layers.Dot1Q
		if err := q.DecodeFromBytes(in[14:18], gopacket.NilDecodeFeedback); err != nil {
			tb.Fatal(err)
		}
		ls = append(ls, &layers.Dot1Q{Priority: q.Priority, DropEligible: q.DropEligible, VLANIdentifier: q.VLANIdentifier, Type: eth.EthernetType})
		eth.EthernetType = layers.EthernetTypeDot1Q
	}
	var outer gopacket.NetworkLayer
	if backend.Is4() {
		o := &layers.IPv4{Version: 4, IHL: 5, TOS: tos, TTL: 64, Protocol: nextProto,
			SrcIP: sim.SimEncapV4.AsSlice(), DstIP: backend.AsSlice()}
		if innerV6 || binary.BigEndian.Uint16(inner[6:])&0x4000 != 0 {
			o.Flags = layers.IPv4DontFragment
		}
		o.Id = got.Layer(layers.LayerTypeIPv4).(*layers.IPv4).Id
		outer = o
	} else {
		o := &layers.IPv6{Version: 6, TrafficClass: tos, HopLimit: 64, NextHeader: nextProto,
			SrcIP: sim.SimEncapV6.AsSlice(), DstIP: backend.AsSlice()}
		o.FlowLabel = got.Layer(layers.LayerTypeIPv6).(*layers.IPv6).FlowLabel
		outer = o
	}
	ls = append(ls, outer.(gopacket.SerializableLayer))
	if row.method == "GUE" {
		gue := append([]byte{0, byte(innerProto), 0, 0}, inner...)
		udp := &layers.UDP{SrcPort: got.Layer(layers.LayerTypeUDP).(*layers.UDP).SrcPort, DstPort: goldenGUEPort}
		if backend.Is6() {
			udp.SetNetworkLayerForChecksum(outer)
			ls = append(ls, udp, gopacket.Payload(gue))
		} else {
			// Checksum 0 over IPv4: serialize UDP without one, then put it
			// under the outer header (whose checksum is computed).
			b := gopacket.NewSerializeBuffer()
			if err := gopacket.SerializeLayers(b, gopacket.SerializeOptions{FixLengths: true}, udp, gopacket.Payload(gue)); err != nil {
				tb.Fatal(err)
			}
			ls = append(ls, gopacket.Payload(b.Bytes()))
		}
	} else {
		ls = append(ls, gopacket.Payload(inner))
	}
	return specBuild(tb, ls...)
}

func TestGoldenRewrite(t *testing.T) {
	local := sim.SimLocal()
	for _, row := range goldenRows {
		t.Run(row.desc, func(t *testing.T) {
			r := cptest.New(t, goldenConfig(row))
			in, l3, ipLen := goldenFrame(t, row.in)
			res := r.SendFrame(in)
			if res.Verdict != row.verdict || res.Reason != row.reason {
				t.Fatalf("verdict %s reason %q, want %s %q", res.Verdict, res.Reason, row.verdict, row.reason)
			}
			if row.verdict != dataplane.VerdictForward {
				if res.Out != nil {
					t.Fatal("a frame that is not forwarded has an output")
				}
				return
			}
			if res.Backend.IP != netip.MustParseAddr(row.backend) {
				t.Fatalf("backend %s, want %s", res.Backend.IP, row.backend)
			}
			out := res.Out
			pkt := gopacket.NewPacket(out, layers.LayerTypeEthernet, gopacket.Default)
			if el := pkt.ErrorLayer(); el != nil {
				t.Fatalf("output does not decode: %v", el.Error())
			}
			eth := pkt.Layer(layers.LayerTypeEthernet).(*layers.Ethernet)
			if !bytes.Equal(eth.DstMAC, goldenBackendMAC) || !bytes.Equal(eth.SrcMAC, local.MAC[:]) {
				t.Errorf("MACs %s -> %s, want %s -> %s (the configured mac)", eth.SrcMAC, eth.DstMAC, net.HardwareAddr(local.MAC[:]), goldenBackendMAC)
			}
			if row.in.vlan != 0 {
				q, ok := pkt.Layer(layers.LayerTypeDot1Q).(*layers.Dot1Q)
				if !ok || q.VLANIdentifier != row.in.vlan || q.Priority != 5 {
					t.Errorf("802.1Q tag %+v, want VLAN %d priority 5", q, row.in.vlan)
				}
			}

			if row.method == "L2_DSR" {
				want := append([]byte(nil), in...)
				copy(want[0:6], goldenBackendMAC)
				copy(want[6:12], local.MAC[:])
				if !bytes.Equal(out, want) {
					t.Errorf("L2_DSR output\n got %x\nwant %x", out, want)
				}
				return
			}

			goldenCheckEncap(t, row, pkt, out, in[l3:l3+ipLen], l3)
			if want := goldenEncapWant(t, row, in, l3, ipLen, pkt); !bytes.Equal(out, want) {
				t.Errorf("output differs from the frame built with gopacket\n got %x\nwant %x", out, want)
			}
		})
	}
}

// goldenCheckEncap checks an IPIP or GUE output field by field.
func goldenCheckEncap(t *testing.T, row goldenRow, pkt gopacket.Packet, out, inner []byte, l3 int) {
	t.Helper()
	backend := netip.MustParseAddr(row.backend)
	innerV6 := inner[0]>>4 == 6
	wantInner := uint8(4)
	if innerV6 {
		wantInner = 41
	}
	if len(out) != l3+map[bool]int{true: 40, false: 20}[backend.Is6()]+map[bool]int{true: 12, false: 0}[row.method == "GUE"]+len(inner) {
		t.Errorf("output is %d bytes for a %d-byte inner packet", len(out), len(inner))
	}
	next := layers.IPProtocol(wantInner)
	if row.method == "GUE" {
		next = layers.IPProtocolUDP
	}
	var l4 []byte // what follows the outer IP header
	if backend.Is4() {
		o, ok := pkt.Layer(layers.LayerTypeIPv4).(*layers.IPv4)
		if !ok {
			t.Fatal("no outer IPv4 header")
		}
		wantDF := innerV6 || binary.BigEndian.Uint16(inner[6:])&0x4000 != 0
		switch {
		case o.Version != 4 || o.IHL != 5:
			t.Errorf("outer version %d IHL %d", o.Version, o.IHL)
		case o.Protocol != next:
			t.Errorf("outer protocol %d, want %d", o.Protocol, next)
		case int(o.Length) != len(out)-l3:
			t.Errorf("outer total length %d, want %d", o.Length, len(out)-l3)
		case o.TTL != 64:
			t.Errorf("outer TTL %d, want 64", o.TTL)
		case (o.Flags&layers.IPv4DontFragment != 0) != wantDF || o.Flags&layers.IPv4MoreFragments != 0 || o.FragOffset != 0:
			t.Errorf("outer flags %v offset %d, want DF=%v (inner IPv6, or IPv4 with DF)", o.Flags, o.FragOffset, wantDF)
		case !o.SrcIP.Equal(sim.SimEncapV4.AsSlice()) || !o.DstIP.Equal(backend.AsSlice()):
			t.Errorf("outer %s -> %s, want %s -> %s", o.SrcIP, o.DstIP, sim.SimEncapV4, backend)
		case goldenSum(0, out[l3:l3+20]) != 0xffff:
			t.Errorf("outer IPv4 header checksum %#04x is wrong", o.Checksum)
		}
		l4 = out[l3+20:]
	} else {
		o, ok := pkt.Layer(layers.LayerTypeIPv6).(*layers.IPv6)
		if !ok {
			t.Fatal("no outer IPv6 header")
		}
		switch {
		case o.NextHeader != next:
			t.Errorf("outer next header %d, want %d", o.NextHeader, next)
		case int(o.Length) != len(out)-l3-40:
			t.Errorf("outer payload length %d, want %d", o.Length, len(out)-l3-40)
		case o.HopLimit != 64:
			t.Errorf("outer hop limit %d, want 64", o.HopLimit)
		case !o.SrcIP.Equal(sim.SimEncapV6.AsSlice()) || !o.DstIP.Equal(backend.AsSlice()):
			t.Errorf("outer %s -> %s, want %s -> %s", o.SrcIP, o.DstIP, sim.SimEncapV6, backend)
		}
		l4 = out[l3+40:]
	}

	if row.method == "GUE" {
		u, ok := pkt.Layer(layers.LayerTypeUDP).(*layers.UDP)
		if !ok {
			t.Fatal("no outer UDP header")
		}
		if u.DstPort != goldenGUEPort || int(u.Length) != 8+4+len(inner) {
			t.Errorf("UDP dst port %d length %d, want %d and %d", u.DstPort, u.Length, goldenGUEPort, 8+4+len(inner))
		}
		if u.SrcPort < 49152 {
			t.Errorf("UDP source port %d is outside the ephemeral range", u.SrcPort)
		}
		if backend.Is4() && u.Checksum != 0 {
			t.Errorf("UDP checksum %#04x over IPv4, want 0", u.Checksum)
		}
		if backend.Is6() {
			o := pkt.Layer(layers.LayerTypeIPv6).(*layers.IPv6)
			if u.Checksum == 0 || goldenSum(goldenPseudo6(o.SrcIP, o.DstIP, len(l4)), l4) != 0xffff {
				t.Errorf("UDP checksum %#04x over IPv6 is wrong", u.Checksum)
			}
		}
		gue := l4[8:12]
		if gue[0] != 0 || gue[1] != wantInner || gue[2] != 0 || gue[3] != 0 {
			t.Errorf("GUE header %x, want version 0, no options, proto %d, no flags", gue, wantInner)
		}
		l4 = l4[12:]
	}
	if !bytes.Equal(l4, inner) {
		t.Errorf("inner packet changed\n got %x\nwant %x", l4, inner)
	}
	// And the inner packet still decodes as what was sent.
	first := layers.LayerTypeIPv4
	if innerV6 {
		first = layers.LayerTypeIPv6
	}
	if ip := gopacket.NewPacket(l4, first, gopacket.Default); ip.ErrorLayer() != nil {
		t.Errorf("inner packet does not decode: %v", ip.ErrorLayer().Error())
	}
}

// TestGoldenRewriteEntropy: the GUE source port and the outer IPv6 flow label
// are per-flow entropy for ECMP and RSS: stable for a flow, spread across
// flows, the port in the ephemeral range.
func TestGoldenRewriteEntropy(t *testing.T) {
	row := goldenRow{method: "GUE", backend: "2001:db8:10::11"}
	r := cptest.New(t, goldenConfig(row))
	ports, labels := map[layers.UDPPort]bool{}, map[uint32]bool{}
	for i := range 64 {
		p := cptest.TCP(specAddr("198.18.0.0", i+1).String(), specVIP4, uint16(30000+i), 443, "A")
		var port layers.UDPPort
		var label uint32
		for k := range 2 {
			res := r.Send(p)
			specForward(t, res, "flow")
			pkt := gopacket.NewPacket(res.Out, layers.LayerTypeEthernet, gopacket.Default)
			u := pkt.Layer(layers.LayerTypeUDP).(*layers.UDP)
			fl := pkt.Layer(layers.LayerTypeIPv6).(*layers.IPv6).FlowLabel
			if u.SrcPort < 49152 {
				t.Fatalf("source port %d is outside the ephemeral range", u.SrcPort)
			}
			if k == 1 && (u.SrcPort != port || fl != label) {
				t.Fatalf("flow %d: port %d label %#x, then %d %#x: not stable", i, port, label, u.SrcPort, fl)
			}
			port, label = u.SrcPort, fl
		}
		ports[port], labels[label] = true, true
	}
	if len(ports) < 32 || len(labels) < 32 {
		t.Errorf("64 flows got %d source ports and %d flow labels; entropy is not spread", len(ports), len(labels))
	}
}

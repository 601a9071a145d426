package packet

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net/netip"
	"testing"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
)

// tooBigIn runs TooBig on frame, placed after headroom bytes, and returns
// the error frame.
func tooBigIn(t *testing.T, frame []byte, headroom, mtu int) []byte {
	t.Helper()
	var p Parsed
	if err := Parse(frame, &p); err != nil {
		t.Fatal(err)
	}
	if !CanSendTooBig(&p) {
		t.Fatal("CanSendTooBig false for the test's frame")
	}
	buf := make([]byte, headroom+len(frame))
	copy(buf[headroom:], frame)
	off, n, err := TooBig(buf, headroom, &p, [6]byte(macLB), mtu, 0x4242)
	if err != nil {
		t.Fatalf("TooBig: %v", err)
	}
	return buf[off : off+n]
}

// TestTooBigIPv4: a 1500-byte IPv4 TCP packet with DF, 802.1Q-tagged,
// becomes a fragmentation-needed error (type 3 code 4) to the client from
// the address it sent to, back to its MAC with its tag, carrying the MTU
// and the first 548 bytes of the packet (576 in all), both checksums
// valid.
func TestTooBigIPv4(t *testing.T) {
	ip := ip4L(layers.IPProtocolTCP)
	frame := serialize(t, ethL(layers.EthernetTypeDot1Q), dot1q(7, layers.EthernetTypeIPv4), ip,
		tcpL(ip, 40000, 80), payload(1500-20-20))
	orig := frame[18:]
	out := tooBigIn(t, frame, 64, 1480)
	pk := gopacket.NewPacket(out, layers.LayerTypeEthernet, gopacket.Default)
	eth, _ := pk.Layer(layers.LayerTypeEthernet).(*layers.Ethernet)
	tag, _ := pk.Layer(layers.LayerTypeDot1Q).(*layers.Dot1Q)
	v4, _ := pk.Layer(layers.LayerTypeIPv4).(*layers.IPv4)
	icmp, _ := pk.Layer(layers.LayerTypeICMPv4).(*layers.ICMPv4)
	if eth == nil || tag == nil || v4 == nil || icmp == nil {
		t.Fatalf("not Ethernet/802.1Q/IPv4/ICMP: %v", pk)
	}
	if !bytes.Equal(eth.DstMAC, macClient) || !bytes.Equal(eth.SrcMAC, macLB) || tag.VLANIdentifier != 7 {
		t.Errorf("Ethernet %s -> %s VLAN %d, want %s -> %s VLAN 7", eth.SrcMAC, eth.DstMAC, tag.VLANIdentifier, macLB, macClient)
	}
	if !v4.SrcIP.Equal(vip4.AsSlice()) || !v4.DstIP.Equal(cli4.AsSlice()) || v4.Length != 576 || v4.TOS != 0xc0 ||
		v4.Id != 0x4242 || v4.Flags != 0 || v4.TTL != 64 || v4.IHL != 5 {
		t.Errorf("IPv4 header %+v", v4)
	}
	if c := refChecksum(out[18:38]); c != 0 {
		t.Errorf("IPv4 header checksum does not verify (%#x)", c)
	}
	if icmp.TypeCode != layers.CreateICMPv4TypeCode(3, 4) {
		t.Errorf("ICMP %v, want destination unreachable / fragmentation needed", icmp.TypeCode)
	}
	if mtu := binary.BigEndian.Uint16(out[38+6:]); mtu != 1480 || binary.BigEndian.Uint16(out[38+4:]) != 0 {
		t.Errorf("next-hop MTU %d (unused %#x), want 1480", mtu, out[38+4:38+6])
	}
	if c := refChecksum(out[38:]); c != 0 {
		t.Errorf("ICMP checksum does not verify (%#x)", c)
	}
	if q := out[38+8:]; !bytes.Equal(q, orig[:548]) {
		t.Errorf("quote of %d bytes differs from the packet's first 548", len(q))
	}
}

// TestTooBigIPv6: a 1500-byte IPv6 UDP packet becomes a packet too big
// (type 2) to the client from the address it sent to, MTU in 32 bits,
// quoting 1232 bytes (1280 in all), checksum over the pseudo-header
// valid; an MTU below 1280 is reported as 1280; a short packet is quoted
// whole.
func TestTooBigIPv6(t *testing.T) {
	ip := ip6L(layers.IPProtocolUDP)
	frame := serialize(t, ethL(layers.EthernetTypeIPv6), ip, udpL(ip, 40000, 53), payload(1500-40-8))
	for _, tc := range []struct {
		name       string
		frame      []byte
		mtu, want  int
		quote, all int
	}{
		{"1500 bytes", frame, 1460, 1460, 1232, 1280},
		{"MTU below the minimum", frame, 1000, 1280, 1232, 1280},
		{"short packet", serialize(t, ethL(layers.EthernetTypeIPv6), ip, udpL(ip, 40000, 53), payload(100)), 1460, 1460, 148, 196},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := tooBigIn(t, tc.frame, TooBigHeadroom, tc.mtu)
			pk := gopacket.NewPacket(out, layers.LayerTypeEthernet, gopacket.Default)
			eth, _ := pk.Layer(layers.LayerTypeEthernet).(*layers.Ethernet)
			v6, _ := pk.Layer(layers.LayerTypeIPv6).(*layers.IPv6)
			if eth == nil || v6 == nil {
				t.Fatalf("not Ethernet/IPv6: %v", pk)
			}
			if !bytes.Equal(eth.DstMAC, macClient) || !bytes.Equal(eth.SrcMAC, macLB) || eth.EthernetType != layers.EthernetTypeIPv6 {
				t.Errorf("Ethernet %s -> %s %v", eth.SrcMAC, eth.DstMAC, eth.EthernetType)
			}
			if !v6.SrcIP.Equal(vip6.AsSlice()) || !v6.DstIP.Equal(cli6.AsSlice()) || v6.NextHeader != layers.IPProtocolICMPv6 ||
				int(v6.Length) != tc.all-40 || v6.HopLimit != 64 {
				t.Errorf("IPv6 header %+v", v6)
			}
			icmp := out[14+40:]
			if icmp[0] != 2 || icmp[1] != 0 || int(binary.BigEndian.Uint32(icmp[4:])) != tc.want {
				t.Errorf("ICMPv6 type %d code %d MTU %d, want packet too big with MTU %d", icmp[0], icmp[1], binary.BigEndian.Uint32(icmp[4:]), tc.want)
			}
			ph := append(append(vip6.AsSlice(), cli6.AsSlice()...), 0, 0, byte(len(icmp)>>8), byte(len(icmp)), 0, 0, 0, 58)
			if c := refChecksum(ph, icmp); c != 0 {
				t.Errorf("ICMPv6 checksum does not verify (%#x)", c)
			}
			if len(out) != 14+tc.all || !bytes.Equal(icmp[8:], tc.frame[14:14+tc.quote]) {
				t.Errorf("frame of %d bytes, want %d with the packet's first %d bytes quoted", len(out), 14+tc.all, tc.quote)
			}
		})
	}
}

// TestTooBigErrors: too little headroom, and a parse that does not fit
// the buffer, are errors and leave the buffer alone.
func TestTooBigErrors(t *testing.T) {
	ip := ip6L(layers.IPProtocolUDP)
	frame := serialize(t, ethL(layers.EthernetTypeIPv6), ip, udpL(ip, 40000, 53), payload(100))
	var p Parsed
	if err := Parse(frame, &p); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, TooBigHeadroom-1+len(frame))
	copy(buf[TooBigHeadroom-1:], frame)
	before := bytes.Clone(buf)
	if _, _, err := TooBig(buf, TooBigHeadroom-1, &p, [6]byte(macLB), 1400, 0); !errors.Is(err, ErrNoHeadroom) {
		t.Errorf("47 bytes of headroom: %v, want ErrNoHeadroom", err)
	}
	if _, _, err := TooBig(buf[:len(buf)-1], TooBigHeadroom-1, &p, [6]byte(macLB), 1400, 0); !errors.Is(err, ErrTruncated) {
		t.Errorf("buffer shorter than the packet: %v, want ErrTruncated", err)
	}
	if !bytes.Equal(buf, before) {
		t.Error("a failed TooBig changed the buffer")
	}
}

// TestCanSendTooBig: who may be told.
func TestCanSendTooBig(t *testing.T) {
	noDF := ip4L(layers.IPProtocolTCP)
	noDF.Flags = 0
	later := ip4L(layers.IPProtocolUDP)
	later.FragOffset = 100
	mcast := ip4L(layers.IPProtocolUDP)
	mcast.SrcIP = netip.MustParseAddr("224.0.0.9").AsSlice()
	icmpErr := ip4L(layers.IPProtocolICMPv4)
	icmpEcho := ip4L(layers.IPProtocolICMPv4)
	v6 := ip6L(layers.IPProtocolTCP)
	v6ptb := ip6L(layers.IPProtocolICMPv6)
	ptb := &layers.ICMPv6{TypeCode: layers.CreateICMPv6TypeCode(2, 0)}
	if err := ptb.SetNetworkLayerForChecksum(v6ptb); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		frame []byte
		want  bool
	}{
		{"IPv4 TCP with DF", serialize(t, ethL(layers.EthernetTypeIPv4), ip4L(layers.IPProtocolTCP), payload(40)), true},
		{"IPv4 without DF", serialize(t, ethL(layers.EthernetTypeIPv4), noDF, payload(40)), false},
		{"IPv4 later fragment", serialize(t, ethL(layers.EthernetTypeIPv4), later, payload(40)), false},
		{"IPv4 from a multicast source", serialize(t, ethL(layers.EthernetTypeIPv4), mcast, payload(40)), false},
		{"ICMP error", serialize(t, ethL(layers.EthernetTypeIPv4), icmpErr,
			&layers.ICMPv4{TypeCode: layers.CreateICMPv4TypeCode(3, 4)}, payload(28)), false},
		{"ICMP echo with DF", serialize(t, ethL(layers.EthernetTypeIPv4), icmpEcho,
			&layers.ICMPv4{TypeCode: layers.CreateICMPv4TypeCode(8, 0)}, payload(28)), true},
		{"IPv6 TCP", serialize(t, ethL(layers.EthernetTypeIPv6), v6, payload(40)), true},
		{"ICMPv6 packet too big", serialize(t, ethL(layers.EthernetTypeIPv6), v6ptb, ptb, payload(48)), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var p Parsed
			if err := Parse(tc.frame, &p); err != nil {
				t.Fatal(err)
			}
			if got := CanSendTooBig(&p); got != tc.want {
				t.Errorf("CanSendTooBig = %v, want %v", got, tc.want)
			}
		})
	}
}

package packet

import "testing"

func TestProtoStringParse(t *testing.T) {
	for _, c := range []struct {
		p    Proto
		name string
	}{{ProtoTCP, "tcp"}, {ProtoUDP, "udp"}, {ProtoICMP, "icmp"}, {ProtoICMPv6, "icmpv6"}, {ProtoESP, "esp"}, {ProtoGRE, "gre"}, {132, "132"}} {
		if got := c.p.String(); got != c.name {
			t.Errorf("Proto(%d).String() = %q, want %q", uint8(c.p), got, c.name)
		}
	}
	for i := range 256 {
		p := Proto(i)
		if got, err := ParseProto(p.String()); err != nil || got != p {
			t.Errorf("ParseProto(%q) = %d, %v; want %d", p.String(), got, err, i)
		}
	}
	if got, err := ParseProto("TCP"); err != nil || got != ProtoTCP {
		t.Errorf("ParseProto(TCP) = %d, %v", got, err)
	}
	if _, err := ParseProto("sctp"); err == nil {
		t.Error("ParseProto(sctp) accepted")
	}
}

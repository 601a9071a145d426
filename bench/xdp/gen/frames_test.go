package gen

import (
	"bytes"
	"encoding/binary"
	"net"
	"net/netip"
	"testing"

	"xlb/bench/xdp/sink"
	"xlb/dataplane/craft"
	"xlb/dataplane/packet"
)

func spec(frameLen int) FlowSpec {
	return FlowSpec{
		SrcMAC: net.HardwareAddr{2, 0x77, 0, 0, 0, 1}, DstMAC: net.HardwareAddr{2, 0x77, 0, 0, 0, 2},
		Clients: netip.MustParsePrefix("10.78.0.0/16"), Sources: 64, Ports: 256,
		Dst: netip.MustParseAddr("10.79.0.10"), DstPort: sink.PortLo, FrameLen: frameLen,
	}
}

// TestFramesParse: every frame parses with the dataplane's parser as IPv4
// UDP to the destination, with a valid IPv4 header checksum, no UDP
// checksum, the timestamp layout, and a 5-tuple no other frame has.
func TestFramesParse(t *testing.T) {
	for _, size := range []int{60, 1496} {
		sp := spec(size)
		f, err := Build(sp)
		if err != nil {
			t.Fatal(err)
		}
		if f.N() != 64*256 || f.Len() != size {
			t.Fatalf("%d flows of %d bytes", f.N(), f.Len())
		}
		type tuple struct {
			src, dst [16]byte
			sp, dp   uint16
			proto    packet.Proto
		}
		seen := make(map[tuple]int, f.N())
		var p packet.Parsed
		buf := make([]byte, 2048)
		for i := range f.N() {
			f.Write(buf, i, int64(1000+i), 9)
			fr := buf[:f.Len()]
			if err := packet.Parse(fr, &p); err != nil {
				t.Fatalf("size %d frame %d: %v", size, i, err)
			}
			if p.IPVersion != 4 || p.Proto != packet.ProtoUDP || p.DstAddr() != sp.Dst || p.DstPort != sp.DstPort ||
				p.IPLen != size-14 || p.Frag != packet.FragNone || !sp.Clients.Contains(p.SrcAddr()) {
				t.Fatalf("size %d frame %d parsed as %+v", size, i, p)
			}
			if packet.Checksum(fr[14:34], 0) != 0 {
				t.Fatalf("frame %d: bad IPv4 header checksum", i)
			}
			if binary.BigEndian.Uint16(fr[40:]) != 0 {
				t.Fatalf("frame %d: UDP checksum set", i)
			}
			if !bytes.Equal(fr[0:6], sp.DstMAC) || !bytes.Equal(fr[6:12], sp.SrcMAC) {
				t.Fatalf("frame %d: MACs %x", i, fr[:12])
			}
			if binary.LittleEndian.Uint64(fr[sink.TSOff:]) != uint64(1000+i) ||
				binary.LittleEndian.Uint32(fr[sink.MagicOff:]) != sink.Magic || binary.LittleEndian.Uint32(fr[sink.RunOff:]) != 9 {
				t.Fatalf("frame %d: payload layout %x", i, fr[sink.PayloadOff:sink.MinFrame])
			}
			k := tuple{p.Src, p.Dst, p.SrcPort, p.DstPort, p.Proto}
			if j, dup := seen[k]; dup {
				t.Fatalf("frames %d and %d share a 5-tuple", j, i)
			}
			seen[k] = i
		}
	}
}

// TestFramesMatchCraft: a frame is what craft.Build makes for its flow,
// but for the UDP checksum and the payload's timestamp layout.
func TestFramesMatchCraft(t *testing.T) {
	sp := spec(60)
	f, err := Build(sp)
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range []int{0, 1, 255, 256, 4097, f.N() - 1} {
		src, port := sp.flow(i)
		want, err := craft.Build(&craft.Packet{Src: src, Dst: sp.Dst, Proto: packet.ProtoUDP, SrcPort: port, DstPort: sp.DstPort,
			PayloadLen: 60 - 42, SrcMAC: sp.SrcMAC, DstMAC: sp.DstMAC})
		if err != nil {
			t.Fatal(err)
		}
		got := f.Frame(i, 0, 0)
		binary.BigEndian.PutUint16(want[40:], 0)
		copy(want[sink.PayloadOff:sink.MinFrame], got[sink.PayloadOff:sink.MinFrame])
		if !bytes.Equal(got, want) {
			t.Fatalf("flow %d (%s:%d):\n got %x\nwant %x", i, src, port, got, want)
		}
	}
}

func TestBuildRefuses(t *testing.T) {
	for name, mod := range map[string]func(*FlowSpec){
		"short frame":      func(s *FlowSpec) { s.FrameLen = sink.MinFrame - 1 },
		"jumbo frame":      func(s *FlowSpec) { s.FrameLen = 1515 },
		"no sources":       func(s *FlowSpec) { s.Sources = 0 },
		"too many ports":   func(s *FlowSpec) { s.Ports = 65000 },
		"sources overflow": func(s *FlowSpec) { s.Clients = netip.MustParsePrefix("10.78.0.0/28") },
		"ipv6":             func(s *FlowSpec) { s.Dst = netip.MustParseAddr("fd00::1") },
	} {
		sp := spec(60)
		mod(&sp)
		if _, err := Build(sp); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// TestWriteAllocs: writing a frame, the generator's per-frame work,
// allocates nothing.
func TestWriteAllocs(t *testing.T) {
	f, err := Build(spec(1496))
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 2048)
	i := 0
	if n := testing.AllocsPerRun(1000, func() { f.Write(buf, i%f.N(), int64(i), 1); i++ }); n != 0 {
		t.Fatalf("Write allocates %v times per frame", n)
	}
}

package dataplane_test

// X1, the balancer's own part of path-MTU discovery: a packet that the
// IPIP or GUE encapsulation makes longer than the MTU is answered with
// ICMP fragmentation needed (IPv4) or packet too big (IPv6) carrying the
// room left, so the client's kernel shrinks what it sends.

import (
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

	"xlb/conntrack"
	"xlb/controlplane"
	"xlb/controlplane/cptest"
	"xlb/controlplane/sim"
	"xlb/dataplane"
	"xlb/dataplane/craft"
	"xlb/dataplane/packet"
)

// tooBigRig is an engine and decider over testdata/toobig.toml (TCP 80 on
// 192.0.2.10 by IPIP to an IPv4 backend, 81 by GUE to an IPv6 one; TCP 80
// on 2001:db8:ffff::10 by GUE over IPv6) with an MTU of 1500, as `xlb run`
// sets it from the interface.
func tooBigRig(t *testing.T) *dataplane.Decider {
	t.Helper()
	ct, err := conntrack.New(1024)
	if err != nil {
		t.Fatal(err)
	}
	eng := dataplane.NewEngine(ct)
	local := sim.SimLocal()
	local.MTU = 1500
	if _, err := controlplane.New(cptest.Config(t, cptest.Testdata(t, "toobig.toml")), eng,
		controlplane.Options{Local: local, InitialHealthy: true, InitialWeight: 1000}, 0); err != nil {
		t.Fatal(err)
	}
	return eng.NewDecider()
}

// tooBigPacket is a TCP segment from the client to dst:port whose IP
// packet is ipLen bytes long.
func tooBigPacket(t *testing.T, dst string, port uint16, ipLen int, df bool) []byte {
	t.Helper()
	p := craft.Packet{Src: netip.MustParseAddr("198.51.100.7"), Dst: netip.MustParseAddr(dst), Proto: packet.ProtoTCP,
		SrcPort: 40000, DstPort: port, DF: df, PayloadLen: ipLen - 20 - 20}
	if p.Dst.Is6() {
		p.Src = netip.MustParseAddr("2001:db8:1::7")
		p.PayloadLen = ipLen - 40 - 20
	}
	f, err := craft.Build(&p)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func decideFrame(dc *dataplane.Decider, frame []byte, now int64) (dataplane.Decision, dataplane.Frame) {
	buf := make([]byte, dataplane.Headroom+len(frame)+dataplane.Headroom) // room to grow, as a umem chunk has
	copy(buf[dataplane.Headroom:], frame)
	f := dataplane.Frame{Buf: buf, Off: dataplane.Headroom, Len: len(frame)}
	d := dc.Decide(&f, now)
	return d, f
}

// TestX1_TooBigAnsweredWithICMP: at MTU 1500, the largest packet each
// encapsulation still carries is forwarded; one byte more is dropped as
// too-big and its frame goes back out as the ICMP error to the client —
// from the VIP it sent to, to its MAC, with the MTU left after the
// encapsulation (1480 for IPIP over IPv4, 1448 for GUE over IPv6) —
// counted in the drops and in TooBigSent. An IPv4 packet without DF gets
// no answer (its sender expects fragmentation).
func TestX1_TooBigAnsweredWithICMP(t *testing.T) {
	dc := tooBigRig(t)
	for _, tc := range []struct {
		name string
		dst  string
		port uint16
		room int // the largest inner packet at MTU 1500
	}{
		{"IPIP over IPv4", "192.0.2.10", 80, 1480},
		{"GUE over IPv6, IPv4 inside", "192.0.2.10", 81, 1448},
		{"GUE over IPv6", "2001:db8:ffff::10", 80, 1448},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if d, f := decideFrame(dc, tooBigPacket(t, tc.dst, tc.port, tc.room, true), 1); d.Verdict != dataplane.VerdictForward || d.TooBigSent || f.Verdict != dataplane.VerdictForward {
				t.Fatalf("%d bytes: %v %v (sent too-big %v), want forwarded", tc.room, d.Verdict, d.Reason, d.TooBigSent)
			}
			before := dc.Stats().TooBigSent.Load()
			drops := dc.Stats().Drops[dataplane.ReasonTooBig].Load()
			d, f := decideFrame(dc, tooBigPacket(t, tc.dst, tc.port, tc.room+1, true), 1)
			if d.Verdict != dataplane.VerdictDrop || d.Reason != dataplane.ReasonTooBig || !d.TooBigSent {
				t.Fatalf("%d bytes: %v %v (sent %v), want a too-big drop answered", tc.room+1, d.Verdict, d.Reason, d.TooBigSent)
			}
			if f.Verdict != dataplane.VerdictForward || f.Reason != dataplane.ReasonTooBig {
				t.Errorf("frame verdict %v %v, want forward (the ICMP error goes out)", f.Verdict, f.Reason)
			}
			if got := dc.Stats().TooBigSent.Load() - before; got != 1 {
				t.Errorf("TooBigSent grew by %d, want 1", got)
			}
			if got := dc.Stats().Drops[dataplane.ReasonTooBig].Load() - drops; got != 1 {
				t.Errorf("too-big drops grew by %d, want 1", got)
			}
			out := gopacket.NewPacket(f.Data(), layers.LayerTypeEthernet, gopacket.Default)
			eth, _ := out.Layer(layers.LayerTypeEthernet).(*layers.Ethernet)
			if eth == nil || eth.DstMAC.String() != craft.ClientMAC.String() || eth.SrcMAC.String() != craft.LocalMAC.String() {
				t.Fatalf("not back to the client's MAC from ours: %v", out)
			}
			var src, dst []byte
			var mtu int
			if v4, ok := out.Layer(layers.LayerTypeIPv4).(*layers.IPv4); ok {
				icmp, _ := out.Layer(layers.LayerTypeICMPv4).(*layers.ICMPv4)
				if icmp == nil || icmp.TypeCode != layers.CreateICMPv4TypeCode(3, 4) {
					t.Fatalf("not fragmentation needed: %v", out)
				}
				src, dst, mtu = v4.SrcIP, v4.DstIP, int(binary.BigEndian.Uint16(f.Data()[14+20+6:]))
			} else if v6, ok := out.Layer(layers.LayerTypeIPv6).(*layers.IPv6); ok {
				icmp, _ := out.Layer(layers.LayerTypeICMPv6).(*layers.ICMPv6)
				if icmp == nil || icmp.TypeCode.Type() != 2 {
					t.Fatalf("not packet too big: %v", out)
				}
				src, dst, mtu = v6.SrcIP, v6.DstIP, int(binary.BigEndian.Uint32(f.Data()[14+40+4:]))
			}
			client := netip.MustParseAddr("198.51.100.7")
			if netip.MustParseAddr(tc.dst).Is6() {
				client = netip.MustParseAddr("2001:db8:1::7")
			}
			if addrOf(src) != netip.MustParseAddr(tc.dst) || addrOf(dst) != client {
				t.Errorf("ICMP from %v to %v, want from the VIP %s to the client", addrOf(src), addrOf(dst), tc.dst)
			}
			if mtu != tc.room {
				t.Errorf("MTU %d in the error, want %d", mtu, tc.room)
			}
		})
	}
	t.Run("no DF", func(t *testing.T) {
		d, f := decideFrame(dc, tooBigPacket(t, "192.0.2.10", 80, 1481, false), 1)
		if d.Verdict != dataplane.VerdictDrop || d.Reason != dataplane.ReasonTooBig || d.TooBigSent || f.Verdict != dataplane.VerdictDrop {
			t.Errorf("%v %v (sent %v), frame %v: want a plain too-big drop", d.Verdict, d.Reason, d.TooBigSent, f.Verdict)
		}
	})
}

// TestX1_TooBigRateLimited: a burst of oversized packets gets at most 50
// ICMP errors per decider, then one per millisecond of the engine's
// clock: the balancer is no reflector. The rest are plain drops.
func TestX1_TooBigRateLimited(t *testing.T) {
	dc := tooBigRig(t)
	big := tooBigPacket(t, "192.0.2.10", 80, 1500, true)
	sent := 0
	for range 60 {
		if d, _ := decideFrame(dc, big, 1000); d.TooBigSent {
			sent++
		}
	}
	if sent != 50 {
		t.Errorf("%d errors for 60 packets in one millisecond, want 50", sent)
	}
	if d, _ := decideFrame(dc, big, 1001); !d.TooBigSent {
		t.Error("no error a millisecond later")
	}
	if d, _ := decideFrame(dc, big, 1001); d.TooBigSent {
		t.Error("a second error in the same millisecond after the burst")
	}
	if got := dc.Stats().Drops[dataplane.ReasonTooBig].Load(); got != 62 {
		t.Errorf("too-big drops %d, want all 62", got)
	}
}

func addrOf(b []byte) netip.Addr {
	a, _ := netip.AddrFromSlice(b)
	return a.Unmap()
}

// TestX1_TooBigNoAllocs: answering a too-big packet allocates nothing (the
// hot path's rule).
func TestX1_TooBigNoAllocs(t *testing.T) {
	dc := tooBigRig(t)
	big := tooBigPacket(t, "2001:db8:ffff::10", 80, 1500, true)
	buf := make([]byte, dataplane.Headroom+len(big)+dataplane.Headroom)
	frames := make([]dataplane.Frame, 1)
	now := int64(0)
	allocs := testing.AllocsPerRun(100, func() {
		copy(buf[dataplane.Headroom:], big)
		frames[0] = dataplane.Frame{Buf: buf, Off: dataplane.Headroom, Len: len(big)}
		now += 10 // a token per run
		dc.Process(frames, now)
	})
	if allocs != 0 {
		t.Errorf("%v allocations per too-big packet, want 0", allocs)
	}
	if dc.Stats().TooBigSent.Load() < 100 {
		t.Errorf("TooBigSent %d after 101 runs: the path measured was not the answer", dc.Stats().TooBigSent.Load())
	}
}

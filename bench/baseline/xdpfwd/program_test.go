package xdpfwd

import (
	"bytes"
	"errors"
	"net"
	"net/netip"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

	"xlb/bench/baseline/internal/bltest"
	"xlb/dataplane/craft"
	"xlb/dataplane/packet"

	"xlb/internal/nettest"
)

var (
	ifMAC    = net.HardwareAddr{0x02, 0xb1, 0, 0, 0, 0x01}
	other4   = netip.MustParseAddr("10.201.0.99")
	client4  = netip.MustParseAddr("10.202.0.2")
	client6  = netip.MustParseAddr("fd00:202::2")
	backends = bltest.Backends
)

func loadTest(tb testing.TB, macs []net.HardwareAddr) *objects {
	tb.Helper()
	nettest.RequireRoot(tb)
	o, err := load()
	if errors.Is(err, ebpf.ErrNotSupported) {
		tb.Skipf("kernel lacks BPF/XDP support: %v", err)
	}
	if err != nil {
		tb.Fatalf("load: %v", err)
	}
	tb.Cleanup(func() {
		if err := o.close(); err != nil {
			tb.Errorf("close: %v", err)
		}
	})
	if err := o.setVIPs([]netip.Addr{bltest.VIP4, bltest.VIP6}); err != nil {
		tb.Fatal(err)
	}
	if err := o.setBackends(macs, ifMAC); err != nil {
		tb.Fatal(err)
	}
	return o
}

// run runs the program once on frame (BPF_PROG_TEST_RUN).
func run(tb testing.TB, o *objects, frame []byte) (uint32, []byte) {
	tb.Helper()
	opts := &ebpf.RunOptions{Data: frame, DataOut: make([]byte, len(frame)+512)}
	ret, err := o.prog.Run(opts)
	if err != nil {
		tb.Fatalf("Program.Run: %v", err)
	}
	return ret, opts.DataOut
}

func build(tb testing.TB, p craft.Packet) []byte {
	tb.Helper()
	p.SrcMAC, p.DstMAC = bltest.PMAC, ifMAC
	f, err := craft.Build(&p)
	if err != nil {
		tb.Fatal(err)
	}
	return f
}

// rewritten is frame as the program must send it to backend i.
func rewritten(frame []byte, i int) []byte {
	out := append([]byte(nil), frame...)
	copy(out[0:6], backends[i])
	copy(out[6:12], ifMAC)
	return out
}

// withIPv4Options returns an IPv4 UDP frame whose header carries 4 bytes of
// options (IHL 6), so the ports sit 24 bytes into the IP header.
func withIPv4Options(tb testing.TB, sport uint16) []byte {
	tb.Helper()
	buf := gopacket.NewSerializeBuffer()
	ip := &layers.IPv4{Version: 4, TTL: 64, Protocol: layers.IPProtocolUDP, SrcIP: client4.AsSlice(), DstIP: bltest.VIP4.AsSlice(),
		Options: []layers.IPv4Option{{OptionType: 1}, {OptionType: 1}, {OptionType: 1}, {OptionType: 0}}}
	udp := &layers.UDP{SrcPort: layers.UDPPort(sport), DstPort: 53}
	if err := udp.SetNetworkLayerForChecksum(ip); err != nil {
		tb.Fatal(err)
	}
	err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true},
		&layers.Ethernet{SrcMAC: bltest.PMAC, DstMAC: ifMAC, EthernetType: layers.EthernetTypeIPv4}, ip, udp, gopacket.Payload(make([]byte, 20)))
	if err != nil {
		tb.Fatal(err)
	}
	f := buf.Bytes()
	if f[14]&0xf != 6 {
		tb.Fatalf("IHL %d, want 6", f[14]&0xf)
	}
	return f
}

// TestProgramGolden: frames in, verdict and frame out, one row per path.
func TestProgramGolden(t *testing.T) {
	o := loadTest(t, backends)
	udp4 := build(t, craft.Packet{Src: client4, Dst: bltest.VIP4, Proto: packet.ProtoUDP, SrcPort: 40000, DstPort: 53})
	arp := append(append(append([]byte(nil), ifMAC...), bltest.PMAC...), 0x08, 0x06)
	arp = append(arp, make([]byte, 28)...)
	rows := []struct {
		name    string
		frame   []byte
		verdict uint32
		stat    int
	}{
		{"udp4 to VIP", udp4, xdpTX, statTX},
		{"tcp4 to VIP", build(t, craft.Packet{Src: client4, Dst: bltest.VIP4, Proto: packet.ProtoTCP, SrcPort: 40001, DstPort: 80, Flags: "S"}), xdpTX, statTX},
		{"udp4 with IP options", withIPv4Options(t, 40002), xdpTX, statTX},
		{"udp6 to VIP", build(t, craft.Packet{Src: client6, Dst: bltest.VIP6, Proto: packet.ProtoUDP, SrcPort: 40003, DstPort: 53}), xdpTX, statTX},
		{"tcp6 to VIP, 1500 bytes", build(t, craft.Packet{Src: client6, Dst: bltest.VIP6, Proto: packet.ProtoTCP, SrcPort: 40004, DstPort: 80, PayloadLen: 1500 - 14 - 40 - 20}), xdpTX, statTX},
		{"udp4 first fragment", build(t, craft.Packet{Src: client4, Dst: bltest.VIP4, Proto: packet.ProtoUDP, SrcPort: 40005, DstPort: 53, Frag: craft.FragFirst}), xdpTX, statTX},
		{"udp4 last fragment", build(t, craft.Packet{Src: client4, Dst: bltest.VIP4, Proto: packet.ProtoUDP, SrcPort: 40005, DstPort: 53, Frag: craft.FragLast}), xdpTX, statTX},
		{"udp4 to another address", build(t, craft.Packet{Src: client4, Dst: other4, Proto: packet.ProtoUDP, SrcPort: 40006, DstPort: 53}), xdpPass, statPassNotVIP},
		{"udp4 from the VIP, not to it", build(t, craft.Packet{Src: bltest.VIP4, Dst: other4, Proto: packet.ProtoUDP, SrcPort: 53, DstPort: 53}), xdpPass, statPassNotVIP},
		{"IPv6 to the VIP's mapped form", build(t, craft.Packet{Src: client6, Dst: netip.AddrFrom16(bltest.VIP4.As16()), Proto: packet.ProtoUDP, SrcPort: 1, DstPort: 53}), xdpPass, statPassNotVIP},
		{"ARP", arp, xdpPass, statPassNotVIP},
		{"ICMP to VIP", build(t, craft.Packet{Src: client4, Dst: bltest.VIP4, Proto: packet.ProtoICMP, ICMPType: 8}), xdpPass, statPassNotL4},
		{"ICMPv6 to VIP", build(t, craft.Packet{Src: client6, Dst: bltest.VIP6, Proto: packet.ProtoICMPv6, ICMPType: 128}), xdpPass, statPassNotL4},
		{"IPv4 header cut", udp4[:14+12], xdpPass, statPassShort},
		{"IPv4 ports cut", udp4[:14+20+2], xdpPass, statPassShort},
		{"IPv4 Ethernet header only", udp4[:14], xdpPass, statPassShort},
	}
	want := make([]uint64, numStats)
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			got, out := run(t, o, r.frame)
			if got != r.verdict {
				t.Fatalf("verdict %d, want %d", got, r.verdict)
			}
			exp := r.frame
			if r.verdict == xdpTX {
				i, ok := BackendIndex(r.frame, len(backends))
				if !ok {
					t.Fatal("BackendIndex refuses a frame the program forwards")
				}
				exp = rewritten(r.frame, i)
			}
			if !bytes.Equal(out, exp) {
				t.Errorf("frame out\n% x\nwant\n% x", out, exp)
			}
		})
		want[r.stat]++
	}
	s, err := o.stats()
	if err != nil {
		t.Fatal(err)
	}
	got := []uint64{s.TX, s.PassNotVIP, s.PassNotL4, s.PassShort, s.PassNoBackend}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("counters %+v, want TX, not VIP, not L4, short, no backend = %v", s, want)
			break
		}
	}
	// All fragments of a datagram go to one backend (ports are not read).
	i1, _ := BackendIndex(rows[5].frame, len(backends))
	i2, _ := BackendIndex(rows[6].frame, len(backends))
	if i1 != i2 {
		t.Errorf("fragments of one datagram to backends %d and %d", i1, i2)
	}
}

// TestProgramSpreadsFlows: over many flows the program's choice equals
// BackendIndex, is stable per flow, and spreads evenly over the backends.
func TestProgramSpreadsFlows(t *testing.T) {
	for _, n := range []int{1, 2, 3, 7} {
		macs := make([]net.HardwareAddr, n)
		for i := range macs {
			macs[i] = net.HardwareAddr{0x02, 0xb1, 0xbe, 0, 1, byte(i)}
		}
		o := loadTest(t, macs)
		const flows = 2100
		counts := make([]int, n)
		for f := range flows {
			src := netip.AddrFrom4([4]byte{10, 202, byte(f >> 8), byte(f)})
			frame := build(t, craft.Packet{Src: src, Dst: bltest.VIP4, Proto: packet.ProtoUDP, SrcPort: uint16(1024 + f*7), DstPort: 53})
			if f%2 == 1 {
				frame = build(t, craft.Packet{Src: client6, Dst: bltest.VIP6, Proto: packet.ProtoTCP, SrcPort: uint16(1024 + f), DstPort: 443})
			}
			verdict, out := run(t, o, frame)
			if verdict != xdpTX {
				t.Fatalf("n=%d flow %d: verdict %d", n, f, verdict)
			}
			i := bltest.MACIndex(macs, out[:6])
			want, _ := BackendIndex(frame, n)
			if i != want {
				t.Fatalf("n=%d flow %d: backend %d, BackendIndex says %d", n, f, i, want)
			}
			if _, again := run(t, o, frame); !bytes.Equal(again[:6], out[:6]) {
				t.Fatalf("n=%d flow %d: the same flow went to two backends", n, f)
			}
			counts[i]++
		}
		for i, c := range counts {
			// Within 25% of an even share: a broken hash (constant, or
			// one that ignores ports or addresses) fails by far.
			if share := float64(c) * float64(n) / flows; share < 0.75 || share > 1.25 {
				t.Errorf("n=%d: backend %d got %d of %d flows (%v)", n, i, c, flows, counts)
			}
		}
	}
}

// TestProgramNoBackends: with the count at 0 every VIP frame is passed,
// untouched.
func TestProgramNoBackends(t *testing.T) {
	o := loadTest(t, nil)
	f := build(t, craft.Packet{Src: client4, Dst: bltest.VIP4, Proto: packet.ProtoUDP, SrcPort: 1, DstPort: 53})
	verdict, out := run(t, o, f)
	if verdict != xdpPass || !bytes.Equal(out, f) {
		t.Fatalf("verdict %d, frame changed %v; want XDP_PASS, unchanged", verdict, !bytes.Equal(out, f))
	}
	if s, _ := o.stats(); s.PassNoBackend != 1 {
		t.Fatalf("counters %+v, want one PassNoBackend", s)
	}
}

// BenchmarkProgram is the program's cost per frame inside the kernel
// (BPF_PROG_TEST_RUN with repeat), for 64- and 1500-byte UDP frames.
func BenchmarkProgram(b *testing.B) {
	o := loadTest(b, backends)
	for _, size := range []int{64, 1500} {
		b.Run(map[int]string{64: "64B", 1500: "1500B"}[size], func(b *testing.B) {
			f := build(b, craft.Packet{Src: client4, Dst: bltest.VIP4, Proto: packet.ProtoUDP, SrcPort: 1, DstPort: 53, PayloadLen: size - 14 - 20 - 8})
			ret, per, err := o.prog.Benchmark(f, b.N, nil)
			if err != nil {
				b.Fatal(err)
			}
			if ret != xdpTX {
				b.Fatalf("verdict %d", ret)
			}
			b.ReportMetric(float64(per.Nanoseconds()), "ns/frame")
		})
	}
}

func netipHW(b []byte) string { return net.HardwareAddr(b).String() }

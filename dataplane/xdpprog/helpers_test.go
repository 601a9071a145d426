package xdpprog

import (
	"errors"
	"net"
	"net/netip"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
)

// Addresses used only inside frames and test namespaces.
var (
	vip4    = netip.MustParseAddr("10.200.0.1")
	vip6    = netip.MustParseAddr("fd00:200::1")
	other4  = netip.MustParseAddr("10.200.0.2")
	other6  = netip.MustParseAddr("fd00:200::2")
	client4 = netip.MustParseAddr("10.200.1.2")
	client6 = netip.MustParseAddr("fd00:200:1::2")
	macIn   = net.HardwareAddr{0x02, 0, 0, 0, 0, 1}
	macPeer = net.HardwareAddr{0x02, 0, 0, 0, 0, 2}
)

func loadObjects(tb testing.TB, queues int) *Objects {
	tb.Helper()
	o, err := Load(queues)
	if errors.Is(err, ebpf.ErrNotSupported) {
		tb.Skipf("kernel lacks BPF/XDP support: %v", err)
	}
	if err != nil {
		tb.Fatalf("Load: %v", err)
	}
	tb.Cleanup(func() {
		if err := o.Close(); err != nil {
			tb.Errorf("Close: %v", err)
		}
	})
	return o
}

func setVIPs(tb testing.TB, o *Objects, addrs ...netip.Addr) {
	tb.Helper()
	if err := o.SetVIPs(addrs); err != nil {
		tb.Fatalf("SetVIPs: %v", err)
	}
}

// serialize builds a frame from layers, fixing lengths and checksums.
func serialize(tb testing.TB, ls ...gopacket.SerializableLayer) []byte {
	tb.Helper()
	buf := gopacket.NewSerializeBuffer()
	opts := gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}
	if err := gopacket.SerializeLayers(buf, opts, ls...); err != nil {
		tb.Fatalf("serializing: %v", err)
	}
	return buf.Bytes()
}

// l2 returns the Ethernet header and VLAN tags (outermost first) for a
// payload of EtherType et.
func l2(tags []layers.EthernetType, et layers.EthernetType) []gopacket.SerializableLayer {
	types := append(append([]layers.EthernetType{}, tags...), et)
	ls := []gopacket.SerializableLayer{&layers.Ethernet{SrcMAC: macPeer, DstMAC: macIn, EthernetType: types[0]}}
	for i := range tags {
		ls = append(ls, &layers.Dot1Q{VLANIdentifier: uint16(10 + i), Type: types[i+1]})
	}
	return ls
}

// v4 builds an IPv4 frame to dst carrying proto (TCP, UDP, ICMP or, as raw
// bytes, anything else) with IP options opts.
func v4(tb testing.TB, tags []layers.EthernetType, dst netip.Addr, proto layers.IPProtocol, opts ...layers.IPv4Option) []byte {
	tb.Helper()
	ip := &layers.IPv4{Version: 4, TTL: 64, Protocol: proto, SrcIP: client4.AsSlice(), DstIP: dst.AsSlice(), Options: opts}
	ls := append(l2(tags, layers.EthernetTypeIPv4), ip)
	switch proto {
	case layers.IPProtocolTCP:
		tcp := &layers.TCP{SrcPort: 40000, DstPort: 80, SYN: true, Window: 1000}
		tcp.SetNetworkLayerForChecksum(ip)
		ls = append(ls, tcp)
	case layers.IPProtocolUDP:
		udp := &layers.UDP{SrcPort: 40000, DstPort: 53}
		udp.SetNetworkLayerForChecksum(ip)
		ls = append(ls, udp, gopacket.Payload("query"))
	case layers.IPProtocolICMPv4:
		ls = append(ls, &layers.ICMPv4{TypeCode: layers.CreateICMPv4TypeCode(layers.ICMPv4TypeEchoRequest, 0), Id: 1, Seq: 1})
	default:
		ls = append(ls, gopacket.Payload(make([]byte, 24)))
	}
	return serialize(tb, ls...)
}

// v6 builds an IPv6 frame to dst whose payload starts with a header of type
// next: TCP and UDP are built by gopacket, anything else is raw (extension
// headers, ICMPv6, ESP).
func v6(tb testing.TB, tags []layers.EthernetType, dst netip.Addr, next layers.IPProtocol, raw []byte) []byte {
	tb.Helper()
	ip := &layers.IPv6{Version: 6, HopLimit: 255, NextHeader: next, SrcIP: client6.AsSlice(), DstIP: dst.AsSlice()}
	ls := append(l2(tags, layers.EthernetTypeIPv6), ip)
	switch next {
	case layers.IPProtocolTCP:
		tcp := &layers.TCP{SrcPort: 40000, DstPort: 80, SYN: true, Window: 1000}
		tcp.SetNetworkLayerForChecksum(ip)
		ls = append(ls, tcp)
	case layers.IPProtocolUDP:
		udp := &layers.UDP{SrcPort: 40000, DstPort: 53}
		udp.SetNetworkLayerForChecksum(ip)
		ls = append(ls, udp, gopacket.Payload("query"))
	default:
		ls = append(ls, gopacket.Payload(raw))
	}
	return serialize(tb, ls...)
}

// icmp6 is an ICMPv6 message of type typ with a 20-byte body (enough for
// an NS/NA target address). The checksum is left 0: the program ignores it.
func icmp6(typ uint8) []byte {
	b := make([]byte, 24)
	b[0] = typ
	return b
}

// ext prepends an extension header of type-independent form (next header,
// length in 8-octet units beyond the first, zero padding) to rest.
func ext(next layers.IPProtocol, units int, rest []byte) []byte {
	h := make([]byte, (units+1)*8)
	h[0], h[1] = byte(next), byte(units)
	return append(h, rest...)
}

// frag prepends a Fragment header with the given offset (in 8-octet units).
func frag(next layers.IPProtocol, offset uint16, more bool, rest []byte) []byte {
	h := make([]byte, 8)
	h[0] = byte(next)
	fo := offset << 3
	if more {
		fo |= 1
	}
	h[2], h[3] = byte(fo>>8), byte(fo)
	h[7] = 42 // identification
	return append(h, rest...)
}

// ah prepends an AH header of (units+2)*4 bytes.
func ah(next layers.IPProtocol, units int, rest []byte) []byte {
	h := make([]byte, (units+2)*4)
	h[0], h[1] = byte(next), byte(units)
	return append(h, rest...)
}

func arpRequest(tb testing.TB, target netip.Addr) []byte {
	tb.Helper()
	return serialize(tb,
		&layers.Ethernet{SrcMAC: macPeer, DstMAC: layers.EthernetBroadcast, EthernetType: layers.EthernetTypeARP},
		&layers.ARP{AddrType: layers.LinkTypeEthernet, Protocol: layers.EthernetTypeIPv4, HwAddressSize: 6, ProtAddressSize: 4,
			Operation: layers.ARPRequest, SourceHwAddress: macPeer, SourceProtAddress: client4.AsSlice(),
			DstHwAddress: make([]byte, 6), DstProtAddress: target.AsSlice()})
}

// statsArray indexes Stats by the program's counter numbers.
func statsArray(s Stats) [numStats]uint64 {
	var a [numStats]uint64
	a[statRedirected] = s.Redirected
	a[statPassedNoSocket] = s.PassedNoSocket
	a[statPassedNotVIP] = s.PassedNotVIP
	a[statPassedNDP] = s.PassedNDP
	a[statPassedShort] = s.PassedShort
	a[statPassedMalformedVIP] = s.PassedMalformedVIP
	a[statPassedVLANOffload] = s.PassedVLANOffload
	a[statRetagged] = s.Retagged
	return a
}

var statNames = [numStats]string{"redirected", "passed-no-socket", "passed-not-vip", "passed-ndp", "passed-short", "passed-malformed-vip", "passed-vlan-offload", "retagged"}

func readStats(tb testing.TB, o *Objects) [numStats]uint64 {
	tb.Helper()
	s, err := o.Stats()
	if err != nil {
		tb.Fatalf("Stats: %v", err)
	}
	return statsArray(s)
}

// run runs the program once on frame (as received on rx queue 0 of the
// test-run device) and checks the verdict and that exactly the counter
// stat moved.
func run(tb testing.TB, o *Objects, frame []byte, wantVerdict uint32, stat int) {
	tb.Helper()
	before := readStats(tb, o)
	got, err := o.Program.Run(&ebpf.RunOptions{Data: frame})
	if err != nil {
		tb.Fatalf("Program.Run: %v", err)
	}
	if got != wantVerdict {
		tb.Errorf("verdict %s, want %s", verdictName(got), verdictName(wantVerdict))
	}
	checkDelta(tb, before, readStats(tb, o), stat)
}

// checkDelta checks that only counter stat moved between before and after
// (by at least one: a test run interrupted by a signal is run again).
func checkDelta(tb testing.TB, before, after [numStats]uint64, stat int) {
	tb.Helper()
	for i := range before {
		d := after[i] - before[i]
		switch {
		case i == stat && d == 0:
			tb.Errorf("counter %s did not move", statNames[i])
		case i != stat && d != 0:
			tb.Errorf("counter %s moved by %d, want only %s", statNames[i], d, statNames[stat])
		}
	}
}

func verdictName(v uint32) string {
	names := []string{"XDP_ABORTED", "XDP_DROP", "XDP_PASS", "XDP_TX", "XDP_REDIRECT"}
	if int(v) < len(names) {
		return names[v]
	}
	return "XDP_?"
}

package xdpprog

import (
	"net/netip"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/google/gopacket/layers"

	"xlb/dataplane/packet"
)

// verdictRow is one golden case: a frame and the counter its verdict lands
// in. statPassedNoSocket marks a frame for the workers: XDP_PASS while no
// socket is registered for the queue, XDP_REDIRECT once one is.
type verdictRow struct {
	name  string
	frame []byte
	stat  int
}

func verdictRows(tb testing.TB) []verdictRow {
	tb.Helper()
	var (
		dot1q = []layers.EthernetType{layers.EthernetTypeDot1Q}
		qinq  = []layers.EthernetType{layers.EthernetTypeQinQ, layers.EthernetTypeDot1Q}
		three = []layers.EthernetType{layers.EthernetTypeQinQ, layers.EthernetTypeDot1Q, layers.EthernetTypeDot1Q}
		ns    = icmp6(135)
		hbh   = layers.IPProtocolIPv6HopByHop
		dopts = layers.IPProtocolIPv6Destination
		rt    = layers.IPProtocolIPv6Routing
		fr    = layers.IPProtocolIPv6Fragment
		icmp  = layers.IPProtocolICMPv6
		ra    = layers.IPv4Option{OptionType: 148, OptionLength: 4, OptionData: []byte{0, 0}} // router alert
	)
	chainTo := func(n int, upper layers.IPProtocol, last []byte) []byte { // n destination options headers, then upper
		b, next := last, upper
		for range n {
			b, next = ext(next, 0, b), dopts
		}
		return b
	}
	chain := func(n int, last []byte) []byte { return chainTo(n, icmp, last) } // then ICMPv6
	toWorkers, notVIP, ndp, short, badVIP := statPassedNoSocket, statPassedNotVIP, statPassedNDP, statPassedShort, statPassedMalformedVIP

	rows := []verdictRow{
		// FR1: VIP traffic of every protocol goes to the workers.
		{"v4 TCP to VIP", v4(tb, nil, vip4, layers.IPProtocolTCP), toWorkers},
		{"v4 UDP to VIP", v4(tb, nil, vip4, layers.IPProtocolUDP), toWorkers},
		{"v4 ICMP echo to VIP", v4(tb, nil, vip4, layers.IPProtocolICMPv4), toWorkers},
		{"v4 ESP to VIP", v4(tb, nil, vip4, layers.IPProtocolESP), toWorkers},
		{"v4 GRE to VIP", v4(tb, nil, vip4, layers.IPProtocolGRE), toWorkers},
		{"v4 with options to VIP", v4(tb, nil, vip4, layers.IPProtocolTCP, ra), toWorkers},
		{"v4 padded to 60 bytes", pad(v4(tb, nil, vip4, layers.IPProtocolICMPv4), 60), toWorkers},
		{"v6 TCP to VIP", v6(tb, nil, vip6, layers.IPProtocolTCP, nil), toWorkers},
		{"v6 UDP to VIP", v6(tb, nil, vip6, layers.IPProtocolUDP, nil), toWorkers},
		{"v6 ESP to VIP", v6(tb, nil, vip6, layers.IPProtocolESP, make([]byte, 24)), toWorkers},
		{"v6 no next header to VIP", v6(tb, nil, vip6, layers.IPProtocolNoNextHeader, nil), toWorkers},
		// X1: ICMPv6 but NDP goes to the workers.
		{"v6 echo request to VIP", v6(tb, nil, vip6, icmp, icmp6(128)), toWorkers},
		{"v6 packet too big to VIP", v6(tb, nil, vip6, icmp, icmp6(2)), toWorkers},
		{"v6 destination unreachable to VIP", v6(tb, nil, vip6, icmp, icmp6(1)), toWorkers},
		{"v6 echo after hop-by-hop", v6(tb, nil, vip6, hbh, ext(icmp, 0, icmp6(128))), toWorkers},
		{"v6 TCP after routing and dstopts", v6(tb, nil, vip6, rt, ext(dopts, 1, ext(layers.IPProtocolTCP, 0, make([]byte, 20)))), toWorkers},
		{"v6 later fragment (no ICMPv6 header)", v6(tb, nil, vip6, fr, frag(icmp, 100, false, icmp6(135))), toWorkers},
		{"v6 echo after AH", v6(tb, nil, vip6, layers.IPProtocolAH, ah(icmp, 4, icmp6(128))), toWorkers},
		// VLAN tags, as many as the engine parses.
		{"802.1Q v4 to VIP", v4(tb, dot1q, vip4, layers.IPProtocolTCP), toWorkers},
		{"802.1Q v6 to VIP", v6(tb, dot1q, vip6, layers.IPProtocolUDP, nil), toWorkers},
		{"802.1ad+802.1Q v4 to VIP", v4(tb, qinq, vip4, layers.IPProtocolUDP), toWorkers},
		{"802.1ad+802.1Q v6 to VIP", v6(tb, qinq, vip6, layers.IPProtocolTCP, nil), toWorkers},

		// FR1: everything else belongs to the host.
		{"v4 TCP to host", v4(tb, nil, other4, layers.IPProtocolTCP), notVIP},
		{"v6 TCP to host", v6(tb, nil, other6, layers.IPProtocolTCP, nil), notVIP},
		{"v6 NS to host", v6(tb, nil, other6, icmp, ns), notVIP},
		{"802.1Q v4 to host", v4(tb, dot1q, other4, layers.IPProtocolTCP), notVIP},
		{"ARP request for VIP", arpRequest(tb, vip4), notVIP},
		{"v6 to ::ffff:VIP4 (not the IPv4 VIP)", v6(tb, nil, netip.AddrFrom16(vip4.As16()), layers.IPProtocolTCP, nil), notVIP},
		{"three VLAN tags (the engine parses two)", v4(tb, three, vip4, layers.IPProtocolTCP), notVIP},
		{"v4 to host, truncated past the fixed header", cut(v4(tb, nil, other4, layers.IPProtocolTCP), 14+20), notVIP},

		// X1: NDP to a VIP stays with the kernel.
		{"v6 RS to VIP", v6(tb, nil, vip6, icmp, icmp6(133)), ndp},
		{"v6 RA to VIP", v6(tb, nil, vip6, icmp, icmp6(134)), ndp},
		{"v6 NS to VIP", v6(tb, nil, vip6, icmp, ns), ndp},
		{"v6 NA to VIP", v6(tb, nil, vip6, icmp, icmp6(136)), ndp},
		{"v6 redirect to VIP", v6(tb, nil, vip6, icmp, icmp6(137)), ndp},
		{"802.1Q v6 NS to VIP", v6(tb, dot1q, vip6, icmp, ns), ndp},
		{"v6 NS after hop-by-hop", v6(tb, nil, vip6, hbh, ext(icmp, 0, ns)), ndp},
		{"v6 NS after hop-by-hop and dstopts", v6(tb, nil, vip6, hbh, ext(dopts, 2, ext(icmp, 1, ns))), ndp},
		{"v6 NS in a first fragment", v6(tb, nil, vip6, fr, frag(icmp, 0, true, ns)), ndp},
		{"v6 NS after AH", v6(tb, nil, vip6, layers.IPProtocolAH, ah(icmp, 1, ns)), ndp},
		{"v6 NS after MaxExtHeaders headers", v6(tb, nil, vip6, dopts, chain(MaxExtHeaders, ns)), ndp},

		// Truncated before the destination address: the kernel decides.
		// After it (a VIP frame): the kernel decides too, counted apart.
		{"Ethernet only", cut(v4(tb, nil, vip4, layers.IPProtocolTCP), 14), short},
		{"VLAN tag cut", cut(v4(tb, dot1q, vip4, layers.IPProtocolTCP), 16), short},
		{"v4 header cut", cut(v4(tb, nil, vip4, layers.IPProtocolTCP), 14+19), short},
		{"v6 header cut", cut(v6(tb, nil, vip6, layers.IPProtocolTCP, nil), 14+39), short},
		{"v4 VIP total length beyond the frame", cut(v4(tb, nil, vip4, layers.IPProtocolTCP), 14+30), badVIP},
		{"v4 VIP options cut", cut(v4(tb, nil, vip4, layers.IPProtocolTCP, ra), 14+22), badVIP},
		{"v4 VIP IHL < 5", poke(v4(tb, nil, vip4, layers.IPProtocolTCP), 14, 0x44), badVIP},
		{"v4 VIP total length < IHL", poke(poke(v4(tb, nil, vip4, layers.IPProtocolTCP), 16, 0), 17, 19), badVIP},
		{"v4 VIP, version 6 in header", poke(v4(tb, nil, vip4, layers.IPProtocolTCP), 14, 0x65), badVIP},
		{"v6 VIP payload beyond the frame", cut(v6(tb, nil, vip6, layers.IPProtocolTCP, nil), 14+40+10), badVIP},
		{"v6 VIP, version 4 in header", poke(v6(tb, nil, vip6, layers.IPProtocolTCP, nil), 14, 0x40), badVIP},
		{"v6 VIP hop-by-hop not first", v6(tb, nil, vip6, dopts, ext(hbh, 0, ext(icmp, 0, ns))), badVIP},
		{"v6 VIP ICMPv6 header cut", fixLen6(cut(v6(tb, nil, vip6, icmp, ns), 14+40+3)), badVIP},
		{"v6 VIP extension header cut", fixLen6(cut(v6(tb, nil, vip6, hbh, ext(icmp, 0, ns)), 14+40+1)), badVIP},
		{"v6 VIP extension header longer than the frame", fixLen6(cut(v6(tb, nil, vip6, hbh, ext(icmp, 3, ns)), 14+40+8)), badVIP},
		// A longer chain than the program follows: the workers' parser
		// follows as many headers and counts the frame as malformed, where
		// the kernel would drop it unnoticed.
		{"v6 VIP chain longer than MaxExtHeaders", v6(tb, nil, vip6, dopts, chain(MaxExtHeaders+1, ns)), toWorkers},
		{"v6 VIP TCP after 16 extension headers", v6(tb, nil, vip6, dopts, chainTo(16, layers.IPProtocolTCP, make([]byte, 20))), toWorkers},
	}
	return rows
}

func pad(b []byte, n int) []byte {
	for len(b) < n {
		b = append(b, 0)
	}
	return b
}

func cut(b []byte, n int) []byte { return b[:n:n] }

func poke(b []byte, i int, v byte) []byte {
	b = append([]byte(nil), b...)
	b[i] = v
	return b
}

// fixLen6 sets the IPv6 payload length of an untagged frame to what it
// holds, so that only the inner header is short.
func fixLen6(b []byte) []byte {
	b = append([]byte(nil), b...)
	n := len(b) - 14 - 40
	b[18], b[19] = byte(n>>8), byte(n)
	return b
}

// TestVerdicts runs every golden frame through the program with
// BPF_PROG_TEST_RUN, first with no socket registered for the queue (FR1:
// VIP frames are passed, not dropped), then with a real AF_XDP socket on
// queue 0 (VIP frames are redirected), then after unregistering it.
func TestVerdicts(t *testing.T) {
	o := loadObjects(t, 4)
	setVIPs(t, o, vip4, vip6, netip.MustParseAddr("10.200.0.9"))
	rows := verdictRows(t)

	phase := func(t *testing.T, vipVerdict uint32, vipStat int) {
		for _, r := range rows {
			t.Run(r.name, func(t *testing.T) {
				verdict, stat := uint32(xdpPass), r.stat
				if r.stat == statPassedNoSocket {
					verdict, stat = vipVerdict, vipStat
				}
				run(t, o, r.frame, verdict, stat)
			})
		}
	}
	t.Run("no socket", func(t *testing.T) { phase(t, xdpPass, statPassedNoSocket) })

	ns := newTestNS(t, 1)
	s := newXSK(t, ns, ns.In, 0)
	if err := o.RegisterSocket(0, s.fd); err != nil {
		t.Fatalf("RegisterSocket: %v", err)
	}
	t.Run("socket on queue 0", func(t *testing.T) { phase(t, xdpRedirect, statRedirected) })

	if err := o.UnregisterSocket(0); err != nil {
		t.Fatalf("UnregisterSocket: %v", err)
	}
	t.Run("unregistered", func(t *testing.T) { phase(t, xdpPass, statPassedNoSocket) })
}

// TestVerdict_RxQueue checks that the socket is chosen by the frame's rx
// queue: with a socket on queue 1 only, a VIP frame received on queue 0 is
// passed and one received on queue 1 is redirected. The test run names the
// queue through struct xdp_md (ingress_ifindex, rx_queue_index).
func TestVerdict_RxQueue(t *testing.T) {
	o := loadObjects(t, 2)
	setVIPs(t, o, vip4)
	ns := newTestNS(t, 2)
	s := newXSK(t, ns, ns.In, 1)
	if err := o.RegisterSocket(1, s.fd); err != nil {
		t.Fatalf("RegisterSocket: %v", err)
	}
	frame := v4(t, nil, vip4, layers.IPProtocolUDP)
	for queue, want := range []uint32{xdpPass, xdpRedirect} {
		var got uint32
		err := ns.Do(func() error {
			var err error
			got, err = o.Program.Run(&ebpf.RunOptions{Data: frame, Context: xdpMD{
				DataEnd: uint32(len(frame)), IngressIfindex: uint32(ns.In.Attrs().Index), RxQueueIndex: uint32(queue),
			}})
			return err
		})
		if err != nil {
			t.Fatalf("queue %d: Program.Run: %v", queue, err)
		}
		if got != want {
			t.Errorf("queue %d: verdict %s, want %s", queue, verdictName(got), verdictName(want))
		}
	}
}

// xdpMD is struct xdp_md, the context of a test run.
type xdpMD struct {
	Data, DataEnd, DataMeta, IngressIfindex, RxQueueIndex, EgressIfindex uint32
}

// TestWorkersNeverGetWhatTheyWouldPass: a worker cannot hand a frame back
// to the kernel, so what the program redirects must be a frame the
// workers decide (forward or a counted drop), never NDP, which they
// would pass and so lose. The program and the parser follow the same
// number of extension headers: NDP behind up to MaxExtHeaders of them
// stays with the kernel; behind more, the parser calls it malformed (a
// counted drop). With the old limits (program 8, parser 16), NDP behind
// 9 to 16 headers went to the workers and was lost there.
func TestWorkersNeverGetWhatTheyWouldPass(t *testing.T) {
	o := loadObjects(t, 1)
	setVIPs(t, o, vip6)
	dopts := layers.IPProtocolIPv6Destination
	for n := 0; n <= 2*MaxExtHeaders+2; n++ {
		for _, typ := range []uint8{133, 135, 136, 137} {
			b, next := icmp6(typ), layers.IPProtocolICMPv6
			for range n {
				b, next = ext(next, 0, b), dopts
			}
			frame := v6(t, nil, vip6, next, b)
			before := readStats(t, o)
			if _, err := o.Program.Run(&ebpf.RunOptions{Data: frame}); err != nil {
				t.Fatalf("Program.Run: %v", err)
			}
			after := readStats(t, o)
			if after[statPassedNoSocket] == before[statPassedNoSocket] {
				if after[statPassedNDP] == before[statPassedNDP] {
					t.Errorf("ICMPv6 %d behind %d headers: neither to the workers nor NDP", typ, n)
				}
				continue
			}
			var p packet.Parsed
			if err := packet.Parse(frame, &p); err == nil && p.Proto == packet.ProtoICMPv6 && p.ICMPType >= 133 && p.ICMPType <= 137 {
				t.Errorf("NDP (type %d) behind %d extension headers goes to the workers, which would pass (lose) it", typ, n)
			}
		}
	}
}

package dataplane_test

import (
	"bytes"
	"net/netip"
	"sync"
	"testing"

	"xlb/config"
	"xlb/conntrack"
	"xlb/controlplane/cptest"
	"xlb/dataplane"
	"xlb/dataplane/craft"
	"xlb/dataplane/packet"
)

// fuzzRig is the engine the fuzzer drives: testdata/bench.toml (IPv4 and
// IPv6 VIPs; TCP, UDP and L3_DEFAULT rules; L2_DSR, IPIP and GUE services)
// over a small conntrack table, so that tracking state and evictions (X3)
// carry from one input to the next as they do in production. Inputs run one
// at a time in each fuzzing process.
type fuzzRig struct {
	dc   *dataplane.Decider
	snap *dataplane.Snapshot
	// vips maps each configured VIP to the services its rules name, read
	// from the configuration rather than from the snapshot.
	vips map[netip.Addr]map[string]bool
	now  int64
}

var (
	fuzzMu  sync.Mutex
	fuzzSet *fuzzRig
)

func newFuzzRig(tb testing.TB) *fuzzRig {
	tb.Helper()
	fuzzMu.Lock()
	defer fuzzMu.Unlock()
	if fuzzSet != nil {
		return fuzzSet
	}
	eng, _ := benchEngine(tb, conntrack.MinCapacity)
	r := &fuzzRig{dc: eng.NewDecider(), snap: eng.Load(), vips: map[netip.Addr]map[string]bool{}, now: 1000}
	cfg := cptest.Config(tb, cptest.Testdata(tb, "bench.toml"))
	for _, rule := range cfg.Rules {
		if r.vips[rule.VIP] == nil {
			r.vips[rule.VIP] = map[string]bool{}
		}
		r.vips[rule.VIP][cfg.Services[rule.Service].Name] = true
	}
	fuzzSet = r
	return r
}

// fuzzSeeds are real frames of every protocol the rules name, to every kind
// of service, plus non-VIP traffic; each is also added cut short.
func fuzzSeeds(tb testing.TB) [][]byte {
	tb.Helper()
	c4, c6 := netip.MustParseAddr("100.64.0.1"), netip.MustParseAddr("2001:db8:c::1")
	r4, r6 := netip.MustParseAddr("192.0.2.99"), netip.MustParseAddr("2001:db8:e::99")
	tcp := func(src, dst netip.Addr, dport uint16, flags string) craft.Packet {
		return craft.Packet{Src: src, Dst: dst, Proto: packet.ProtoTCP, SrcPort: 40000, DstPort: dport, Flags: flags}
	}
	udp := func(src, dst netip.Addr, dport uint16) craft.Packet {
		return craft.Packet{Src: src, Dst: dst, Proto: packet.ProtoUDP, SrcPort: 40000, DstPort: dport}
	}
	proto := func(src, dst netip.Addr, p packet.Proto) craft.Packet {
		return craft.Packet{Src: src, Dst: dst, Proto: p}
	}
	reply := func(p craft.Packet) *craft.Packet {
		p.Src, p.Dst, p.SrcPort, p.DstPort = p.Dst, p.Src, p.DstPort, p.SrcPort
		return &p
	}
	icmpErr := func(router netip.Addr, typ, code uint8, quoted craft.Packet) craft.Packet {
		p := craft.Packet{Src: router, Dst: quoted.Src, Proto: packet.ProtoICMP, ICMPType: typ, ICMPCode: code, Inner: &quoted}
		if router.Is6() {
			p.Proto = packet.ProtoICMPv6
		}
		return p
	}
	var ps []craft.Packet
	for _, vip := range []netip.Addr{benchVIPWeb4, benchVIPIPIP, benchVIPGUE4, benchVIPGUE6, benchVIPAllow} {
		ps = append(ps, tcp(c4, vip, 80, "S"), tcp(c4, vip, 80, "A"), tcp(c4, vip, 80, "FA"), tcp(c4, vip, 81, "S"))
	}
	ps = append(ps,
		tcp(netip.MustParseAddr("198.18.0.1"), benchVIPAllow, 80, "S"), // FR6: outside the allowed ranges
		tcp(c6, benchVIPWeb6, 80, "S"), tcp(c6, benchVIPWeb6, 443, "A"), tcp(c6, benchVIPWeb6, 22, "S"),
		udp(c4, benchVIPWeb4, 53), udp(c4, benchVIPWeb4, 123), udp(c6, benchVIPWeb6, 53),
		udp(c4, benchVIPIPIP, 53), // no UDP rule on that VIP: FR4
		proto(c4, benchVIPWeb4, packet.ProtoESP), proto(c4, benchVIPWeb4, packet.ProtoGRE), proto(c4, benchVIPWeb4, 132),
		proto(c6, benchVIPWeb6, packet.ProtoESP), proto(c6, benchVIPWeb6, packet.ProtoGRE),
		proto(c4, benchVIPWeb4, packet.ProtoICMP), proto(c6, benchVIPWeb6, packet.ProtoICMPv6),
		icmpErr(r4, 3, 4, *reply(tcp(c4, benchVIPWeb4, 80, "A"))),
		icmpErr(r4, 11, 0, *reply(udp(c4, benchVIPWeb4, 53))),
		icmpErr(r6, 2, 0, *reply(tcp(c6, benchVIPWeb6, 80, "A"))),
		icmpErr(r6, 1, 4, *reply(udp(c6, benchVIPWeb6, 53))),
		craft.Packet{Src: c6, Dst: benchVIPWeb6, Proto: packet.ProtoICMPv6, ICMPType: 135}, // NDP for the VIP
		tcp(c4, benchNotVIP, 22, "S"), udp(c6, netip.MustParseAddr("2001:db8::53"), 53),
	)
	// Fragments, first, middle and last; VLAN tags.
	for _, frag := range []craft.Frag{craft.FragFirst, craft.FragMiddle, craft.FragLast} {
		for _, p := range []craft.Packet{udp(c4, benchVIPWeb4, 53), udp(c6, benchVIPWeb6, 53), tcp(c4, benchVIPWeb4, 80, "A"), tcp(c6, benchVIPWeb6, 80, "A")} {
			p.Frag = frag
			ps = append(ps, p)
		}
	}
	for _, p := range []craft.Packet{tcp(c4, benchVIPWeb4, 80, "S"), tcp(c6, benchVIPWeb6, 80, "S"), tcp(c4, benchVIPGUE6, 80, "A")} {
		p.VLAN = 42
		ps = append(ps, p)
	}

	var seeds [][]byte
	for i := range ps {
		f, err := craft.Build(&ps[i])
		if err != nil {
			tb.Fatalf("seed %+v: %v", ps[i], err)
		}
		seeds = append(seeds, f)
		// Truncated: inside Ethernet, inside IP, inside L4, one byte short.
		for _, n := range []int{0, 13, 20, 33, 40, 50, 60, len(f) - 1} {
			if n < len(f) {
				seeds = append(seeds, f[:n])
			}
		}
	}
	// An IPv6 packet to the IPv4-mapped form of an IPv4 VIP is not VIP
	// traffic (FR1).
	m := craft.Packet{Src: c6, Dst: netip.AddrFrom16(benchVIPWeb4.As16()), Proto: packet.ProtoTCP, SrcPort: 40000, DstPort: 80, Flags: "S"}
	if f, err := craft.Build(&m); err == nil {
		seeds = append(seeds, f)
	}
	return seeds
}

// FuzzEngine feeds arbitrary bytes as frames through a decider and checks
// what must hold for any input:
//
//   - it never panics;
//   - a frame whose destination is not a VIP is passed, untouched (FR1);
//   - a VIP frame that does not parse is dropped with reason malformed;
//   - a passed frame is not modified; a dropped one carries a reason, a
//     forwarded one none;
//   - a forwarded frame's Off/Len stay within Buf, it goes to a current
//     backend of the service the rule names, and it parses: for L2_DSR the
//     same packet with the backend's MAC, for IPIP/GUE an outer header to the
//     backend's address.
func FuzzEngine(f *testing.F) {
	for _, s := range fuzzSeeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		r := newFuzzRig(t)
		r.now++
		buf := make([]byte, dataplane.Headroom+len(in)+dataplane.Headroom)
		copy(buf[dataplane.Headroom:], in)
		fr := dataplane.Frame{Buf: buf, Off: dataplane.Headroom, Len: len(in)}
		batch := []dataplane.Frame{fr}
		r.dc.Process(batch, r.now)
		out := &batch[0]

		// The oracle: what the frame is, decided without the engine. A
		// VIP is an address of the frame's own family among the
		// configured forwarding rules' ip_address.
		var p packet.Parsed
		perr := packet.Parse(in, &p)
		isVIP := p.DstValid && r.vips[packet.AddrToNetip(p.Dst)] != nil &&
			packet.Is4(p.Dst) == (p.IPVersion == 4)

		switch {
		case !isVIP:
			if out.Verdict != dataplane.VerdictPass {
				t.Fatalf("destination is not a VIP (parsed %+v, err %v): %v %v, want pass", p, perr, out.Verdict, out.Reason)
			}
		case perr != nil:
			if out.Verdict != dataplane.VerdictDrop || out.Reason != dataplane.ReasonMalformed {
				t.Fatalf("malformed VIP frame (%v): %v %v, want drop malformed", perr, out.Verdict, out.Reason)
			}
		}
		switch out.Verdict {
		case dataplane.VerdictPass:
			if out.Off != dataplane.Headroom || out.Len != len(in) || !bytes.Equal(out.Data(), in) {
				t.Fatalf("passed frame was modified")
			}
		case dataplane.VerdictDrop:
			if out.Reason == dataplane.ReasonNone {
				t.Fatalf("drop without a reason")
			}
		case dataplane.VerdictForward:
			if out.Reason != dataplane.ReasonNone {
				t.Fatalf("forward with reason %v", out.Reason)
			}
			if !isVIP || perr != nil {
				t.Fatalf("forwarded a frame that is not a well-formed VIP frame (VIP %v, err %v)", isVIP, perr)
			}
			fuzzCheckForwarded(t, r, in, &p, out)
		default:
			t.Fatalf("verdict %d", out.Verdict)
		}
	})
}

// fuzzCheckForwarded checks a forwarded frame: bounds, backend, rewrite.
func fuzzCheckForwarded(t *testing.T, r *fuzzRig, in []byte, p *packet.Parsed, f *dataplane.Frame) {
	t.Helper()
	if f.Off < 0 || f.Len <= 0 || f.Off > len(f.Buf) || f.Len > len(f.Buf)-f.Off {
		t.Fatalf("forwarded frame Off %d Len %d outside Buf of %d bytes", f.Off, f.Len, len(f.Buf))
	}
	b := r.snap.Backend(f.Backend)
	if b == nil || b.Removed {
		t.Fatalf("forwarded to backend ref %#x, not a current backend", uint32(f.Backend))
	}
	// The backend belongs to a service of the destination VIP, or, for an
	// ICMP error steered by its quote (X1), possibly of the quoted VIP.
	svc := r.snap.Service(b.Service)
	ok := r.vips[packet.AddrToNetip(p.Dst)][svc.Name]
	if p.HasInner {
		ok = ok || r.vips[packet.AddrToNetip(p.Inner.Src)][svc.Name]
	}
	if !ok {
		t.Fatalf("forwarded to %s of service %s, which no rule of the VIP names", b.Name, svc.Name)
	}
	data := f.Data()
	var out packet.Parsed
	if err := packet.Parse(data, &out); err != nil {
		t.Fatalf("forwarded frame does not parse: %v", err)
	}
	if [6]byte(data[0:6]) != b.MAC || [6]byte(data[6:12]) != r.snap.Local.MAC {
		t.Fatalf("forwarded frame MACs %x, want %x from %x", data[0:12], b.MAC, r.snap.Local.MAC)
	}
	switch svc.Method {
	case config.ForwardL2DSR:
		// Only the MACs change.
		if f.Off != dataplane.Headroom || !bytes.Equal(data[12:], in[12:]) {
			t.Fatalf("L2_DSR changed more than the MACs:\n got %x\nwant %x", data, in)
		}
	default:
		if out.Dst != b.Addr {
			t.Fatalf("outer destination %v, want backend %v", packet.AddrToNetip(out.Dst), b.IP)
		}
		wantProto := packet.ProtoIPIP
		if p.IPVersion == 6 {
			wantProto = packet.ProtoIPv6
		}
		switch {
		case svc.Method == config.ForwardGUE && (out.Proto != packet.ProtoUDP || out.DstPort != svc.GUEPort):
			t.Fatalf("GUE outer proto %d port %d, want UDP port %d", out.Proto, out.DstPort, svc.GUEPort)
		case svc.Method == config.ForwardIPIP && out.Proto != wantProto:
			t.Fatalf("IPIP outer proto %d, want %d", out.Proto, wantProto)
		}
		// The inner packet is carried whole, Ethernet padding dropped.
		if inner := data[len(data)-p.IPLen:]; !bytes.Equal(inner, in[p.L3Off:p.L3Off+p.IPLen]) {
			t.Fatalf("encapsulated packet differs from the received one")
		}
	}
}

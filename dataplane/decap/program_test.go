package decap

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"testing"

	"github.com/cilium/ebpf"

	"xlb/dataplane/craft"
	"xlb/dataplane/packet"
	"xlb/internal/bpfasm"
)

// TestDecapsulates: every frame xlb's encapsulation writes — IPIP in all
// four family mixes, GUE over both outer families with both inner
// families, TCP and UDP inside, with and without an 802.1Q tag — comes out
// of the program as the client's frame: the outer frame's MACs, the tag,
// the inner family's EtherType and the inner packet byte for byte, passed
// to the kernel and counted by kind and outer family.
func TestDecapsulates(t *testing.T) {
	o := load(t, testPort)
	for _, gue := range []bool{false, true} {
		for _, outer6 := range []bool{false, true} {
			for _, inner6 := range []bool{false, true} {
				for _, proto := range []packet.Proto{packet.ProtoTCP, packet.ProtoUDP} {
					for _, vlan := range []uint16{0, 42} {
						kind, stat := "IPIP", statIPIP4
						if gue {
							kind, stat = "GUE", statGUE4
						}
						src, dst, of := lb4, local4, "4"
						if outer6 {
							src, dst, of = lb6, local6, "6"
							stat++ // the outer-IPv6 counter follows the IPv4 one
						}
						inf := "4"
						if inner6 {
							inf = "6"
						}
						name := fmt.Sprintf("%s/%s-in-%s/%s/vlan%d", kind, inf, of, proto, vlan)
						t.Run(name, func(t *testing.T) {
							in := inner(t, inner6, proto, vlan)
							frame := encap(t, in, src, dst, gue)
							verdict, out := run(t, o, frame, stat)
							if verdict != bpfasm.XDPPass {
								t.Errorf("verdict %d, want XDP_PASS", verdict)
							}
							if want := decapsulated(in); !bytes.Equal(out, want) {
								t.Errorf("decapsulated frame differs:\n got % x\nwant % x", out, want)
							}
						})
					}
				}
			}
		}
	}
}

// TestDecapsulatesVariants: forms xlb does not write but the headers
// allow: outer IPv4 options, GUE options (hlen), Ethernet padding after
// the outer packet (left for the kernel to trim by the inner length).
func TestDecapsulatesVariants(t *testing.T) {
	o := load(t, testPort)
	in4 := inner(t, false, packet.ProtoUDP, 0)
	ipip := encap(t, in4, lb4, local4, false)
	gue := encap(t, in4, lb4, local4, true)
	for _, tc := range []struct {
		name  string
		frame []byte
		stat  int
		want  []byte
	}{
		{"outer IPv4 options", edit(ipip, func(f []byte) []byte {
			f = insertAt(f, 14+20, 4)
			f[14] = 0x46
			addBE(f, 14+2, 4)
			return f
		}), statIPIP4, decapsulated(in4)},
		{"GUE options (hlen 2)", edit(gue, func(f []byte) []byte {
			f = insertAt(f, 14+20+12, 8)
			f[14+20+8] |= 2
			addBE(f, 14+2, 8)
			addBE(f, 14+20+4, 8)
			return f
		}), statGUE4, decapsulated(in4)},
		{"Ethernet padding", append(bytes.Clone(ipip), make([]byte, 6)...), statIPIP4,
			append(decapsulated(in4), make([]byte, 6)...)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			verdict, out := run(t, o, tc.frame, tc.stat)
			if verdict != bpfasm.XDPPass {
				t.Errorf("verdict %d, want XDP_PASS", verdict)
			}
			if !bytes.Equal(out, tc.want) {
				t.Errorf("decapsulated frame differs:\n got % x\nwant % x", out, tc.want)
			}
		})
	}
}

// TestPassesUntouched: the host's own traffic, tunnels to addresses that
// are not local, and every truncated, malformed or unsupported tunnel
// frame pass to the kernel exactly as they came, each counted in its own
// counter.
func TestPassesUntouched(t *testing.T) {
	o := load(t, testPort)
	in4 := inner(t, false, packet.ProtoTCP, 0)
	in6 := inner(t, true, packet.ProtoTCP, 0)
	ipip4 := encap(t, in4, lb4, local4, false)
	ipip6 := encap(t, in6, lb6, local6, false)
	gue4 := encap(t, in4, lb4, local4, true)
	gue6 := encap(t, in6, lb6, local6, true)
	gueOff4 := 14 + 20 // UDP header of gue4
	gueOff6 := 14 + 40
	// host is a frame of the host's own: the inner TCP frame addressed to
	// a local address.
	host := func(f []byte, dstOff int, a []byte) []byte {
		return edit(f, func(f []byte) []byte { copy(f[dstOff:], a); return f })
	}
	notTunnel, notLocal, invalid := statPassedNotTunnel, statPassedNotLocal, statPassedInvalid
	for _, tc := range []struct {
		name  string
		frame []byte
		stat  int
	}{
		{"TCP to a local IPv4 address", host(in4, 14+16, local4.AsSlice()), notTunnel},
		{"TCP to a local IPv6 address", host(in6, 14+24, local6.AsSlice()), notTunnel},
		{"ARP", arp(), notTunnel},
		{"IPv4 UDP to another port", edit(gue4, func(f []byte) []byte {
			binary.BigEndian.PutUint16(f[gueOff4+2:], testPort+1)
			return f
		}), notTunnel},
		{"IPv6 UDP to another port", edit(gue6, func(f []byte) []byte {
			binary.BigEndian.PutUint16(f[gueOff6+2:], testPort+1)
			return f
		}), notTunnel},
		{"IPv6 with an extension header before IPIP", edit(ipip6, func(f []byte) []byte {
			f[14+6] = byte(packet.ProtoDstOpts)
			return f
		}), notTunnel},
		{"802.1ad outer tag", edit(encap(t, inner(t, false, packet.ProtoTCP, 5), lb4, local4, false), func(f []byte) []byte {
			binary.BigEndian.PutUint16(f[12:], packet.EtherTypeQinQ)
			return f
		}), notTunnel},
		{"IPv4 truncated inside the UDP header", gue4[:gueOff4+6], notTunnel},

		{"IPIP to another IPv4 address", encap(t, in4, lb4, other4, false), notLocal},
		{"IPIP to another IPv6 address", encap(t, in6, lb6, other6, false), notLocal},
		{"GUE to another IPv4 address", encap(t, in6, lb4, other4, true), notLocal},
		{"GUE to another IPv6 address", encap(t, in4, lb6, other6, true), notLocal},
		{"IPv6 IPIP to the IPv4-mapped form of a local IPv4 address", encap(t, in4, lb6, netip.AddrFrom16(local4.As16()), false), notLocal},

		{"Ethernet only", ipip4[:14], invalid},
		{"IPv4 header truncated", ipip4[:14+19], invalid},
		{"IPv6 header truncated", ipip6[:14+39], invalid},
		{"IPIP inner header truncated", ipip4[:14+20+19], invalid},
		{"IPIP total length beyond the frame", ipip4[:len(ipip4)-1], invalid},
		{"IPv6 payload length beyond the frame", ipip6[:len(ipip6)-1], invalid},
		{"IPv4 header length 4 words", edit(ipip4, func(f []byte) []byte { f[14] = 0x44; return f }), invalid},
		{"IPv4 total length below the header", edit(ipip4, func(f []byte) []byte {
			binary.BigEndian.PutUint16(f[14+2:], 19)
			return f
		}), invalid},
		{"IPv4 version 5 with IPv4's EtherType", edit(ipip4, func(f []byte) []byte { f[14] = 0x55; return f }), invalid},
		{"IPv6 version 4 with IPv6's EtherType", edit(ipip6, func(f []byte) []byte { f[14] = 0x46; return f }), invalid},
		{"outer IPv4 first fragment (MF)", edit(ipip4, func(f []byte) []byte { f[14+6] |= 0x20; return f }), invalid},
		{"outer IPv4 later fragment", edit(ipip4, func(f []byte) []byte { f[14+7] = 8; return f }), invalid},
		{"protocol 4 carrying IPv6", edit(ipip6, func(f []byte) []byte { f[14+6] = byte(packet.ProtoIPIP); return f }), invalid},
		{"protocol 41 carrying IPv4", edit(ipip4, func(f []byte) []byte { f[14+9] = byte(packet.ProtoIPv6); return f }), invalid},
		{"GUE version 1", edit(gue4, func(f []byte) []byte { f[gueOff4+8] = 0x40; return f }), invalid},
		{"GUE control message", edit(gue4, func(f []byte) []byte { f[gueOff4+8] = 0x20; return f }), invalid},
		{"GUE proto UDP", edit(gue6, func(f []byte) []byte { f[gueOff6+9] = byte(packet.ProtoUDP); return f }), invalid},
		{"GUE header truncated", gue4[:gueOff4+11], invalid},
		{"UDP length below UDP + GUE", edit(gue4, func(f []byte) []byte {
			binary.BigEndian.PutUint16(f[gueOff4+4:], 11)
			return f
		}), invalid},
		{"UDP length beyond the IP payload", edit(gue6, func(f []byte) []byte { addBE(f, gueOff6+4, 1); return f }), invalid},
		{"GUE options beyond the UDP payload", edit(gue4, func(f []byte) []byte { f[gueOff4+8] = 0x1f; return f }), invalid},
		{"GUE inner header truncated by the UDP length", edit(gue4, func(f []byte) []byte {
			binary.BigEndian.PutUint16(f[gueOff4+4:], 12+19)
			return f
		}), invalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			verdict, out := run(t, o, tc.frame, tc.stat)
			if verdict != bpfasm.XDPPass {
				t.Errorf("verdict %d, want XDP_PASS", verdict)
			}
			if !bytes.Equal(out, tc.frame) {
				t.Errorf("frame changed:\n got % x\nwant % x", out, tc.frame)
			}
		})
	}
}

// TestGUEPort: the program decapsulates GUE to its own port only.
func TestGUEPort(t *testing.T) {
	in := inner(t, false, packet.ProtoUDP, 0)
	frame := encap(t, in, lb4, local4, true) // to testPort
	other := load(t, testPort+1)
	if _, out := run(t, other, frame, statPassedNotTunnel); !bytes.Equal(out, frame) {
		t.Error("a program for another port changed the frame")
	}
	same := load(t, testPort)
	if _, out := run(t, same, frame, statGUE4); !bytes.Equal(out, decapsulated(in)) {
		t.Error("the program for the frame's port did not decapsulate it")
	}
	if _, err := Load(0); err == nil {
		t.Error("Load(0) accepted GUE port 0")
	}
}

// arp is an ARP request frame.
func arp() []byte {
	f := make([]byte, 42)
	copy(f, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	copy(f[6:], lbMAC[:])
	binary.BigEndian.PutUint16(f[12:], 0x0806)
	copy(f[14:], []byte{0, 1, 8, 0, 6, 4, 0, 1})
	return f
}

// innerFrom is a client-like UDP frame from src to dst (one family).
func innerFrom(tb testing.TB, src, dst netip.Addr) []byte {
	tb.Helper()
	f, err := craft.Build(&craft.Packet{Src: src, Dst: dst, Proto: packet.ProtoUDP, SrcPort: 41000, DstPort: 53, PayloadLen: 40})
	if err != nil {
		tb.Fatal(err)
	}
	return f
}

// TestDropsWhatBalancersDoNotSend: a tunnel frame to a local address is
// decapsulated only when a balancer could have sent it; otherwise it is
// dropped (XDP_DROP, never passed to a kernel that might decapsulate it
// with a tunnel device) and counted by the first reason that applies:
// outer TTL or hop limit 0, outer source a martian, outer source not
// allowed, inner source a martian, inner source this host's own (a local
// address, a VIP) or a balancer's, inner destination not a VIP (which
// with ip_forward=1 the kernel would route to another host). Each reason
// over both outer families and both kinds where the header differs.
func TestDropsWhatBalancersDoNotSend(t *testing.T) {
	o := load(t, testPort)
	a := netip.MustParseAddr
	in4 := innerFrom(t, client4, vip4)
	in6 := innerFrom(t, client6, vip6)
	ttl0 := func(f []byte) []byte { f[14+8] = 0; return f }
	hop0 := func(f []byte) []byte { f[14+7] = 0; return f }
	type tc struct {
		name  string
		frame []byte
		stat  int
	}
	cases := []tc{
		{"IPIP outer TTL 0", edit(encap(t, in4, lb4, local4, false), ttl0), statDroppedOuterTTL},
		{"GUE outer TTL 0", edit(encap(t, in6, lb4, local4, true), ttl0), statDroppedOuterTTL},
		{"IPIP outer hop limit 0", edit(encap(t, in6, lb6, local6, false), hop0), statDroppedOuterTTL},
		{"GUE outer hop limit 0", edit(encap(t, in4, lb6, local6, true), hop0), statDroppedOuterTTL},
		{"outer source 0.0.0.0 and TTL 0: the TTL first", edit(encap(t, in4, a("0.0.0.0"), local4, false), ttl0), statDroppedOuterTTL},

		{"outer source not allowed, IPIP/4", encap(t, in4, other4, local4, false), statDroppedNotAllowed},
		{"outer source not allowed, GUE/4", encap(t, in4, other4, local4, true), statDroppedNotAllowed},
		{"outer source not allowed, IPIP/6", encap(t, in6, other6, local6, false), statDroppedNotAllowed},
		{"outer source not allowed, GUE/6", encap(t, in6, other6, local6, true), statDroppedNotAllowed},
		{"outer source a public address", encap(t, in4, a("198.51.100.7"), local4, true), statDroppedNotAllowed},
		{"outer source a VIP", encap(t, in4, vip4, local4, false), statDroppedNotAllowed},
		{"outer source the host's own", encap(t, in4, local4, local4, false), statDroppedNotAllowed},
	}
	for _, s := range []string{"0.0.0.0", "127.0.0.1", "169.254.1.1", "224.0.0.1", "240.0.0.1", "255.255.255.255"} {
		cases = append(cases, tc{"outer source " + s, encap(t, in4, a(s), local4, false), statDroppedOuterMartian})
	}
	for _, s := range []string{"::", "::1", "fe80::1", "ff02::1", "::ffff:" + lb4.String()} {
		cases = append(cases, tc{"outer source " + s, encap(t, in6, a(s), local6, true), statDroppedOuterMartian})
	}
	for _, s := range []string{"0.0.0.0", "127.0.0.1", "169.254.1.1", "224.0.0.1", "240.0.0.1", "255.255.255.255"} {
		cases = append(cases,
			tc{"IPIP inner source " + s, encap(t, innerFrom(t, a(s), vip4), lb4, local4, false), statDroppedInnerMartian},
			tc{"GUE/6 inner source " + s, encap(t, innerFrom(t, a(s), vip4), lb6, local6, true), statDroppedInnerMartian})
	}
	for _, s := range []string{"::", "::1", "fe80::1", "ff02::1", "::ffff:" + client4.String()} {
		cases = append(cases,
			tc{"IPIP inner source " + s, encap(t, innerFrom(t, a(s), vip6), lb6, local6, false), statDroppedInnerMartian},
			tc{"GUE/4 inner source " + s, encap(t, innerFrom(t, a(s), vip6), lb4, local4, true), statDroppedInnerMartian})
	}
	for _, own := range []struct {
		what     string
		src, dst netip.Addr
	}{
		{"the balancer's", lb4, vip4}, {"the balancer's", lb6, vip6},
		{"the host's own", local4, vip4}, {"the host's own", local6, vip6},
		{"the VIP itself", vip4, vip4}, {"the VIP itself", vip6, vip6},
	} {
		in := innerFrom(t, own.src, own.dst)
		cases = append(cases,
			tc{fmt.Sprintf("IPIP inner source %s %v", own.what, own.src), encap(t, in, lb4, local4, false), statDroppedInnerOwn},
			tc{fmt.Sprintf("GUE inner source %s %v", own.what, own.src), encap(t, in, lb6, local6, true), statDroppedInnerOwn})
	}
	for _, dst := range []netip.Addr{other4, a("192.0.2.1"), local4, lb4, other6, a("2001:db8::1"), local6} {
		src := client4
		if dst.Is6() {
			src = client6
		}
		in := innerFrom(t, src, dst)
		cases = append(cases,
			tc{fmt.Sprintf("IPIP inner destination %v, not a VIP", dst), encap(t, in, lb4, local4, false), statDroppedNotServed},
			tc{fmt.Sprintf("GUE inner destination %v, not a VIP", dst), encap(t, in, lb6, local6, true), statDroppedNotServed})
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if verdict, _ := run(t, o, c.frame, c.stat); verdict != bpfasm.XDPDrop {
				t.Errorf("verdict %d, want XDP_DROP", verdict)
			}
		})
	}
	// The same frames, outer and inner sources and destinations as the
	// balancers write them, are decapsulated: the checks above are what
	// dropped them.
	for _, f := range [][]byte{encap(t, in4, lb4, local4, false), encap(t, in6, lb6, local6, true), encap(t, in4, lb6, local6, true)} {
		if verdict, out := run(t, o, f, -1); verdict != bpfasm.XDPPass || len(out) >= len(f) {
			t.Errorf("a genuine frame: verdict %d, %d bytes out of %d", verdict, len(out), len(f))
		}
	}
}

// TestAllowPrefixes: Allow and VIPs hold prefixes: a balancer inside an
// allowed prefix is accepted, one outside it is not, an inner source
// inside it is a balancer's and dropped; a VIP prefix serves every
// address in it. An empty Allow drops every tunnel frame, and SetAllow
// replaces the list in place.
func TestAllowPrefixes(t *testing.T) {
	o := load(t, testPort)
	a := netip.MustParseAddr
	p := netip.MustParsePrefix
	if err := o.SetAllow([]netip.Prefix{p("10.201.0.0/28"), p("fd00:201::/124")}); err != nil {
		t.Fatal(err)
	}
	if err := o.SetVIPs([]netip.Prefix{p("10.203.0.0/24"), p("fd00:203::/64")}); err != nil {
		t.Fatal(err)
	}
	in := innerFrom(t, client4, a("10.203.0.77"))
	for _, c := range []struct {
		name  string
		frame []byte
		stat  int
	}{
		{"balancer 10.201.0.5 in 10.201.0.0/28, VIP 10.203.0.77 in 10.203.0.0/24", encap(t, in, a("10.201.0.5"), local4, false), statIPIP4},
		{"balancer fd00:201::f in fd00:201::/124", encap(t, innerFrom(t, client6, a("fd00:203::99")), a("fd00:201::f"), local6, true), statGUE6},
		{"source 10.201.0.16 outside 10.201.0.0/28", encap(t, in, a("10.201.0.16"), local4, false), statDroppedNotAllowed},
		{"inner source 10.201.0.9 inside the balancers' prefix", encap(t, innerFrom(t, a("10.201.0.9"), vip4), lb4, local4, false), statDroppedInnerOwn},
		{"inner destination 10.203.1.1 outside the VIP prefix", encap(t, innerFrom(t, client4, a("10.203.1.1")), lb4, local4, false), statDroppedNotServed},
	} {
		t.Run(c.name, func(t *testing.T) {
			want := uint32(bpfasm.XDPPass)
			if c.stat >= statDroppedOuterTTL {
				want = bpfasm.XDPDrop
			}
			if verdict, _ := run(t, o, c.frame, c.stat); verdict != want {
				t.Errorf("verdict %d, want %d", verdict, want)
			}
		})
	}
	if err := o.SetAllow(nil); err != nil {
		t.Fatal(err)
	}
	for _, f := range [][]byte{encap(t, in, a("10.201.0.5"), local4, false), encap(t, inner(t, true, packet.ProtoTCP, 0), lb6, local6, true)} {
		if verdict, _ := run(t, o, f, statDroppedNotAllowed); verdict != bpfasm.XDPDrop {
			t.Errorf("with no balancer allowed: verdict %d, want XDP_DROP", verdict)
		}
	}
	for _, bad := range []string{"0.0.0.0/0", "::/0", "10.201.0.1/24", "127.0.0.1/32", "224.0.0.0/3", "fe80::1/128", "::ffff:10.0.0.1/128"} {
		if err := o.SetAllow([]netip.Prefix{p(bad)}); !errors.Is(err, ErrPrefix) {
			t.Errorf("SetAllow(%s): %v, want ErrPrefix", bad, err)
		}
	}
}

// FuzzProgram: any frame comes out of the program passed or dropped,
// counted in exactly one counter, the drop counters only with XDP_DROP;
// seeded with every kind of frame the balancers write and some that they
// do not.
func FuzzProgram(f *testing.F) {
	in4 := inner(f, false, packet.ProtoTCP, 0)
	in6 := inner(f, true, packet.ProtoUDP, 42)
	for _, seed := range [][]byte{
		in4, in6, arp(),
		encap(f, in4, lb4, local4, false), encap(f, in6, lb6, local6, true),
		encap(f, in4, lb6, local6, true), encap(f, in6, lb4, local4, false),
		encap(f, in4, other4, local4, true), encap(f, innerFrom(f, lb4, vip4), lb4, local4, false),
		encap(f, innerFrom(f, client6, other6), lb6, local6, false),
	} {
		f.Add(seed)
	}
	o := load(f, testPort)
	f.Fuzz(func(t *testing.T, frame []byte) {
		if len(frame) > 4000 {
			return
		}
		before := stats(t, o)
		out := make([]byte, len(frame)+512)
		verdict, err := o.Program.Run(&ebpf.RunOptions{Data: frame, DataOut: out})
		if err != nil {
			if len(frame) < 14 {
				return // the kernel's runner refuses frames shorter than Ethernet
			}
			t.Fatalf("Program.Run: %v", err)
		}
		after := stats(t, o)
		moved := -1
		for i := range before {
			switch d := after[i] - before[i]; {
			case d == 0:
			case d == 1 && moved < 0:
				moved = i
			default:
				t.Fatalf("counter %s moved by %d (after %v)", statNames[i], d, moved)
			}
		}
		switch {
		case moved < 0:
			t.Fatalf("no counter moved, verdict %d", verdict)
		case verdict != bpfasm.XDPPass && verdict != bpfasm.XDPDrop:
			t.Fatalf("verdict %d", verdict)
		case moved >= statDroppedOuterTTL && verdict != bpfasm.XDPDrop:
			t.Fatalf("%s with verdict %d, want XDP_DROP", statNames[moved], verdict)
		case verdict == bpfasm.XDPDrop && moved < statDroppedOuterTTL && moved != statPassedInvalid:
			t.Fatalf("XDP_DROP counted %s", statNames[moved])
		}
	})
}

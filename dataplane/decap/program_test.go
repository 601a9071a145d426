package decap

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net/netip"
	"testing"

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

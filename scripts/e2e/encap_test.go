package e2e

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"xlb/dataplane/craft"
	"xlb/dataplane/packet"
	"xlb/scripts/testbed"
)

// encapCase is one encapsulating service of the tests' config: a UDP
// datagram from the client to vip:port must reach backend be wrapped in
// the outer headers that method names.
type encapCase struct {
	name string
	vip  netip.Addr
	port uint16
	be   string // bed backend name
	gue  bool
}

var encapCases = []encapCase{
	{"IPIP/IPv4-in-IPv4", testbed.VIP4, portIPIP4, "b1", false},
	{"GUE/IPv4-in-IPv4", testbed.VIP4, portGUE4, "b2", true},
	{"GUE/IPv6-in-IPv6", testbed.VIP6, portGUE6, "b3", true},
}

// checkEncapFrame sends a crafted frame from the client to the VIP and
// checks, byte by byte, the frame that reaches the backend: outer
// Ethernet (backend's MAC from the balancer's), outer IP from the
// balancer's address on the backends' subnet to the backend, for GUE a
// UDP header to the configured port and a GUE header naming the inner
// family, and then the client's IP packet exactly as it was sent. The
// fields xlb chooses freely (outer IPv4 identification, GUE source port,
// IPv6 flow label) are taken from the captured frame after checking their
// range. Nothing decapsulates it yet (checkDecapsulated attaches `xlb
// decap` later, which would hide the outer headers from the capture).
func checkEncapFrame(t *testing.T, b *testbed.Bed, tc encapCase) {
	be := b.Backend(tc.be)
	c := b.Clients[0]
	v6 := tc.vip.Is6()
	src, outerSrc, outerDst := c.Addr4, testbed.LBBackendSide4, be.Addr4
	if v6 {
		src, outerSrc, outerDst = c.Addr6, testbed.LBBackendSide6, be.Addr6
	}
	sent, err := craft.Build(&craft.Packet{
		Src: src, Dst: tc.vip, Proto: packet.ProtoUDP, SrcPort: 41000 + tc.port%1000, DstPort: tc.port,
		PayloadLen: 100, SrcMAC: c.MAC, DstMAC: testbed.LBMAC,
	})
	if err != nil {
		t.Fatal(err)
	}
	inner := sent[14:]

	capt := openPacketSocket(t, be.Host)
	out := openPacketSocket(t, c)
	var got []byte
	for try := 0; try < 3 && got == nil; try++ {
		if err := out.send(sent); err != nil {
			t.Fatalf("sending from %s: %v", c.Name, err)
		}
		got, err = capt.capture(time.Second, func(f []byte) bool {
			return len(f) > len(inner) && bytes.Equal(f[len(f)-len(inner):], inner)
		})
		if err != nil {
			t.Fatalf("capturing on %s: %v", be.Name, err)
		}
	}
	if got == nil {
		t.Fatalf("no frame carrying the client's packet reached %s", be.Name)
	}

	want := wantEncap(t, got, inner, be.MAC, outerSrc, outerDst, tc.gue)
	if !bytes.Equal(got, want) {
		t.Errorf("frame at %s differs from the expected encapsulation:\n%s", be.Name, hexDiff(got, want))
	} else {
		t.Logf("%s: %d bytes, outer %s -> %s, inner %d bytes unchanged", be.Name, len(got), outerSrc, outerDst, len(inner))
	}
}

// wantEncap builds the frame xlb must send for inner, copying from got
// only the free fields, each checked first.
func wantEncap(t *testing.T, got, inner []byte, dstMAC []byte, src, dst netip.Addr, gue bool) []byte {
	t.Helper()
	var w []byte
	w = append(w, dstMAC...)
	w = append(w, testbed.LBMAC...)
	udpLen := 8 + 4 + len(inner)
	payloadLen := len(inner)
	if gue {
		payloadLen = udpLen
	}
	if src.Is4() {
		proto := byte(4) // IPIP
		if gue {
			proto = 17
		}
		if len(got) < 34 {
			t.Fatalf("frame of %d bytes", len(got))
		}
		ip := []byte{0x45, inner[1], 0, 0, got[18], got[19], 0, 0, 64, proto, 0, 0}
		binary.BigEndian.PutUint16(ip[2:], uint16(20+payloadLen))
		if inner[6]&0x40 != 0 {
			ip[6] = 0x40 // DF as the client asked
		}
		ip = append(ip, src.AsSlice()...)
		ip = append(ip, dst.AsSlice()...)
		binary.BigEndian.PutUint16(ip[10:], inetChecksum(ip))
		w = append(binary.BigEndian.AppendUint16(w, 0x0800), ip...)
	} else {
		if len(got) < 54 {
			t.Fatalf("frame of %d bytes", len(got))
		}
		tc := inner[0]<<4 | inner[1]>>4
		flow := binary.BigEndian.Uint32(got[14:]) & 0xfffff
		ip := binary.BigEndian.AppendUint32(nil, 6<<28|uint32(tc)<<20|flow)
		ip = binary.BigEndian.AppendUint16(ip, uint16(payloadLen))
		ip = append(ip, 17, 64)
		ip = append(ip, src.AsSlice()...)
		ip = append(ip, dst.AsSlice()...)
		w = append(binary.BigEndian.AppendUint16(w, 0x86dd), ip...)
	}
	if gue {
		off := len(w)
		if len(got) < off+12 {
			t.Fatalf("frame of %d bytes: no room for UDP and GUE", len(got))
		}
		sport := binary.BigEndian.Uint16(got[off:])
		if sport < 0xc000 {
			t.Errorf("GUE source port %d: want one of the ephemeral range 49152-65535", sport)
		}
		innerProto := byte(4)
		if src.Is6() {
			innerProto = 41
		}
		udp := binary.BigEndian.AppendUint16(nil, sport)
		udp = binary.BigEndian.AppendUint16(udp, guePort)
		udp = binary.BigEndian.AppendUint16(udp, uint16(udpLen))
		udp = append(udp, 0, 0)                // checksum: none over IPv4
		udp = append(udp, 0, innerProto, 0, 0) // GUE version 0, no options, proto = inner family
		if src.Is6() {
			// IPv6 needs a real UDP checksum (a zero one is dropped).
			ph := append(append(src.AsSlice(), dst.AsSlice()...), 0, 0, byte(udpLen>>8), byte(udpLen), 0, 0, 0, 17)
			c := inetChecksum(append(append(ph, udp...), inner...))
			if c == 0 {
				c = 0xffff
			}
			binary.BigEndian.PutUint16(udp[6:], c)
		}
		w = append(w, udp...)
	}
	return append(w, inner...)
}

// hexDiff shows two frames side by side, 16 bytes a line, marking lines
// that differ.
func hexDiff(got, want []byte) string {
	var s strings.Builder
	fmt.Fprintf(&s, "got %d bytes, want %d\n", len(got), len(want))
	for off := 0; off < max(len(got), len(want)); off += 16 {
		g, w := window(got, off), window(want, off)
		mark := "  "
		if !bytes.Equal(g, w) {
			mark = "!!"
		}
		fmt.Fprintf(&s, "%s %04x got % x\n        want % x\n", mark, off, g, w)
	}
	return s.String()
}

func window(b []byte, off int) []byte {
	if off >= len(b) {
		return nil
	}
	return b[off:min(off+16, len(b))]
}

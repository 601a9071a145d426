package decap

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net/netip"
	"testing"

	"github.com/cilium/ebpf"

	"xlb/dataplane/craft"
	"xlb/dataplane/packet"
	"xlb/internal/nettest"
)

// Addresses used only inside frames and test namespaces.
var (
	local4  = netip.MustParseAddr("10.201.0.11")
	local6  = netip.MustParseAddr("fd00:201::11")
	other4  = netip.MustParseAddr("10.201.0.12")
	other6  = netip.MustParseAddr("fd00:201::12")
	lb4     = netip.MustParseAddr("10.201.0.2")
	lb6     = netip.MustParseAddr("fd00:201::2")
	client4 = netip.MustParseAddr("10.202.0.101")
	client6 = netip.MustParseAddr("fd00:202::101")
	vip4    = netip.MustParseAddr("10.203.0.10")
	vip6    = netip.MustParseAddr("fd00:203::10")
	lbMAC   = [6]byte{0x02, 0x97, 0, 0, 0, 0x02}
	beMAC   = [6]byte{0x02, 0x97, 0, 0, 0, 0x11}
)

const testPort = 6080 // GUE port of the tests' program

// load loads the program for port with local4 and local6 as the local
// addresses, lb4 and lb6 the balancers allowed, vip4 and vip6 the VIPs;
// without root or BPF it skips, saying why.
func load(tb testing.TB, port uint16) *Objects {
	tb.Helper()
	nettest.RequireRootTo(tb, "load BPF programs")
	o, err := Load(port)
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
	if err := o.SetLocal([]netip.Addr{local4, local6}); err != nil {
		tb.Fatalf("SetLocal: %v", err)
	}
	if err := o.SetAllow(hosts(lb4, lb6)); err != nil {
		tb.Fatalf("SetAllow: %v", err)
	}
	if err := o.SetVIPs(hosts(vip4, vip6)); err != nil {
		tb.Fatalf("SetVIPs: %v", err)
	}
	return o
}

// hosts are the single-address prefixes of addrs.
func hosts(addrs ...netip.Addr) []netip.Prefix {
	out := make([]netip.Prefix, len(addrs))
	for i, a := range addrs {
		out[i] = netip.PrefixFrom(a, a.BitLen())
	}
	return out
}

// inner builds the client's frame to the VIP of vip's family: TCP or UDP,
// with an 802.1Q tag when vlan > 0.
func inner(tb testing.TB, v6 bool, proto packet.Proto, vlan uint16) []byte {
	tb.Helper()
	p := &craft.Packet{Src: client4, Dst: vip4, Proto: proto, SrcPort: 41000, DstPort: 80,
		Flags: "S", PayloadLen: 100, VLAN: vlan}
	if v6 {
		p.Src, p.Dst = client6, vip6
	}
	f, err := craft.Build(p)
	if err != nil {
		tb.Fatal(err)
	}
	return f
}

// encap wraps frame as xlb does (dataplane/packet's Encapsulate, the
// writer the program must undo) for a backend at dst, from src.
func encap(tb testing.TB, frame []byte, src, dst netip.Addr, gue bool) []byte {
	tb.Helper()
	var p packet.Parsed
	if err := packet.Parse(frame, &p); err != nil {
		tb.Fatalf("parsing the inner frame: %v", err)
	}
	const headroom = 128
	buf := make([]byte, headroom+len(frame))
	copy(buf[headroom:], frame)
	e := packet.Encap{SrcMAC: lbMAC, DstMAC: beMAC, OuterSrc: src.As16(), OuterDst: dst.As16(),
		OuterV6: dst.Is6(), GUE: gue, GUEPort: testPort, FlowHash: 0x12345678, IPID: 7}
	off, n, err := packet.Encapsulate(buf, headroom, &p, &e, 9000)
	if err != nil {
		tb.Fatalf("Encapsulate: %v", err)
	}
	return buf[off : off+n]
}

// decapsulated is what the program must pass for the encapsulated frame
// of inner: the outer frame's MACs, inner's tag (if any), EtherType and
// IP packet.
func decapsulated(inner []byte) []byte {
	out := append([]byte{}, beMAC[:]...)
	out = append(out, lbMAC[:]...)
	return append(out, inner[12:]...)
}

// run runs the program once on frame and returns the verdict and the
// frame it leaves, checking that exactly the counter stat moved (-1: any
// one of the decapsulation counters).
func run(tb testing.TB, o *Objects, frame []byte, stat int) (uint32, []byte) {
	tb.Helper()
	before := stats(tb, o)
	out := make([]byte, len(frame)+512)
	opts := &ebpf.RunOptions{Data: frame, DataOut: out}
	verdict, err := o.Program.Run(opts)
	if err != nil {
		tb.Fatalf("Program.Run: %v", err)
	}
	after := stats(tb, o)
	if stat < 0 {
		for _, i := range []int{statIPIP4, statIPIP6, statGUE4, statGUE6} {
			if after[i] != before[i] {
				stat = i
			}
		}
		if stat < 0 {
			tb.Errorf("no decapsulation counter moved")
			return verdict, opts.DataOut
		}
	}
	for i := range before {
		d := after[i] - before[i]
		switch {
		case i == stat && d == 0:
			tb.Errorf("counter %s did not move", statNames[i])
		case i != stat && d != 0:
			tb.Errorf("counter %s moved by %d, want only %s", statNames[i], d, statNames[stat])
		}
	}
	return verdict, opts.DataOut
}

var statNames = [numStats]string{"ipip_outer_v4", "ipip_outer_v6", "gue_outer_v4", "gue_outer_v6",
	"passed_not_tunnel", "passed_not_local", "passed_invalid",
	"dropped_outer_ttl_zero", "dropped_outer_martian", "dropped_outer_not_allowed",
	"dropped_inner_martian", "dropped_inner_own", "dropped_inner_not_served"}

func stats(tb testing.TB, o *Objects) [numStats]uint64 {
	tb.Helper()
	s, err := o.Stats()
	if err != nil {
		tb.Fatalf("Stats: %v", err)
	}
	var a [numStats]uint64
	a[statIPIP4], a[statIPIP6], a[statGUE4], a[statGUE6] = s.IPIP4, s.IPIP6, s.GUE4, s.GUE6
	a[statPassedNotTunnel], a[statPassedNotLocal], a[statPassedInvalid] = s.PassedNotTunnel, s.PassedNotLocal, s.PassedInvalid
	a[statDroppedOuterTTL], a[statDroppedOuterMartian], a[statDroppedNotAllowed] = s.DroppedOuterTTL, s.DroppedOuterMartian, s.DroppedNotAllowed
	a[statDroppedInnerMartian], a[statDroppedInnerOwn], a[statDroppedNotServed] = s.DroppedInnerMartian, s.DroppedInnerOwn, s.DroppedNotServed
	return a
}

// edit returns a copy of frame changed by fn.
func edit(frame []byte, fn func(f []byte) []byte) []byte {
	return fn(bytes.Clone(frame))
}

// insertAt returns frame with n zero bytes inserted at off.
func insertAt(frame []byte, off, n int) []byte {
	out := append([]byte{}, frame[:off]...)
	out = append(out, make([]byte, n)...)
	return append(out, frame[off:]...)
}

// addBE adds d to the big-endian 16-bit field at off.
func addBE(f []byte, off, d int) {
	binary.BigEndian.PutUint16(f[off:], uint16(int(binary.BigEndian.Uint16(f[off:]))+d))
}

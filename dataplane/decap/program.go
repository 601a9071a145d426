package decap

import (
	"encoding/binary"
	"fmt"

	"github.com/cilium/ebpf/asm"

	"xlb/dataplane/packet"
	"xlb/internal/bpfasm"
)

// Indexes of the Counters map, one per outcome.
const (
	statIPIP4               = iota // IPIP decapsulated, outer IPv4
	statIPIP6                      // IPIP decapsulated, outer IPv6
	statGUE4                       // GUE decapsulated, outer IPv4
	statGUE6                       // GUE decapsulated, outer IPv6
	statPassedNotTunnel            // not IPIP, not UDP to the GUE port, not IP: the host's
	statPassedNotLocal             // a tunnel packet to an address not in Local
	statPassedInvalid              // truncated, malformed, fragmented or unsupported
	statDroppedOuterTTL            // outer TTL or hop limit 0
	statDroppedOuterMartian        // outer source that no host sends from (Martians)
	statDroppedNotAllowed          // outer source not in Allow
	statDroppedInnerMartian        // inner source that no client has (Martians)
	statDroppedInnerOwn            // inner source this host's, a VIP's or a balancer's
	statDroppedNotServed           // inner destination not in VIPs: never forwarded on
	numStats
)

// Map names as the program references them (and as bpftool shows them).
const (
	nameLocal    = "xlb_decap_local"
	nameAllow    = "xlb_decap_allow"
	nameVIPs     = "xlb_decap_vips"
	nameMartian  = "xlb_decap_martian"
	nameCounters = "xlb_decap_stats"
)

// Header layout.
const (
	ipv4ProtoOff   = 9
	ipv4TTLOff     = 8
	ipv4SrcOff     = 12
	ipv4DstOff     = 16
	ipv6HopOff     = 7
	ipv6SrcOff     = 8
	ipv6DstOff     = 24
	ipv6NextOff    = 6
	udpLenOff      = 4
	udpDstPortOff  = 2
	gueFirstOff    = packet.UDPLen     // version (2 bits), C, hlen (5 bits)
	gueProtoOff    = packet.UDPLen + 1 // inner IP protocol
	gueMinLen      = packet.UDPLen + packet.GUEHeaderLen
	gueVersionMask = 0xe0 // version 0 and no control bit: the top 3 bits 0
	gueHlenMask    = 0x1f
)

// Stack layout: the 16-byte address key at fp-16, the counter index at
// fp-20, the Ethernet header being moved at fp-40..fp-23 (MACs at fp-40,
// -36, -32; 802.1Q tag at fp-28; EtherType at fp-28, or fp-24 after a tag),
// the 24-byte prefix key (see prefixKey) at fp-64, the bytes to strip kept
// across the inner checks' calls at fp-72.
const (
	stackKey   = -16
	stackStat  = -20
	stackMAC   = -40
	stackTag   = -28
	stackLPM   = -64
	stackStrip = -72
)

// outer is one outer family's copy of the tunnel code.
type outer struct {
	name      string // label suffix
	ipip, gue int32  // counter indexes
}

// instructions returns the program for GUE port guePort. Registers: r6 =
// ctx (then the verdict), r7 = data (then the counter index), r8 =
// data_end, r9 = the header being read; r1–r5 are scratch and clobbered by
// calls. In the tunnel blocks r3 = the next protocol, r4 = the bytes to
// strip, r5 = the bytes the outer headers say follow.
func instructions(guePort uint16) (asm.Instructions, error) {
	b := &bpfasm.Builder{}
	const (
		invalid   = "invalid"
		notTunnel = "not_tunnel"
		notLocal  = "not_local"
		count     = "count"
	)
	port := bpfasm.BE16(guePort)

	b.Ethernet(invalid)
	// One 802.1Q tag: the one strip puts back. A second tag, or an
	// 802.1ad one, is not IP here: the kernel's.
	b.VLAN(1, []uint16{packet.EtherTypeVLAN}, invalid)
	b.EtherTypeIP("ipv4", "ipv6", notTunnel)

	// IPv4: a tunnel by its protocol (and the UDP port), then local? then
	// valid?
	b.Mark("ipv4")
	b.Need(packet.IPv4MinLen, invalid)
	b.Emit(
		asm.LoadMem(asm.R1, asm.R9, ipv4ProtoOff, asm.Byte),
		asm.JEq.Imm(asm.R1, int32(packet.ProtoIPIP), "tun_v4"),
		asm.JEq.Imm(asm.R1, int32(packet.ProtoIPv6), "tun_v4"),
		asm.JNE.Imm(asm.R1, int32(packet.ProtoUDP), notTunnel),
		asm.LoadMem(asm.R1, asm.R9, 0, asm.Byte),
		asm.And.Imm(asm.R1, 0x0f),
		asm.LSh.Imm(asm.R1, 2), // IHL in bytes, at most 60
		asm.Mov.Reg(asm.R3, asm.R9),
		asm.Add.Reg(asm.R3, asm.R1),
		asm.Mov.Reg(asm.R4, asm.R3),
		asm.Add.Imm(asm.R4, packet.UDPLen),
		asm.JGT.Reg(asm.R4, asm.R8, notTunnel), // no UDP header: not ours to judge
		asm.LoadMem(asm.R2, asm.R3, udpDstPortOff, asm.Half),
		asm.JNE.Imm(asm.R2, port, notTunnel),
	)
	b.Mark("tun_v4")
	b.VIPKeyV4(stackKey, invalid)
	b.LookupVIP(nameLocal, stackKey, 4, notLocal)
	outerChecks(b, false)
	b.IPv4Header(invalid)
	b.IPv4Length(invalid)
	b.IPv4Fragment(invalid) // the kernel reassembles
	b.Emit(
		asm.Mov.Reg(asm.R5, asm.R2),
		asm.Sub.Reg(asm.R5, asm.R1),
		asm.LoadMem(asm.R3, asm.R9, ipv4ProtoOff, asm.Byte),
		asm.Mov.Reg(asm.R4, asm.R1),
		asm.Add.Reg(asm.R9, asm.R1),
		asm.Ja.Label("proto_v4"),
	)

	// IPv6: the fixed header's next header only.
	b.Mark("ipv6")
	b.Need(packet.IPv6FixedLen, invalid)
	b.Emit(
		asm.LoadMem(asm.R1, asm.R9, ipv6NextOff, asm.Byte),
		asm.JEq.Imm(asm.R1, int32(packet.ProtoIPIP), "tun_v6"),
		asm.JEq.Imm(asm.R1, int32(packet.ProtoIPv6), "tun_v6"),
		asm.JNE.Imm(asm.R1, int32(packet.ProtoUDP), notTunnel),
	)
	b.Need(packet.IPv6FixedLen+packet.UDPLen, notTunnel)
	b.Emit(
		asm.LoadMem(asm.R2, asm.R9, packet.IPv6FixedLen+udpDstPortOff, asm.Half),
		asm.JNE.Imm(asm.R2, port, notTunnel),
	)
	b.Mark("tun_v6")
	b.VIPKeyV6(stackKey)
	b.LookupVIP(nameLocal, stackKey, 6, notLocal)
	outerChecks(b, true)
	b.IPVersion(6, invalid)
	b.IPv6Length(invalid)
	b.Emit(
		asm.Mov.Reg(asm.R5, asm.R2),
		asm.Sub.Imm(asm.R5, packet.IPv6FixedLen),
		asm.LoadMem(asm.R3, asm.R9, ipv6NextOff, asm.Byte),
		asm.Mov.Imm(asm.R4, packet.IPv6FixedLen),
		asm.Add.Imm(asm.R9, packet.IPv6FixedLen),
		asm.Ja.Label("proto_v6"),
	)

	for _, o := range []outer{
		{name: "v4", ipip: statIPIP4, gue: statGUE4},
		{name: "v6", ipip: statIPIP6, gue: statGUE6},
	} {
		tunnel(b, o, invalid)
	}
	innerChecks(b, false)
	innerChecks(b, true)
	strip(b, invalid, count)

	b.Verdict(invalid, bpfasm.XDPPass, statPassedInvalid, count)
	b.Verdict(notTunnel, bpfasm.XDPPass, statPassedNotTunnel, count)
	b.Verdict(notLocal, bpfasm.XDPPass, statPassedNotLocal, count)
	b.Verdict(dropOuterTTL, bpfasm.XDPDrop, statDroppedOuterTTL, count)
	b.Verdict(dropOuterMartian, bpfasm.XDPDrop, statDroppedOuterMartian, count)
	b.Verdict(dropNotAllowed, bpfasm.XDPDrop, statDroppedNotAllowed, count)
	b.Verdict(dropInnerMartian, bpfasm.XDPDrop, statDroppedInnerMartian, count)
	b.Verdict(dropInnerOwn, bpfasm.XDPDrop, statDroppedInnerOwn, count)
	b.Verdict(dropNotServed, bpfasm.XDPDrop, statDroppedNotServed, count)
	b.Count(count, nameCounters, stackStat)
	return b.Instructions()
}

// tunnel emits the blocks of one outer family, from label proto_NAME: r3
// the protocol after the outer IP header at r9, r4 its length, r5 the
// bytes it says follow.
func tunnel(b *bpfasm.Builder, o outer, invalid string) {
	l := func(s string) string { return s + "_" + o.name }
	b.Mark(l("proto"))
	b.Emit(
		asm.JNE.Imm(asm.R3, int32(packet.ProtoUDP), l("ipip")),
	)
	// GUE: UDP length within the outer payload, version 0 without the
	// control bit, the options (hlen words) within the UDP payload.
	b.Need(gueMinLen, invalid)
	b.Emit(
		asm.LoadMem(asm.R1, asm.R9, udpLenOff, asm.Half),
		asm.HostTo(asm.BE, asm.R1, asm.Half),
		asm.JLT.Imm(asm.R1, gueMinLen, invalid),
		asm.JGT.Reg(asm.R1, asm.R5, invalid),
		asm.Mov.Reg(asm.R5, asm.R1),
		asm.LoadMem(asm.R1, asm.R9, gueFirstOff, asm.Byte),
		asm.Mov.Reg(asm.R2, asm.R1),
		asm.And.Imm(asm.R2, gueVersionMask),
		asm.JNE.Imm(asm.R2, 0, invalid),
		asm.And.Imm(asm.R1, gueHlenMask),
		asm.LSh.Imm(asm.R1, 2),
		asm.Add.Imm(asm.R1, gueMinLen), // UDP + GUE + options, at most 136
		asm.JGT.Reg(asm.R1, asm.R5, invalid),
		asm.Sub.Reg(asm.R5, asm.R1),
		asm.LoadMem(asm.R3, asm.R9, gueProtoOff, asm.Byte),
		asm.Add.Reg(asm.R4, asm.R1),
		asm.Add.Reg(asm.R9, asm.R1),
		asm.Ja.Label(l("inner_gue")),
	)
	for _, kind := range []struct {
		label string
		stat  int32
	}{{"ipip", o.ipip}, {"inner_gue", o.gue}} {
		k := l(kind.label)
		in4, in6 := k+"_in4", k+"_in6"
		b.Mark(k)
		b.Emit(
			asm.JEq.Imm(asm.R3, int32(packet.ProtoIPIP), in4),
			asm.JEq.Imm(asm.R3, int32(packet.ProtoIPv6), in6),
			asm.Ja.Label(invalid),
		)
		for _, in := range []struct {
			label     string
			version   int32
			minLen    int32
			etherType uint16
		}{{in4, 4, packet.IPv4MinLen, packet.EtherTypeIPv4}, {in6, 6, packet.IPv6FixedLen, packet.EtherTypeIPv6}} {
			b.Mark(in.label)
			b.Need(in.minLen, invalid)
			b.Emit(asm.JLT.Imm(asm.R5, in.minLen, invalid))
			b.IPVersion(in.version, invalid)
			b.Emit(
				// Both kept on the stack across the inner checks' calls.
				asm.Mov.Imm(asm.R0, kind.stat),
				asm.StoreMem(asm.RFP, stackStat, asm.R0, asm.Word),
				asm.StoreMem(asm.RFP, stackStrip, asm.R4, asm.DWord),
				asm.Ja.Label(fmt.Sprintf("inner%d", in.version)),
			)
		}
	}
}

// Labels of the drop verdicts.
const (
	dropOuterTTL     = "drop_outer_ttl"
	dropOuterMartian = "drop_outer_martian"
	dropNotAllowed   = "drop_not_allowed"
	dropInnerMartian = "drop_inner_martian"
	dropInnerOwn     = "drop_inner_own"
	dropNotServed    = "drop_not_served"
)

// outerChecks emits the checks of the outer header's source at r9 (its
// fixed part, which the caller has bounds-checked): TTL or hop limit not
// 0, the source no martian and in Allow. Only what the balancers send
// goes on; the rest is dropped, not passed: a kernel with tunnel devices
// would decapsulate it unchecked. Clobbers r0-r5.
func outerChecks(b *bpfasm.Builder, v6 bool) {
	ttl, src := int16(ipv4TTLOff), int16(ipv4SrcOff)
	if v6 {
		ttl, src = ipv6HopOff, ipv6SrcOff
	}
	b.Emit(
		asm.LoadMem(asm.R1, asm.R9, ttl, asm.Byte),
		asm.JEq.Imm(asm.R1, 0, dropOuterTTL),
	)
	prefixKey(b, v6, src)
	lookupPrefix(b, nameMartian, dropOuterMartian, "")
	lookupPrefix(b, nameAllow, "", dropNotAllowed)
}

// innerChecks emits the block at label innerV (V the inner version) that
// checks the inner header at r9 before strip: its source no martian, not
// a balancer's (Allow), not a VIP nor a local address of this host; its
// destination a VIP, so that the kernel only ever delivers the inner
// packet locally and never routes it on. The bytes to strip and the
// counter index come from the stack, where the tunnel blocks left them.
func innerChecks(b *bpfasm.Builder, v6 bool) {
	src, dst, v, etherType := int16(ipv4SrcOff), int16(ipv4DstOff), int32(4), uint16(packet.EtherTypeIPv4)
	if v6 {
		src, dst, v, etherType = ipv6SrcOff, ipv6DstOff, 6, packet.EtherTypeIPv6
	}
	b.Mark(fmt.Sprintf("inner%d", v))
	prefixKey(b, v6, src)
	lookupPrefix(b, nameMartian, dropInnerMartian, "")
	lookupPrefix(b, nameAllow, dropInnerOwn, "")
	lookupPrefix(b, nameVIPs, dropInnerOwn, "")
	addrKey(b, v6, src)
	b.Emit(
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, stackKey),
		asm.LoadMapPtr(asm.R1, 0).WithReference(nameLocal),
		asm.FnMapLookupElem.Call(),
		asm.JNE.Imm(asm.R0, 0, dropInnerOwn),
	)
	prefixKey(b, v6, dst)
	lookupPrefix(b, nameVIPs, "", dropNotServed)
	b.Emit(
		asm.Mov.Imm(asm.R5, bpfasm.BE16(etherType)),
		asm.LoadMem(asm.R4, asm.RFP, stackStrip, asm.DWord),
		asm.LoadMem(asm.R0, asm.RFP, stackStat, asm.Word),
		asm.Ja.Label("strip"),
	)
}

// prefixKey writes the prefix-map key (see prefixKeyOf) of the address at
// r9+off, of the whole address's length, at stackLPM.
func prefixKey(b *bpfasm.Builder, v6 bool, off int16) {
	bits, family := int64(32+32), []byte{0, 0, 0, 4}
	if v6 {
		bits, family = 32+128, []byte{0, 0, 0, 6}
	}
	b.Emit(
		asm.StoreImm(asm.RFP, stackLPM, bits, asm.Word),
		asm.StoreImm(asm.RFP, stackLPM+4, int64(int32(binary.NativeEndian.Uint32(family))), asm.Word),
	)
	if v6 {
		b.Emit(
			asm.LoadMem(asm.R3, asm.R9, off, asm.DWord),
			asm.StoreMem(asm.RFP, stackLPM+8, asm.R3, asm.DWord),
			asm.LoadMem(asm.R3, asm.R9, off+8, asm.DWord),
			asm.StoreMem(asm.RFP, stackLPM+16, asm.R3, asm.DWord),
		)
		return
	}
	b.Emit(
		asm.LoadMem(asm.R3, asm.R9, off, asm.Word),
		asm.StoreMem(asm.RFP, stackLPM+8, asm.R3, asm.Word),
		asm.StoreImm(asm.RFP, stackLPM+12, 0, asm.Word),
		asm.StoreImm(asm.RFP, stackLPM+16, 0, asm.Word),
		asm.StoreImm(asm.RFP, stackLPM+20, 0, asm.Word),
	)
}

// lookupPrefix looks the key at stackLPM up in the prefix map m and jumps
// to hit when it is covered, to miss when it is not ("": fall through).
func lookupPrefix(b *bpfasm.Builder, m, hit, miss string) {
	b.Emit(
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, stackLPM),
		asm.LoadMapPtr(asm.R1, 0).WithReference(m),
		asm.FnMapLookupElem.Call(),
	)
	if hit != "" {
		b.Emit(asm.JNE.Imm(asm.R0, 0, hit))
	}
	if miss != "" {
		b.Emit(asm.JEq.Imm(asm.R0, 0, miss))
	}
}

// addrKey writes the Local map's key of the address at r9+off at stackKey.
func addrKey(b *bpfasm.Builder, v6 bool, off int16) {
	if v6 {
		b.Emit(
			asm.LoadMem(asm.R3, asm.R9, off, asm.DWord),
			asm.StoreMem(asm.RFP, stackKey, asm.R3, asm.DWord),
			asm.LoadMem(asm.R3, asm.R9, off+8, asm.DWord),
			asm.StoreMem(asm.RFP, stackKey+8, asm.R3, asm.DWord),
		)
		return
	}
	b.Emit(
		asm.StoreImm(asm.RFP, stackKey, 0, asm.Word),
		asm.StoreImm(asm.RFP, stackKey+4, 0, asm.Word),
		asm.StoreImm(asm.RFP, stackKey+8, bpfasm.MappedPrefix(), asm.Word),
		asm.LoadMem(asm.R3, asm.R9, off, asm.Word),
		asm.StoreMem(asm.RFP, stackKey+12, asm.R3, asm.Word),
	)
}

// strip emits the block that removes r4 bytes after the Ethernet header
// (and tag) and gives the frame EtherType r5; r0 is the counter index.
// The Ethernet header goes to the stack first, so a failed adjust leaves
// the frame as it was.
func strip(b *bpfasm.Builder, invalid, count string) {
	b.Mark("strip")
	b.Emit(
		asm.StoreMem(asm.RFP, stackStat, asm.R0, asm.Word),
		asm.LoadMem(asm.R1, asm.R7, 0, asm.Word),
		asm.StoreMem(asm.RFP, stackMAC, asm.R1, asm.Word),
		asm.LoadMem(asm.R1, asm.R7, 4, asm.Word),
		asm.StoreMem(asm.RFP, stackMAC+4, asm.R1, asm.Word),
		asm.LoadMem(asm.R1, asm.R7, 8, asm.Word),
		asm.StoreMem(asm.RFP, stackMAC+8, asm.R1, asm.Word),
		asm.Mov.Imm(asm.R9, bpfasm.EthLen),
		asm.LoadMem(asm.R1, asm.R7, 12, asm.Half),
		asm.StoreMem(asm.RFP, stackTag, asm.R5, asm.Half),
		asm.StoreMem(asm.RFP, stackTag+4, asm.R5, asm.Half),
		asm.JNE.Imm(asm.R1, bpfasm.BE16(packet.EtherTypeVLAN), "adjust"),
		asm.LoadMem(asm.R1, asm.R7, 12, asm.Word),
		asm.StoreMem(asm.RFP, stackTag, asm.R1, asm.Word),
		asm.Mov.Imm(asm.R9, bpfasm.EthLen+packet.VLANTagLen),
	)
	b.Mark("adjust")
	b.Emit(
		asm.Mov.Reg(asm.R1, asm.R6),
		asm.Mov.Reg(asm.R2, asm.R4),
		asm.FnXdpAdjustHead.Call(),
		asm.JNE.Imm(asm.R0, 0, invalid),
		asm.LoadMem(asm.R7, asm.R6, bpfasm.MDData, asm.Word),
		asm.LoadMem(asm.R8, asm.R6, bpfasm.MDDataEnd, asm.Word),
		asm.Mov.Reg(asm.R3, asm.R7),
		asm.Add.Imm(asm.R3, bpfasm.EthLen+packet.VLANTagLen),
		// Never taken: the inner IP header is longer than the Ethernet one.
		asm.JGT.Reg(asm.R3, asm.R8, "lost"),
		asm.LoadMem(asm.R1, asm.RFP, stackMAC, asm.Word),
		asm.StoreMem(asm.R7, 0, asm.R1, asm.Word),
		asm.LoadMem(asm.R1, asm.RFP, stackMAC+4, asm.Word),
		asm.StoreMem(asm.R7, 4, asm.R1, asm.Word),
		asm.LoadMem(asm.R1, asm.RFP, stackMAC+8, asm.Word),
		asm.StoreMem(asm.R7, 8, asm.R1, asm.Word),
		asm.JNE.Imm(asm.R9, bpfasm.EthLen, "tagged"),
		asm.LoadMem(asm.R1, asm.RFP, stackTag, asm.Half),
		asm.StoreMem(asm.R7, 12, asm.R1, asm.Half),
		asm.Ja.Label("passed"),
	)
	b.Mark("tagged")
	b.Emit(
		asm.LoadMem(asm.R1, asm.RFP, stackTag, asm.Word),
		asm.StoreMem(asm.R7, 12, asm.R1, asm.Word),
		asm.LoadMem(asm.R1, asm.RFP, stackTag+4, asm.Half),
		asm.StoreMem(asm.R7, 16, asm.R1, asm.Half),
	)
	b.Mark("passed")
	b.Emit(
		asm.Mov.Imm(asm.R6, bpfasm.XDPPass),
		asm.LoadMem(asm.R7, asm.RFP, stackStat, asm.Word),
		asm.Ja.Label(count),
	)
	// The outer headers are gone and the Ethernet header could not be
	// written back: nothing sensible to pass.
	b.Mark("lost")
	b.Emit(
		asm.Mov.Imm(asm.R6, bpfasm.XDPDrop),
		asm.Mov.Imm(asm.R7, statPassedInvalid),
		asm.Ja.Label(count),
	)
}

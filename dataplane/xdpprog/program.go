package xdpprog

import (
	"encoding/binary"
	"fmt"

	"github.com/cilium/ebpf/asm"
)

// XDP verdicts (enum xdp_action) the program returns.
const (
	xdpPass     = 2
	xdpRedirect = 4
)

// Indexes of the Counters map, one per verdict path.
const (
	statRedirected = iota
	statPassedNoSocket
	statPassedNotVIP
	statPassedNDP
	statPassedShort
	numStats
)

// Map names as the program references them (and as bpftool shows them).
const (
	nameVIPs     = "xlb_vips"
	nameSockets  = "xlb_xsks"
	nameQueues   = "xlb_queues"
	nameCounters = "xlb_stats"
)

// MaxExtHeaders is how many IPv6 extension headers the program follows to
// find an ICMPv6 header (the engine's parser follows 16; real traffic
// carries one or two).
const MaxExtHeaders = 8

// Offsets into struct xdp_md.
const (
	mdData         = 0
	mdDataEnd      = 4
	mdRxQueueIndex = 16
)

// Header layout.
const (
	ethLen        = 14
	vlanTagLen    = 4
	maxVLANTags   = 2 // 802.1Q, or 802.1ad + 802.1Q, like the engine
	ipv4MinLen    = 20
	ipv6Len       = 40
	protoHopByHop = 0
	protoRouting  = 43
	protoFragment = 44
	protoAH       = 51
	protoICMPv6   = 58
	protoDstOpts  = 60
	ndpFirstType  = 133 // router solicitation
	ndpLastType   = 137 // redirect
)

// Stack layout: the 16-byte VIP key at fp-16, the counter index at fp-20.
const (
	stackKey  = -16
	stackStat = -20
)

// builder emits instructions and attaches each label to the next one.
type builder struct {
	insns asm.Instructions
	label string
	err   error
}

func (b *builder) mark(label string) {
	if b.label != "" && b.err == nil {
		b.err = fmt.Errorf("labels %q and %q on one instruction", b.label, label)
	}
	b.label = label
}

func (b *builder) emit(insns ...asm.Instruction) {
	for _, ins := range insns {
		if b.label != "" {
			ins = ins.WithSymbol(b.label)
			b.label = ""
		}
		b.insns = append(b.insns, ins)
	}
}

// be16 is the value a 16-bit load gives for the big-endian v on this host.
func be16(v uint16) int32 {
	var b [2]byte
	binary.BigEndian.PutUint16(b[:], v)
	return int32(binary.NativeEndian.Uint16(b[:]))
}

// mappedPrefix is the 32-bit word 00 00 ff ff of an IPv4-mapped address,
// as this host stores it.
func mappedPrefix() int64 {
	return int64(int32(binary.NativeEndian.Uint32([]byte{0, 0, 0xff, 0xff})))
}

// instructions returns the program. Registers: r6 = ctx (then the verdict),
// r7 = data (then the counter index), r8 = data_end, r9 = the header being
// read; r1–r5 are scratch and clobbered by calls.
func instructions() (asm.Instructions, error) {
	b := &builder{}
	const (
		short    = "short"
		notVIP   = "not_vip"
		ndp      = "ndp"
		redirect = "redirect"
		ipv4     = "ipv4"
		ipv6     = "ipv6"
		l3       = "l3"
		count    = "count"
	)

	b.emit(
		asm.Mov.Reg(asm.R6, asm.R1),
		asm.LoadMem(asm.R7, asm.R6, mdData, asm.Word),
		asm.LoadMem(asm.R8, asm.R6, mdDataEnd, asm.Word),
		asm.Mov.Reg(asm.R9, asm.R7),
		asm.Add.Imm(asm.R9, ethLen),
		asm.JGT.Reg(asm.R9, asm.R8, short),
		asm.LoadMem(asm.R2, asm.R7, ethLen-2, asm.Half), // EtherType
	)

	// VLAN tags: r9 points past an EtherType; a tag is TCI then EtherType.
	for i := range maxVLANTags {
		tag := fmt.Sprintf("vlan%d", i)
		b.emit(
			asm.JEq.Imm(asm.R2, be16(0x8100), tag),
			asm.JNE.Imm(asm.R2, be16(0x88a8), l3),
		)
		b.mark(tag)
		b.emit(
			asm.Mov.Reg(asm.R3, asm.R9),
			asm.Add.Imm(asm.R3, vlanTagLen),
			asm.JGT.Reg(asm.R3, asm.R8, short),
			asm.LoadMem(asm.R2, asm.R9, 2, asm.Half),
			asm.Add.Imm(asm.R9, vlanTagLen),
		)
	}
	b.mark(l3)
	b.emit(
		asm.JEq.Imm(asm.R2, be16(0x0800), ipv4),
		asm.JEq.Imm(asm.R2, be16(0x86dd), ipv6),
		asm.Ja.Label(notVIP),
	)

	// IPv4: key ::ffff:daddr. Options do not move the destination address.
	b.mark(ipv4)
	b.emit(
		asm.Mov.Reg(asm.R3, asm.R9),
		asm.Add.Imm(asm.R3, ipv4MinLen),
		asm.JGT.Reg(asm.R3, asm.R8, short),
		asm.StoreImm(asm.RFP, stackKey, 0, asm.Word),
		asm.StoreImm(asm.RFP, stackKey+4, 0, asm.Word),
		asm.StoreImm(asm.RFP, stackKey+8, mappedPrefix(), asm.Word),
		asm.LoadMem(asm.R3, asm.R9, 16, asm.Word),
		asm.StoreMem(asm.RFP, stackKey+12, asm.R3, asm.Word),
	)
	lookupVIP(b, 4, notVIP)
	// A VIP packet with a bad header goes to the kernel, which drops it.
	b.emit(
		asm.LoadMem(asm.R1, asm.R9, 0, asm.Byte),
		asm.Mov.Reg(asm.R2, asm.R1),
		asm.RSh.Imm(asm.R2, 4),
		asm.JNE.Imm(asm.R2, 4, short),
		asm.And.Imm(asm.R1, 0x0f),
		asm.JLT.Imm(asm.R1, 5, short),
		asm.LSh.Imm(asm.R1, 2), // IHL in bytes
		asm.LoadMem(asm.R2, asm.R9, 2, asm.Half),
		asm.HostTo(asm.BE, asm.R2, asm.Half), // total length
		asm.JLT.Reg(asm.R2, asm.R1, short),
		asm.Mov.Reg(asm.R3, asm.R9),
		asm.Add.Reg(asm.R3, asm.R2),
		asm.JGT.Reg(asm.R3, asm.R8, short),
		asm.Ja.Label(redirect),
	)

	// IPv6: key = daddr.
	b.mark(ipv6)
	b.emit(
		asm.Mov.Reg(asm.R3, asm.R9),
		asm.Add.Imm(asm.R3, ipv6Len),
		asm.JGT.Reg(asm.R3, asm.R8, short),
		asm.LoadMem(asm.R3, asm.R9, 24, asm.DWord),
		asm.StoreMem(asm.RFP, stackKey, asm.R3, asm.DWord),
		asm.LoadMem(asm.R3, asm.R9, 32, asm.DWord),
		asm.StoreMem(asm.RFP, stackKey+8, asm.R3, asm.DWord),
	)
	lookupVIP(b, 6, notVIP)
	b.emit(
		asm.LoadMem(asm.R1, asm.R9, 0, asm.Byte),
		asm.RSh.Imm(asm.R1, 4),
		asm.JNE.Imm(asm.R1, 6, short),
		asm.LoadMem(asm.R2, asm.R9, 4, asm.Half),
		asm.HostTo(asm.BE, asm.R2, asm.Half), // payload length
		asm.Add.Imm(asm.R2, ipv6Len),
		asm.Mov.Reg(asm.R3, asm.R9),
		asm.Add.Reg(asm.R3, asm.R2),
		asm.JGT.Reg(asm.R3, asm.R8, short),
		asm.LoadMem(asm.R2, asm.R9, 6, asm.Byte), // next header
		asm.Add.Imm(asm.R9, ipv6Len),
	)
	// Extension headers, unrolled: r2 = the type of the header at r9.
	for i := 0; i <= MaxExtHeaders; i++ {
		hdr := fmt.Sprintf("ext%d", i)
		ah := fmt.Sprintf("ah%d", i)
		frag := fmt.Sprintf("frag%d", i)
		next := fmt.Sprintf("next%d", i)
		b.mark(next)
		b.emit(asm.JEq.Imm(asm.R2, protoICMPv6, "icmpv6"))
		if i == MaxExtHeaders {
			// Longer chains than we follow: the kernel decides.
			for _, p := range []int32{protoHopByHop, protoRouting, protoDstOpts, protoFragment, protoAH} {
				b.emit(asm.JEq.Imm(asm.R2, p, short))
			}
			b.emit(asm.Ja.Label(redirect))
			break
		}
		hbh := hdr
		if i > 0 {
			hbh = short // RFC 8200 4.1: hop-by-hop only right after the fixed header
		}
		b.emit(
			asm.JEq.Imm(asm.R2, protoHopByHop, hbh),
			asm.JEq.Imm(asm.R2, protoRouting, hdr),
			asm.JEq.Imm(asm.R2, protoDstOpts, hdr),
			asm.JEq.Imm(asm.R2, protoFragment, frag),
			asm.JEq.Imm(asm.R2, protoAH, ah),
			asm.Ja.Label(redirect), // an upper layer that is not ICMPv6
		)
		// Hop-by-hop, routing, destination options: (len+1) * 8 bytes.
		b.mark(hdr)
		b.emit(
			asm.Mov.Reg(asm.R3, asm.R9),
			asm.Add.Imm(asm.R3, 2),
			asm.JGT.Reg(asm.R3, asm.R8, short),
			asm.LoadMem(asm.R1, asm.R9, 1, asm.Byte),
			asm.Add.Imm(asm.R1, 1),
			asm.LSh.Imm(asm.R1, 3),
			asm.LoadMem(asm.R2, asm.R9, 0, asm.Byte),
			asm.Add.Reg(asm.R9, asm.R1),
			asm.Ja.Label(fmt.Sprintf("next%d", i+1)),
		)
		// AH: (len+2) * 4 bytes (RFC 4302).
		b.mark(ah)
		b.emit(
			asm.Mov.Reg(asm.R3, asm.R9),
			asm.Add.Imm(asm.R3, 2),
			asm.JGT.Reg(asm.R3, asm.R8, short),
			asm.LoadMem(asm.R1, asm.R9, 1, asm.Byte),
			asm.Add.Imm(asm.R1, 2),
			asm.LSh.Imm(asm.R1, 2),
			asm.LoadMem(asm.R2, asm.R9, 0, asm.Byte),
			asm.Add.Reg(asm.R9, asm.R1),
			asm.Ja.Label(fmt.Sprintf("next%d", i+1)),
		)
		// Fragment: 8 bytes; after a non-first fragment comes payload.
		b.mark(frag)
		b.emit(
			asm.Mov.Reg(asm.R3, asm.R9),
			asm.Add.Imm(asm.R3, 8),
			asm.JGT.Reg(asm.R3, asm.R8, short),
			asm.LoadMem(asm.R1, asm.R9, 2, asm.Half),
			asm.And.Imm(asm.R1, be16(0xfff8)), // fragment offset
			asm.JNE.Imm(asm.R1, 0, redirect),
			asm.LoadMem(asm.R2, asm.R9, 0, asm.Byte),
			asm.Add.Imm(asm.R9, 8),
			asm.Ja.Label(fmt.Sprintf("next%d", i+1)),
		)
	}
	// ICMPv6: NDP stays with the kernel; the rest (packet too big, echo…)
	// goes to the workers.
	b.mark("icmpv6")
	b.emit(
		asm.Mov.Reg(asm.R3, asm.R9),
		asm.Add.Imm(asm.R3, 4),
		asm.JGT.Reg(asm.R3, asm.R8, short),
		asm.LoadMem(asm.R1, asm.R9, 0, asm.Byte),
		asm.JLT.Imm(asm.R1, ndpFirstType, redirect),
		asm.JGT.Imm(asm.R1, ndpLastType, redirect),
		asm.Ja.Label(ndp),
	)

	// To the queue's socket. Without one, bpf_redirect_map returns its
	// default action (the flags, XDP_PASS); any answer but XDP_REDIRECT
	// is turned into XDP_PASS as well, so that no path here drops.
	b.mark(redirect)
	b.emit(
		asm.LoadMem(asm.R2, asm.R6, mdRxQueueIndex, asm.Word),
		asm.LoadMapPtr(asm.R1, 0).WithReference(nameSockets),
		asm.Mov.Imm(asm.R3, xdpPass),
		asm.FnRedirectMap.Call(),
		asm.JEq.Imm(asm.R0, xdpRedirect, "redirected"),
		asm.Mov.Imm(asm.R6, xdpPass),
		asm.Mov.Imm(asm.R7, statPassedNoSocket),
		asm.Ja.Label(count),
	)
	b.mark("redirected")
	b.emit(
		asm.Mov.Imm(asm.R6, xdpRedirect),
		asm.Mov.Imm(asm.R7, statRedirected),
		asm.Ja.Label(count),
	)
	for _, p := range []struct {
		label string
		stat  int32
	}{{short, statPassedShort}, {notVIP, statPassedNotVIP}, {ndp, statPassedNDP}} {
		b.mark(p.label)
		b.emit(
			asm.Mov.Imm(asm.R6, xdpPass),
			asm.Mov.Imm(asm.R7, p.stat),
			asm.Ja.Label(count),
		)
	}

	// Count r7 in this CPU's slot and return r6. Per-CPU slots need no
	// atomics: XDP runs with migration disabled.
	b.mark(count)
	b.emit(
		asm.StoreMem(asm.RFP, stackStat, asm.R7, asm.Word),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, stackStat),
		asm.LoadMapPtr(asm.R1, 0).WithReference(nameCounters),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, "out"),
		asm.LoadMem(asm.R1, asm.R0, 0, asm.DWord),
		asm.Add.Imm(asm.R1, 1),
		asm.StoreMem(asm.R0, 0, asm.R1, asm.DWord),
	)
	b.mark("out")
	b.emit(
		asm.Mov.Reg(asm.R0, asm.R6),
		asm.Return(),
	)
	if b.err != nil {
		return nil, b.err
	}
	return b.insns, nil
}

// lookupVIP looks the key at fp-16 up in the VIP map and jumps to miss
// unless it is there with IP version v.
func lookupVIP(b *builder, v int32, miss string) {
	b.emit(
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, stackKey),
		asm.LoadMapPtr(asm.R1, 0).WithReference(nameVIPs),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, miss),
		asm.LoadMem(asm.R1, asm.R0, 0, asm.Byte),
		asm.JNE.Imm(asm.R1, v, miss),
	)
}

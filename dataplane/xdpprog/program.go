package xdpprog

import (
	"fmt"

	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/btf"

	"xlb/dataplane/packet"
	"xlb/internal/bpfasm"
)

// XDP verdicts (enum xdp_action) the program returns.
const (
	xdpPass     = bpfasm.XDPPass
	xdpRedirect = bpfasm.XDPRedirect
)

// Indexes of the Counters map, one per verdict path.
const (
	statRedirected = iota
	statPassedNoSocket
	statPassedNotVIP
	statPassedNDP
	statPassedShort
	statPassedMalformedVIP
	// statPassedVLANOffload: the receive metadata say the frame had a VLAN
	// tag the kernel or NIC took out, and it could not be put back (an
	// unknown TPID, no headroom): passed to the kernel, which still has it.
	statPassedVLANOffload
	// statRetagged counts frames whose tag the program put back from the
	// receive metadata; they are also counted in their verdict's counter.
	statRetagged
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
// find an ICMPv6 header (real traffic carries one or two): as many as the
// workers' parser, so that a frame the program redirects is never one a
// worker would pass (a worker cannot hand a frame back to the kernel: NDP
// behind 9 to 16 headers, which the parser used to follow, was lost
// there). A VIP frame with a longer chain goes to the workers, which drop
// it as malformed and count it. Following 16 here makes the verifier give
// up (a million instructions: every header kind multiplies the paths).
const MaxExtHeaders = packet.MaxExtHeaders

// Header layout.
const (
	maxVLANTags  = 2   // 802.1Q, or 802.1ad + 802.1Q, like the engine
	ndpFirstType = 133 // router solicitation
	ndpLastType  = 137 // redirect
)

// Stack layout: the 16-byte VIP key at fp-16, the counter index at fp-20,
// the receive metadata's VLAN TPID and TCI at fp-24 and fp-22.
const (
	stackKey      = -16
	stackStat     = -20
	stackVLANTPID = -24
	stackVLANTCI  = -22
)

// instructions returns the program. Registers: r6 = ctx (then the verdict),
// r7 = data (then the counter index), r8 = data_end, r9 = the header being
// read; r1–r5 are scratch and clobbered by calls. vlanKfunc is the BTF ID
// of bpf_xdp_metadata_rx_vlan_tag for a device-bound program (retag), 0
// for the plain one.
func instructions(vlanKfunc btf.TypeID) (asm.Instructions, error) {
	b := &bpfasm.Builder{}
	const (
		vlanPass = "vlan_pass"
		short    = "short"
		badVIP   = "bad_vip"
		notVIP   = "not_vip"
		ndp      = "ndp"
		redirect = "redirect"
		ipv4     = "ipv4"
		ipv6     = "ipv6"
		count    = "count"
	)

	if vlanKfunc != 0 {
		retag(b, vlanKfunc, vlanPass)
	}
	b.Ethernet(short)

	b.VLAN(maxVLANTags, []uint16{packet.EtherTypeVLAN, packet.EtherTypeQinQ}, short)
	b.EtherTypeIP(ipv4, ipv6, notVIP)

	// IPv4: key ::ffff:daddr. Options do not move the destination address.
	b.Mark(ipv4)
	b.VIPKeyV4(stackKey, short)
	b.LookupVIP(nameVIPs, stackKey, 4, notVIP)
	// A VIP packet with a bad header goes to the kernel, which drops it;
	// it is counted apart (passed-malformed-vip: VIP traffic lost).
	b.IPv4Header(badVIP)
	b.IPv4Length(badVIP)
	b.Emit(asm.Ja.Label(redirect))

	// IPv6: key = daddr.
	b.Mark(ipv6)
	b.Need(packet.IPv6FixedLen, short)
	b.VIPKeyV6(stackKey)
	b.LookupVIP(nameVIPs, stackKey, 6, notVIP)
	b.IPVersion(6, badVIP)
	b.IPv6Length(badVIP)
	b.Emit(
		asm.LoadMem(asm.R2, asm.R9, 6, asm.Byte), // next header
		asm.Add.Imm(asm.R9, packet.IPv6FixedLen),
	)
	// Extension headers, unrolled: r2 = the type of the header at r9.
	for i := 0; i <= MaxExtHeaders; i++ {
		hdr := fmt.Sprintf("ext%d", i)
		ah := fmt.Sprintf("ah%d", i)
		frag := fmt.Sprintf("frag%d", i)
		next := fmt.Sprintf("next%d", i)
		b.Mark(next)
		b.Emit(asm.JEq.Imm(asm.R2, int32(packet.ProtoICMPv6), "icmpv6"))
		if i == MaxExtHeaders {
			// Longer chains than we follow go to the workers, whose
			// parser follows as many and counts the frame as malformed
			// (an NDP message behind so many headers is not one a host
			// sends).
			b.Emit(asm.Ja.Label(redirect))
			break
		}
		hbh := hdr
		if i > 0 {
			hbh = badVIP // RFC 8200 4.1: hop-by-hop only right after the fixed header
		}
		b.Emit(
			asm.JEq.Imm(asm.R2, int32(packet.ProtoHopByHop), hbh),
			asm.JEq.Imm(asm.R2, int32(packet.ProtoRouting), hdr),
			asm.JEq.Imm(asm.R2, int32(packet.ProtoDstOpts), hdr),
			asm.JEq.Imm(asm.R2, int32(packet.ProtoFragment), frag),
			asm.JEq.Imm(asm.R2, int32(packet.ProtoAH), ah),
			asm.Ja.Label(redirect), // an upper layer that is not ICMPv6
		)
		// Hop-by-hop, routing, destination options: (len+1) * 8 bytes.
		b.Mark(hdr)
		b.Need(2, badVIP)
		b.Emit(
			asm.LoadMem(asm.R1, asm.R9, 1, asm.Byte),
			asm.Add.Imm(asm.R1, 1),
			asm.LSh.Imm(asm.R1, 3),
			asm.LoadMem(asm.R2, asm.R9, 0, asm.Byte),
			asm.Add.Reg(asm.R9, asm.R1),
			asm.Ja.Label(fmt.Sprintf("next%d", i+1)),
		)
		// AH: (len+2) * 4 bytes (RFC 4302).
		b.Mark(ah)
		b.Need(2, badVIP)
		b.Emit(
			asm.LoadMem(asm.R1, asm.R9, 1, asm.Byte),
			asm.Add.Imm(asm.R1, 2),
			asm.LSh.Imm(asm.R1, 2),
			asm.LoadMem(asm.R2, asm.R9, 0, asm.Byte),
			asm.Add.Reg(asm.R9, asm.R1),
			asm.Ja.Label(fmt.Sprintf("next%d", i+1)),
		)
		// Fragment: 8 bytes; after a non-first fragment comes payload.
		b.Mark(frag)
		b.Need(8, badVIP)
		b.Emit(
			asm.LoadMem(asm.R1, asm.R9, 2, asm.Half),
			asm.And.Imm(asm.R1, bpfasm.BE16(0xfff8)), // fragment offset
			asm.JNE.Imm(asm.R1, 0, redirect),
			asm.LoadMem(asm.R2, asm.R9, 0, asm.Byte),
			asm.Add.Imm(asm.R9, 8),
			asm.Ja.Label(fmt.Sprintf("next%d", i+1)),
		)
	}
	// ICMPv6: NDP stays with the kernel; the rest (packet too big, echo…)
	// goes to the workers.
	b.Mark("icmpv6")
	b.Need(4, badVIP)
	b.Emit(
		asm.LoadMem(asm.R1, asm.R9, 0, asm.Byte),
		asm.JLT.Imm(asm.R1, ndpFirstType, redirect),
		asm.JGT.Imm(asm.R1, ndpLastType, redirect),
		asm.Ja.Label(ndp),
	)

	// To the queue's socket. Without one, bpf_redirect_map returns its
	// default action (the flags, XDP_PASS); any answer but XDP_REDIRECT
	// is turned into XDP_PASS as well, so that no path here drops.
	b.Mark(redirect)
	b.Emit(
		asm.LoadMem(asm.R2, asm.R6, bpfasm.MDRxQueueIndex, asm.Word),
		asm.LoadMapPtr(asm.R1, 0).WithReference(nameSockets),
		asm.Mov.Imm(asm.R3, xdpPass),
		asm.FnRedirectMap.Call(),
		asm.JEq.Imm(asm.R0, xdpRedirect, "redirected"),
		asm.Mov.Imm(asm.R6, xdpPass),
		asm.Mov.Imm(asm.R7, statPassedNoSocket),
		asm.Ja.Label(count),
	)
	b.Mark("redirected")
	b.Emit(
		asm.Mov.Imm(asm.R6, xdpRedirect),
		asm.Mov.Imm(asm.R7, statRedirected),
		asm.Ja.Label(count),
	)
	b.Verdict(short, xdpPass, statPassedShort, count)
	b.Verdict(badVIP, xdpPass, statPassedMalformedVIP, count)
	b.Verdict(notVIP, xdpPass, statPassedNotVIP, count)
	b.Verdict(ndp, xdpPass, statPassedNDP, count)
	if vlanKfunc != 0 {
		b.Verdict(vlanPass, xdpPass, statPassedVLANOffload, count)
	}

	b.Count(count, nameCounters, stackStat)
	return b.Instructions()
}

// retag puts back into the frame the outermost VLAN tag that the receive
// metadata say the frame had (bpf_xdp_metadata_rx_vlan_tag): a bridge or
// a NIC's VLAN offload moves it out of the frame, and without it a tagged
// VIP frame would reach the workers, and its backend, untagged (a QinQ
// frame would lose its outer tag). With the tag back where it was on the
// wire, the frame is parsed and forwarded like any tagged one, tags kept.
// A tag that cannot be put back goes to the kernel (vlanPass), which
// still holds it. It ends with r1 = ctx, as Ethernet expects.
func retag(b *bpfasm.Builder, kfunc btf.TypeID, vlanPass string) {
	const tpid, untagged = "retag_tpid", "retag_done"
	b.Emit(
		asm.Mov.Reg(asm.R6, asm.R1),
		asm.Mov.Imm(asm.R1, 0),
		asm.StoreMem(asm.RFP, stackVLANTPID, asm.R1, asm.Word),
		asm.Mov.Reg(asm.R1, asm.R6),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, stackVLANTPID),
		asm.Mov.Reg(asm.R3, asm.RFP),
		asm.Add.Imm(asm.R3, stackVLANTCI),
		asm.Instruction{OpCode: asm.OpCode(asm.JumpClass).SetJumpOp(asm.Call), Src: asm.PseudoKfuncCall, Constant: int64(kfunc)},
		asm.JNE.Imm(asm.R0, 0, untagged), // no tag held apart (or the driver cannot say)
		// The TPID is documented in network byte order; veth gives it in
		// host order. Take either; other TPIDs are not ours to parse.
		asm.LoadMem(asm.R1, asm.RFP, stackVLANTPID, asm.Half),
		asm.Mov.Imm(asm.R4, bpfasm.BE16(packet.EtherTypeVLAN)),
		asm.JEq.Imm(asm.R1, packet.EtherTypeVLAN, tpid),
		asm.JEq.Imm(asm.R1, bpfasm.BE16(packet.EtherTypeVLAN), tpid),
		asm.Mov.Imm(asm.R4, bpfasm.BE16(packet.EtherTypeQinQ)),
		asm.JEq.Imm(asm.R1, packet.EtherTypeQinQ, tpid),
		asm.JEq.Imm(asm.R1, bpfasm.BE16(packet.EtherTypeQinQ), tpid),
		asm.Ja.Label(vlanPass),
	)
	b.Mark(tpid)
	b.Emit(
		asm.StoreMem(asm.RFP, stackVLANTPID, asm.R4, asm.Half),
		asm.Mov.Reg(asm.R1, asm.R6),
		asm.Mov.Imm(asm.R2, -packet.VLANTagLen),
		asm.FnXdpAdjustHead.Call(),
		asm.JNE.Imm(asm.R0, 0, vlanPass),
		asm.LoadMem(asm.R7, asm.R6, bpfasm.MDData, asm.Word),
		asm.LoadMem(asm.R8, asm.R6, bpfasm.MDDataEnd, asm.Word),
		asm.Mov.Reg(asm.R3, asm.R7),
		asm.Add.Imm(asm.R3, bpfasm.EthLen+packet.VLANTagLen),
		asm.JGT.Reg(asm.R3, asm.R8, vlanPass),
	)
	// The MACs move 4 bytes to the front (in increasing order: no word is
	// overwritten before it is read), and the tag fills the gap before
	// the EtherType.
	for off := int16(0); off < 12; off += 4 {
		b.Emit(
			asm.LoadMem(asm.R1, asm.R7, off+packet.VLANTagLen, asm.Word),
			asm.StoreMem(asm.R7, off, asm.R1, asm.Word),
		)
	}
	b.Emit(
		asm.LoadMem(asm.R1, asm.RFP, stackVLANTPID, asm.Half),
		asm.StoreMem(asm.R7, 12, asm.R1, asm.Half),
		asm.LoadMem(asm.R1, asm.RFP, stackVLANTCI, asm.Half),
		asm.HostTo(asm.BE, asm.R1, asm.Half),
		asm.StoreMem(asm.R7, 14, asm.R1, asm.Half),
		// Count it (its verdict is counted too, at the end).
		asm.Mov.Imm(asm.R1, statRetagged),
		asm.StoreMem(asm.RFP, stackStat, asm.R1, asm.Word),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, stackStat),
		asm.LoadMapPtr(asm.R1, 0).WithReference(nameCounters),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, untagged),
		asm.LoadMem(asm.R1, asm.R0, 0, asm.DWord),
		asm.Add.Imm(asm.R1, 1),
		asm.StoreMem(asm.R0, 0, asm.R1, asm.DWord),
	)
	b.Mark(untagged)
	b.Emit(asm.Mov.Reg(asm.R1, asm.R6))
}

package xdpfwd

import (
	"github.com/cilium/ebpf/asm"

	"xlb/dataplane/packet"
	"xlb/internal/bpfasm"
)

// XDP verdicts (enum xdp_action).
const (
	xdpPass = bpfasm.XDPPass
	xdpTX   = bpfasm.XDPTx
)

// Indexes of the counters map, one per verdict path.
const (
	statTX = iota
	statPassNotVIP
	statPassNotL4
	statPassShort
	statPassNoBackend
	numStats
)

// Map and program names (as bpftool shows them).
const (
	progName     = "blxf_fwd"
	nameVIPs     = "blxf_vips"
	nameBackends = "blxf_backends"
	nameConfig   = "blxf_config"
	nameCounters = "blxf_stats"
)

// Layout of the config map's one value: the backend count, then the
// interface's MAC (the new source MAC).
const (
	cfgCount    = 0
	cfgSrcMAC   = 4
	cfgValueLen = 12
	// A backends map value: the MAC and two bytes of padding.
	backendValueLen = 8
)

// Stack slots.
const (
	stackKey  = -16 // VIP key, 16 bytes
	stackHash = -20 // the flow hash
	stackIdx  = -24 // a map index (config key, backend index, counter)
)

// hashMul is the multiplier of the final mix (2^32 / golden ratio).
const hashMul = 0x9e3779b1

// hashMulImm is hashMul as the instruction's 32-bit immediate.
const hashMulImm = int32(hashMul - 1<<32)

// instructions returns the program (see the package comment). Registers:
// r6 = ctx (then the verdict), r7 = data, r8 = data_end, r9 = the L3
// header (then the config value); r5 accumulates the flow hash while
// parsing; r1–r5 are clobbered by calls.
func instructions() (asm.Instructions, error) {
	b := &bpfasm.Builder{}
	const (
		short     = "short"
		notVIP    = "not_vip"
		notL4     = "not_l4"
		noBackend = "no_backend"
		ipv4      = "ipv4"
		ipv6      = "ipv6"
		mix       = "mix"
		count     = "count"
	)
	b.Ethernet(short)
	b.EtherTypeIP(ipv4, ipv6, notVIP) // untagged only: a tagged frame passes as no VIP

	// IPv4: VIP key ::ffff:daddr; hash saddr ^ daddr ^ proto ^ ports,
	// ports 0 for a fragment (so all fragments of a datagram agree).
	b.Mark(ipv4)
	b.VIPKeyV4(stackKey, short)
	b.LookupVIP(nameVIPs, stackKey, 4, notVIP)
	// The least a forwarder checks: no total length against the frame.
	b.IPv4Header(short)
	b.Emit(
		asm.LoadMem(asm.R4, asm.R9, 9, asm.Byte),
		asm.JEq.Imm(asm.R4, int32(packet.ProtoTCP), "l4_v4"),
		asm.JNE.Imm(asm.R4, int32(packet.ProtoUDP), notL4),
	)
	b.Mark("l4_v4")
	b.Emit(
		asm.LoadMem(asm.R5, asm.R9, 12, asm.Word),
		asm.LoadMem(asm.R2, asm.R9, 16, asm.Word),
		asm.Xor.Reg32(asm.R5, asm.R2),
		asm.Xor.Reg32(asm.R5, asm.R4),
	)
	b.IPv4Fragment(mix)
	b.Emit(
		asm.Mov.Reg(asm.R3, asm.R9),
		asm.Add.Reg(asm.R3, asm.R1),
		asm.Mov.Reg(asm.R2, asm.R3),
		asm.Add.Imm(asm.R2, 4),
		asm.JGT.Reg(asm.R2, asm.R8, short),
		asm.LoadMem(asm.R2, asm.R3, 0, asm.Word), // both ports
		asm.Xor.Reg32(asm.R5, asm.R2),
		asm.Ja.Label(mix),
	)

	// IPv6: VIP key daddr; hash the eight address words ^ next header ^
	// ports. Only UDP or TCP right after the fixed header is forwarded.
	b.Mark(ipv6)
	b.Need(packet.IPv6FixedLen+4, short)
	b.VIPKeyV6(stackKey)
	b.LookupVIP(nameVIPs, stackKey, 6, notVIP)
	b.IPVersion(6, short)
	b.Emit(
		asm.LoadMem(asm.R4, asm.R9, 6, asm.Byte),
		asm.JEq.Imm(asm.R4, int32(packet.ProtoTCP), "l4_v6"),
		asm.JNE.Imm(asm.R4, int32(packet.ProtoUDP), notL4),
	)
	b.Mark("l4_v6")
	b.Emit(asm.Mov.Reg(asm.R5, asm.R4))
	for off := int16(8); off < 40; off += 4 {
		b.Emit(
			asm.LoadMem(asm.R2, asm.R9, off, asm.Word),
			asm.Xor.Reg32(asm.R5, asm.R2),
		)
	}
	b.Emit(
		asm.LoadMem(asm.R2, asm.R9, packet.IPv6FixedLen, asm.Word), // both ports
		asm.Xor.Reg32(asm.R5, asm.R2),
	)

	// h ^= h>>16; h *= hashMul; h ^= h>>15 (32-bit), then backend h % n.
	b.Mark(mix)
	b.Emit(
		asm.Mov.Reg32(asm.R2, asm.R5),
		asm.RSh.Imm32(asm.R2, 16),
		asm.Xor.Reg32(asm.R5, asm.R2),
		asm.Mul.Imm32(asm.R5, hashMulImm),
		asm.Mov.Reg32(asm.R2, asm.R5),
		asm.RSh.Imm32(asm.R2, 15),
		asm.Xor.Reg32(asm.R5, asm.R2),
		asm.StoreMem(asm.RFP, stackHash, asm.R5, asm.Word),

		asm.StoreImm(asm.RFP, stackIdx, 0, asm.Word),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, stackIdx),
		asm.LoadMapPtr(asm.R1, 0).WithReference(nameConfig),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, noBackend),
		asm.Mov.Reg(asm.R9, asm.R0),
		asm.LoadMem(asm.R1, asm.R9, cfgCount, asm.Word),
		asm.JEq.Imm(asm.R1, 0, noBackend),
		asm.LoadMem(asm.R5, asm.RFP, stackHash, asm.Word),
		asm.Mod.Reg32(asm.R5, asm.R1),
		asm.StoreMem(asm.RFP, stackIdx, asm.R5, asm.Word),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, stackIdx),
		asm.LoadMapPtr(asm.R1, 0).WithReference(nameBackends),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, noBackend),

		// Rewrite: destination MAC = the backend's, source = ours.
		asm.LoadMem(asm.R1, asm.R0, 0, asm.Word),
		asm.StoreMem(asm.R7, 0, asm.R1, asm.Word),
		asm.LoadMem(asm.R1, asm.R0, 4, asm.Half),
		asm.StoreMem(asm.R7, 4, asm.R1, asm.Half),
		asm.LoadMem(asm.R1, asm.R9, cfgSrcMAC, asm.Word),
		asm.StoreMem(asm.R7, 6, asm.R1, asm.Word),
		asm.LoadMem(asm.R1, asm.R9, cfgSrcMAC+4, asm.Half),
		asm.StoreMem(asm.R7, 10, asm.R1, asm.Half),
		asm.Mov.Imm(asm.R6, xdpTX),
		asm.Mov.Imm(asm.R7, statTX),
		asm.Ja.Label(count),
	)
	b.Verdict(short, xdpPass, statPassShort, count)
	b.Verdict(notVIP, xdpPass, statPassNotVIP, count)
	b.Verdict(notL4, xdpPass, statPassNotL4, count)
	b.Verdict(noBackend, xdpPass, statPassNoBackend, count)
	b.Count(count, nameCounters, stackIdx)
	return b.Instructions()
}

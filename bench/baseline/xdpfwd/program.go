package xdpfwd

import (
	"encoding/binary"
	"fmt"

	"github.com/cilium/ebpf/asm"
)

// XDP verdicts (enum xdp_action).
const (
	xdpPass = 2
	xdpTX   = 3
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

// Offsets into struct xdp_md.
const (
	mdData    = 0
	mdDataEnd = 4
)

const (
	ethLen     = 14
	ipv4MinLen = 20
	ipv6Len    = 40
	protoTCP   = 6
	protoUDP   = 17
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

func mappedPrefix() int64 {
	return int64(int32(binary.NativeEndian.Uint32([]byte{0, 0, 0xff, 0xff})))
}

// instructions returns the program (see the package comment). Registers:
// r6 = ctx (then the verdict), r7 = data, r8 = data_end, r9 = the L3
// header (then the config value); r5 accumulates the flow hash while
// parsing; r1–r5 are clobbered by calls.
func instructions() (asm.Instructions, error) {
	b := &builder{}
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
	b.emit(
		asm.Mov.Reg(asm.R6, asm.R1),
		asm.LoadMem(asm.R7, asm.R6, mdData, asm.Word),
		asm.LoadMem(asm.R8, asm.R6, mdDataEnd, asm.Word),
		asm.Mov.Reg(asm.R9, asm.R7),
		asm.Add.Imm(asm.R9, ethLen),
		asm.JGT.Reg(asm.R9, asm.R8, short),
		asm.LoadMem(asm.R2, asm.R7, ethLen-2, asm.Half),
		asm.JEq.Imm(asm.R2, be16(0x0800), ipv4),
		asm.JEq.Imm(asm.R2, be16(0x86dd), ipv6),
		asm.Ja.Label(notVIP),
	)

	// IPv4: VIP key ::ffff:daddr; hash saddr ^ daddr ^ proto ^ ports,
	// ports 0 for a fragment (so all fragments of a datagram agree).
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
	b.emit(
		asm.LoadMem(asm.R1, asm.R9, 0, asm.Byte),
		asm.Mov.Reg(asm.R2, asm.R1),
		asm.RSh.Imm(asm.R2, 4),
		asm.JNE.Imm(asm.R2, 4, short),
		asm.And.Imm(asm.R1, 0x0f),
		asm.JLT.Imm(asm.R1, 5, short),
		asm.LSh.Imm(asm.R1, 2), // IHL in bytes, 20..60
		asm.LoadMem(asm.R4, asm.R9, 9, asm.Byte),
		asm.JEq.Imm(asm.R4, protoTCP, "l4_v4"),
		asm.JNE.Imm(asm.R4, protoUDP, notL4),
	)
	b.mark("l4_v4")
	b.emit(
		asm.LoadMem(asm.R5, asm.R9, 12, asm.Word),
		asm.LoadMem(asm.R2, asm.R9, 16, asm.Word),
		asm.Xor.Reg32(asm.R5, asm.R2),
		asm.Xor.Reg32(asm.R5, asm.R4),
		asm.LoadMem(asm.R2, asm.R9, 6, asm.Half),
		asm.And.Imm(asm.R2, be16(0x3fff)), // MF and fragment offset
		asm.JNE.Imm(asm.R2, 0, mix),
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
	b.mark(ipv6)
	b.emit(
		asm.Mov.Reg(asm.R3, asm.R9),
		asm.Add.Imm(asm.R3, ipv6Len+4),
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
		asm.LoadMem(asm.R4, asm.R9, 6, asm.Byte),
		asm.JEq.Imm(asm.R4, protoTCP, "l4_v6"),
		asm.JNE.Imm(asm.R4, protoUDP, notL4),
	)
	b.mark("l4_v6")
	b.emit(asm.Mov.Reg(asm.R5, asm.R4))
	for off := int16(8); off < 40; off += 4 {
		b.emit(
			asm.LoadMem(asm.R2, asm.R9, off, asm.Word),
			asm.Xor.Reg32(asm.R5, asm.R2),
		)
	}
	b.emit(
		asm.LoadMem(asm.R2, asm.R9, ipv6Len, asm.Word), // both ports
		asm.Xor.Reg32(asm.R5, asm.R2),
	)

	// h ^= h>>16; h *= hashMul; h ^= h>>15 (32-bit), then backend h % n.
	b.mark(mix)
	b.emit(
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
	for _, p := range []struct {
		label string
		stat  int32
	}{{short, statPassShort}, {notVIP, statPassNotVIP}, {notL4, statPassNotL4}, {noBackend, statPassNoBackend}} {
		b.mark(p.label)
		b.emit(
			asm.Mov.Imm(asm.R6, xdpPass),
			asm.Mov.Imm(asm.R7, p.stat),
			asm.Ja.Label(count),
		)
	}
	// Count r7 in this CPU's slot and return r6 (per-CPU: no atomics,
	// XDP runs with migration disabled).
	b.mark(count)
	b.emit(
		asm.StoreMem(asm.RFP, stackIdx, asm.R7, asm.Word),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, stackIdx),
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

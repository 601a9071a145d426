// Package bpfasm is the one home of what xlb's hand-assembled XDP programs
// share (dataplane/xdpprog, the program that feeds the workers;
// dataplane/decap, the backends' decapsulator; the lbbench sink and the
// xdpfwd baseline): a Builder that puts labels on instructions, the XDP
// verdicts and struct xdp_md offsets, byte-order helpers for immediates,
// and the blocks the programs have in common:
//
//   - Ethernet, Need: the frame's start and bounds checks;
//   - VLAN: the walk over up to n tags of the TPIDs given;
//   - EtherTypeIP: the jump to the IPv4 or IPv6 code;
//   - IPv4Header (version, IHL), IPv4Length (total length within the
//     frame), IPv4Fragment (MF or an offset), IPVersion and IPv6Length:
//     the IP header checks, each its own block because the programs ask
//     for different ones;
//   - VIPKeyV4, VIPKeyV6, LookupVIP: a destination's key and its lookup;
//   - Verdict, Count: the end of every path, counted per verdict.
//
// The blocks keep one register convention: r6 = ctx (then the verdict),
// r7 = data (then the counter index), r8 = data_end, r9 = the header being
// read; r1–r5 are scratch and clobbered by calls. A block that uses labels
// of its own (Count, VLAN) goes once in a program.
package bpfasm

import (
	"encoding/binary"
	"fmt"

	"github.com/cilium/ebpf/asm"

	"xlb/dataplane/packet"
)

// XDP verdicts (enum xdp_action).
const (
	XDPAborted  = 0
	XDPDrop     = 1
	XDPPass     = 2
	XDPTx       = 3
	XDPRedirect = 4
)

// Offsets into struct xdp_md.
const (
	MDData         = 0
	MDDataEnd      = 4
	MDDataMeta     = 8
	MDRxQueueIndex = 16
)

// EthLen is the length of an Ethernet header without VLAN tags.
const EthLen = 14

// Builder emits instructions and attaches each label to the next one.
type Builder struct {
	insns asm.Instructions
	label string
	err   error
}

// Mark labels the next instruction emitted; two labels on one instruction
// are an error (Instructions reports it).
func (b *Builder) Mark(label string) {
	if b.label != "" && b.err == nil {
		b.err = fmt.Errorf("labels %q and %q on one instruction", b.label, label)
	}
	b.label = label
}

// Emit appends insns, the first one with the pending label.
func (b *Builder) Emit(insns ...asm.Instruction) {
	for _, ins := range insns {
		if b.label != "" {
			ins = ins.WithSymbol(b.label)
			b.label = ""
		}
		b.insns = append(b.insns, ins)
	}
}

// Instructions returns the program, or the first error met building it.
func (b *Builder) Instructions() (asm.Instructions, error) {
	if b.err != nil {
		return nil, b.err
	}
	return b.insns, nil
}

// BE16 is the value a 16-bit load gives for the big-endian v on this host.
func BE16(v uint16) int32 {
	var b [2]byte
	binary.BigEndian.PutUint16(b[:], v)
	return int32(binary.NativeEndian.Uint16(b[:]))
}

// MappedPrefix is the 32-bit word 00 00 ff ff of an IPv4-mapped address,
// as this host stores it.
func MappedPrefix() int64 {
	return int64(int32(binary.NativeEndian.Uint32([]byte{0, 0, 0xff, 0xff})))
}

// Ethernet starts a program: ctx into r6, data and data_end into r7 and
// r8, r9 past the Ethernet header and r2 = its EtherType; a frame shorter
// than that jumps to short.
func (b *Builder) Ethernet(short string) {
	b.Emit(
		asm.Mov.Reg(asm.R6, asm.R1),
		asm.LoadMem(asm.R7, asm.R6, MDData, asm.Word),
		asm.LoadMem(asm.R8, asm.R6, MDDataEnd, asm.Word),
		asm.Mov.Reg(asm.R9, asm.R7),
		asm.Add.Imm(asm.R9, EthLen),
		asm.JGT.Reg(asm.R9, asm.R8, short),
		asm.LoadMem(asm.R2, asm.R7, EthLen-2, asm.Half), // EtherType
	)
}

// Need jumps to short unless n bytes from r9 are in the frame (r3 is
// clobbered).
func (b *Builder) Need(n int32, short string) {
	b.Emit(
		asm.Mov.Reg(asm.R3, asm.R9),
		asm.Add.Imm(asm.R3, n),
		asm.JGT.Reg(asm.R3, asm.R8, short),
	)
}

// VLAN walks up to tags VLAN tags whose TPID is one of tpids, from r2 =
// the EtherType Ethernet left: per tag r9 steps over it and r2 becomes the
// EtherType after it; a tag cut short jumps to short. Both are parameters
// because the programs walk different tags (xdpprog two, 802.1Q or
// 802.1ad, like the workers' parser; decap one 802.1Q, the one its strip
// rewrites). Past the last tag walked r2 may still be a TPID.
func (b *Builder) VLAN(tags int, tpids []uint16, short string) {
	if len(tpids) == 0 && b.err == nil {
		b.err = fmt.Errorf("VLAN walk without TPIDs")
		return
	}
	const end = "vlan_end"
	for i := range tags {
		tag := fmt.Sprintf("vlan%d", i)
		last := len(tpids) - 1
		for _, tpid := range tpids[:last] {
			b.Emit(asm.JEq.Imm(asm.R2, BE16(tpid), tag))
		}
		b.Emit(asm.JNE.Imm(asm.R2, BE16(tpids[last]), end))
		b.Mark(tag)
		b.Need(packet.VLANTagLen, short)
		b.Emit(
			asm.LoadMem(asm.R2, asm.R9, 2, asm.Half), // TCI, then EtherType
			asm.Add.Imm(asm.R9, packet.VLANTagLen),
		)
	}
	b.Mark(end)
}

// EtherTypeIP jumps on the EtherType in r2 to ipv4 or ipv6, to other for
// anything else.
func (b *Builder) EtherTypeIP(ipv4, ipv6, other string) {
	b.Emit(
		asm.JEq.Imm(asm.R2, BE16(packet.EtherTypeIPv4), ipv4),
		asm.JEq.Imm(asm.R2, BE16(packet.EtherTypeIPv6), ipv6),
		asm.Ja.Label(other),
	)
}

// IPv4Header jumps to bad unless the IPv4 header at r9, whose fixed part
// the caller has bounds-checked (VIPKeyV4 does), has version 4 and an IHL
// of at least 5. It leaves r1 = the header's length in bytes (20..60:
// options are accepted, and skipped by whoever reads past them) and
// clobbers r2.
func (b *Builder) IPv4Header(bad string) {
	b.Emit(
		asm.LoadMem(asm.R1, asm.R9, 0, asm.Byte),
		asm.Mov.Reg(asm.R2, asm.R1),
		asm.RSh.Imm(asm.R2, 4),
		asm.JNE.Imm(asm.R2, 4, bad),
		asm.And.Imm(asm.R1, 0x0f),
		asm.JLT.Imm(asm.R1, 5, bad),
		asm.LSh.Imm(asm.R1, 2),
	)
}

// IPv4Length, after IPv4Header (r1 = the header's length), jumps to bad
// unless the total length covers the header and the frame holds the whole
// packet from r9 (Ethernet padding may follow). It leaves r2 = the total
// length and clobbers r3.
func (b *Builder) IPv4Length(bad string) {
	b.Emit(
		asm.LoadMem(asm.R2, asm.R9, 2, asm.Half),
		asm.HostTo(asm.BE, asm.R2, asm.Half),
		asm.JLT.Reg(asm.R2, asm.R1, bad),
		asm.Mov.Reg(asm.R3, asm.R9),
		asm.Add.Reg(asm.R3, asm.R2),
		asm.JGT.Reg(asm.R3, asm.R8, bad),
	)
}

// IPv4Fragment jumps to frag when the IPv4 header at r9 (fixed part
// bounds-checked) is a fragment's: MF set or a fragment offset. DF is
// not looked at. It clobbers r3.
func (b *Builder) IPv4Fragment(frag string) {
	b.Emit(
		asm.LoadMem(asm.R3, asm.R9, 6, asm.Half),
		asm.And.Imm(asm.R3, BE16(0x3fff)),
		asm.JNE.Imm(asm.R3, 0, frag),
	)
}

// IPVersion jumps to bad unless the IP header at r9 (its first byte
// bounds-checked) has version v. It clobbers r1.
func (b *Builder) IPVersion(v int32, bad string) {
	b.Emit(
		asm.LoadMem(asm.R1, asm.R9, 0, asm.Byte),
		asm.RSh.Imm(asm.R1, 4),
		asm.JNE.Imm(asm.R1, v, bad),
	)
}

// IPv6Length jumps to bad unless the frame holds the IPv6 packet at r9,
// fixed header (bounds-checked by the caller) and payload (Ethernet
// padding may follow). It leaves r2 = the packet's length, fixed header
// included, and clobbers r3.
func (b *Builder) IPv6Length(bad string) {
	b.Emit(
		asm.LoadMem(asm.R2, asm.R9, 4, asm.Half),
		asm.HostTo(asm.BE, asm.R2, asm.Half), // payload length
		asm.Add.Imm(asm.R2, packet.IPv6FixedLen),
		asm.Mov.Reg(asm.R3, asm.R9),
		asm.Add.Reg(asm.R3, asm.R2),
		asm.JGT.Reg(asm.R3, asm.R8, bad),
	)
}

// VIPKeyV4 stores the 16-byte key ::ffff:daddr of the IPv4 header at r9
// at fp+key, jumping to short unless the fixed header is in the frame.
// Options do not move the destination address.
func (b *Builder) VIPKeyV4(key int16, short string) {
	b.Need(packet.IPv4MinLen, short)
	b.Emit(
		asm.StoreImm(asm.RFP, key, 0, asm.Word),
		asm.StoreImm(asm.RFP, key+4, 0, asm.Word),
		asm.StoreImm(asm.RFP, key+8, MappedPrefix(), asm.Word),
		asm.LoadMem(asm.R3, asm.R9, 16, asm.Word),
		asm.StoreMem(asm.RFP, key+12, asm.R3, asm.Word),
	)
}

// VIPKeyV6 stores the destination address of the IPv6 header at r9 at
// fp+key; the caller has checked the header is in the frame.
func (b *Builder) VIPKeyV6(key int16) {
	b.Emit(
		asm.LoadMem(asm.R3, asm.R9, 24, asm.DWord),
		asm.StoreMem(asm.RFP, key, asm.R3, asm.DWord),
		asm.LoadMem(asm.R3, asm.R9, 32, asm.DWord),
		asm.StoreMem(asm.RFP, key+8, asm.R3, asm.DWord),
	)
}

// LookupVIP looks the key at fp+key up in the map named vips and jumps to
// miss unless it is there with IP version v (the value's first byte).
func (b *Builder) LookupVIP(vips string, key int16, v int32, miss string) {
	b.Emit(
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, int32(key)),
		asm.LoadMapPtr(asm.R1, 0).WithReference(vips),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, miss),
		asm.LoadMem(asm.R1, asm.R0, 0, asm.Byte),
		asm.JNE.Imm(asm.R1, v, miss),
	)
}

// Verdict is the block at label that sets the verdict (r6) and the counter
// index (r7) and jumps to count (see Count).
func (b *Builder) Verdict(label string, verdict, stat int32, count string) {
	b.Mark(label)
	b.Emit(
		asm.Mov.Imm(asm.R6, verdict),
		asm.Mov.Imm(asm.R7, stat),
		asm.Ja.Label(count),
	)
}

// Count is the block at label that ends every path: it adds one to slot r7
// of this CPU's counters (a per-CPU array named counters, its key through
// the stack slot fp+slot) and returns r6. Per-CPU slots need no atomics:
// XDP runs with migration disabled.
func (b *Builder) Count(label, counters string, slot int16) {
	b.Mark(label)
	b.Emit(
		asm.StoreMem(asm.RFP, slot, asm.R7, asm.Word),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, int32(slot)),
		asm.LoadMapPtr(asm.R1, 0).WithReference(counters),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, "out"),
		asm.LoadMem(asm.R1, asm.R0, 0, asm.DWord),
		asm.Add.Imm(asm.R1, 1),
		asm.StoreMem(asm.R0, 0, asm.R1, asm.DWord),
	)
	b.Mark("out")
	b.Emit(
		asm.Mov.Reg(asm.R0, asm.R6),
		asm.Return(),
	)
}

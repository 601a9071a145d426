package bpfasm

import (
	"encoding/binary"
	"testing"

	"github.com/cilium/ebpf/asm"
)

func TestBuilder_TwoLabels(t *testing.T) {
	b := &Builder{}
	b.Mark("a")
	b.Mark("b")
	b.Emit(asm.Return())
	if _, err := b.Instructions(); err == nil {
		t.Error("two labels on one instruction not reported")
	}
}

func TestBuilder_LabelsNextInstruction(t *testing.T) {
	b := &Builder{}
	b.Emit(asm.Mov.Imm(asm.R0, 0))
	b.Mark("x")
	b.Emit(asm.Mov.Imm(asm.R0, 1), asm.Return())
	insns, err := b.Instructions()
	if err != nil {
		t.Fatal(err)
	}
	if len(insns) != 3 || insns[0].Symbol() != "" || insns[1].Symbol() != "x" || insns[2].Symbol() != "" {
		t.Errorf("labels %q %q %q, want \"\" x \"\"", insns[0].Symbol(), insns[1].Symbol(), insns[2].Symbol())
	}
}

func TestBE16(t *testing.T) {
	want := int32(0x0800) // a big-endian host loads the bytes as they are
	if binary.NativeEndian.Uint16([]byte{1, 0}) == 1 {
		want = 0x0008 // a little-endian one swaps them
	}
	if got := BE16(0x0800); got != want {
		t.Errorf("BE16(0x0800) = %#x, want %#x", got, want)
	}
}

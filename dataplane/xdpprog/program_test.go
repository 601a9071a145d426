package xdpprog

import (
	"errors"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"

	"xlb/internal/bpfasm"
)

// TestLoad checks that the program passes this kernel's verifier and shows
// how much verifying it took.
func TestLoad(t *testing.T) {
	o := loadObjects(t, 4)
	info, err := o.Program.Info()
	if err != nil {
		t.Fatal(err)
	}
	if info.Name != progName || info.Type != ebpf.XDP {
		t.Errorf("program %q of type %v, want %q XDP", info.Name, info.Type, progName)
	}
	if n, ok := info.VerifiedInstructions(); ok {
		t.Logf("verifier processed %d instructions", n)
	}
	if o.Sockets.MaxEntries() != 4 || o.Queues.MaxEntries() != 4 || o.VIPs.MaxEntries() != 2*MaxVIPs {
		t.Errorf("map sizes: sockets %d, queues %d, vips %d", o.Sockets.MaxEntries(), o.Queues.MaxEntries(), o.VIPs.MaxEntries())
	}
	for _, q := range []int{0, -1, MaxQueues + 1} {
		if _, err := Load(q); !errors.Is(err, ErrQueue) {
			t.Errorf("Load(%d): %v, want ErrQueue", q, err)
		}
	}
}

// TestLoad_VerifierLog checks that a rejected program's error carries the
// verifier's log: here a packet read without a bounds check.
func TestLoad_VerifierLog(t *testing.T) {
	loadObjects(t, 1) // skips where the kernel has no BPF
	spec := &ebpf.CollectionSpec{Programs: map[string]*ebpf.ProgramSpec{"bad": {
		Name: "bad", Type: ebpf.XDP, License: "Dual MIT/GPL",
		Instructions: asm.Instructions{
			asm.LoadMem(asm.R2, asm.R1, bpfasm.MDData, asm.Word),
			asm.LoadMem(asm.R0, asm.R2, 0, asm.Byte),
			asm.Return(),
		},
	}}}
	_, err := loadCollection(spec)
	if err == nil {
		t.Fatal("the verifier accepted an unchecked packet read")
	}
	if msg := err.Error(); !strings.Contains(msg, "verifier log:") || !strings.Contains(msg, "invalid access to packet") {
		t.Errorf("error without the verifier log:\n%s", msg)
	}
}

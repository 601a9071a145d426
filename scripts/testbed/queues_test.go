package testbed

import (
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/features"
	"github.com/cilium/ebpf/link"

	"xlb/internal/nsx"
)

// checkQueuesSpread attaches, in native mode, a program that counts frames
// per rx queue on the balancer's interface, sends UDP flows from c1 to the
// VIP, and asserts every queue saw a fair part of them: the bridge hashes
// flows over the tx queues of the balancer's peer, and each maps to the rx
// queue of the same index. (A multi-queue client veth would spoil this:
// its tx queue index rides along and the bridge takes it for a recorded rx
// queue. Generic-mode XDP always reports queue 0.)
func checkQueuesSpread(t *testing.T, b *Bed) {
	t.Helper()
	if err := features.HaveProgramType(ebpf.XDP); errors.Is(err, ebpf.ErrNotSupported) {
		t.Skipf("kernel without XDP: %v", err)
	}
	q := b.Opts.Queues
	counts, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Array, KeySize: 4, ValueSize: 8, MaxEntries: uint32(q)})
	if err != nil {
		t.Fatal(err)
	}
	defer counts.Close()
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Type:    ebpf.XDP,
		License: "GPL",
		Instructions: asm.Instructions{
			asm.LoadMem(asm.R2, asm.R1, 16, asm.Word), // xdp_md.rx_queue_index
			asm.StoreMem(asm.RFP, -4, asm.R2, asm.Word),
			asm.LoadMapPtr(asm.R1, counts.FD()),
			asm.Mov.Reg(asm.R2, asm.RFP),
			asm.Add.Imm(asm.R2, -4),
			asm.FnMapLookupElem.Call(),
			asm.JEq.Imm(asm.R0, 0, "pass"),
			asm.Mov.Imm(asm.R1, 1),
			asm.StoreXAdd(asm.R0, asm.R1, asm.DWord),
			asm.Mov.Imm(asm.R0, 2).WithSymbol("pass"), // XDP_PASS
			asm.Return(),
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer prog.Close()
	var l link.Link
	err = nsx.Do(b.LB.NS, func() error {
		ifc, err := net.InterfaceByName(b.LB.Iface)
		if err != nil {
			return err
		}
		l, err = link.AttachXDP(link.XDPOptions{Program: prog, Interface: ifc.Index, Flags: link.XDPDriverMode})
		return err
	})
	if errors.Is(err, ebpf.ErrNotSupported) {
		t.Skipf("kernel without XDP links or native XDP on veth: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()

	const flows = 64
	for i := range flows {
		c, err := Dial(b.Clients[0].NS, "udp", vip(i%2 == 1, UDPEchoPort), time.Second)
		if err != nil {
			t.Fatal(err)
		}
		_, err = fmt.Fprintf(c, "flow %d", i)
		c.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
	// The datagrams are dropped by the balancer's blackhole; wait for the
	// last to pass the program.
	var per []uint64
	for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		per = per[:0]
		var total uint64
		for i := range uint32(q) {
			var v uint64
			if err := counts.Lookup(i, &v); err != nil {
				t.Fatal(err)
			}
			per = append(per, v)
			total += v
		}
		if total >= flows || time.Now().After(deadline) {
			break
		}
	}
	for i, v := range per {
		if v < flows/uint64(4*q) {
			t.Errorf("rx queue %d saw %d frames of %d flows (per queue %v): flows do not spread", i, v, flows, per)
		}
	}
}

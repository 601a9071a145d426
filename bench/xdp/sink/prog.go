package sink

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"

	"xlb/dataplane/packet"
	"xlb/internal/bpfasm"
)

// xdpPass is the verdict for everything but the bench's frames.
const xdpPass = bpfasm.XDPPass

// instructions: an IPv4 frame without options carrying UDP to PortLo..PortHi
// goes to the socket of its rx queue (XDP_PASS when there is none), with
// MetaLen bytes of metadata in front (the receive time, see layout.go);
// everything else to the kernel, untouched.
func instructions(xsks *ebpf.Map, miss int32) asm.Instructions {
	return asm.Instructions{
		asm.Mov.Reg(asm.R6, asm.R1),
		asm.LoadMem(asm.R2, asm.R6, bpfasm.MDData, asm.Word),
		asm.LoadMem(asm.R3, asm.R6, bpfasm.MDDataEnd, asm.Word),
		asm.Mov.Reg(asm.R4, asm.R2),
		asm.Add.Imm(asm.R4, 14+20+8),
		asm.JGT.Reg(asm.R4, asm.R3, "pass"),
		asm.LoadMem(asm.R5, asm.R2, 12, asm.Half),
		asm.JNE.Imm(asm.R5, bpfasm.BE16(packet.EtherTypeIPv4), "pass"),
		asm.LoadMem(asm.R5, asm.R2, 14, asm.Byte),
		asm.JNE.Imm(asm.R5, 0x45, "pass"),
		asm.LoadMem(asm.R5, asm.R2, 14+9, asm.Byte),
		asm.JNE.Imm(asm.R5, int32(packet.ProtoUDP), "pass"),
		asm.LoadMem(asm.R5, asm.R2, 14+20+2, asm.Half),
		asm.HostTo(asm.BE, asm.R5, asm.Half),
		asm.JLT.Imm(asm.R5, PortLo, "pass"),
		asm.JGT.Imm(asm.R5, PortHi, "pass"),
		// The receive time into the metadata; a frame without room for
		// it goes on without (the receiver then uses its own clock).
		asm.Mov.Reg(asm.R1, asm.R6),
		asm.Mov.Imm(asm.R2, -MetaLen),
		asm.FnXdpAdjustMeta.Call(),
		asm.JNE.Imm(asm.R0, 0, "redirect"),
		asm.LoadMem(asm.R7, asm.R6, bpfasm.MDDataMeta, asm.Word),
		asm.LoadMem(asm.R3, asm.R6, bpfasm.MDData, asm.Word),
		asm.Mov.Reg(asm.R4, asm.R7),
		asm.Add.Imm(asm.R4, MetaLen),
		asm.JGT.Reg(asm.R4, asm.R3, "redirect"),
		asm.FnKtimeGetNs.Call(),
		asm.StoreMem(asm.R7, metaTime, asm.R0, asm.DWord),
		asm.StoreImm(asm.R7, metaMagic, int64(MetaMagic), asm.Word),
		asm.StoreImm(asm.R7, metaMagic+4, 0, asm.Word),
		asm.LoadMapPtr(asm.R1, xsks.FD()).WithSymbol("redirect"),
		asm.LoadMem(asm.R2, asm.R6, bpfasm.MDRxQueueIndex, asm.Word),
		asm.Mov.Imm(asm.R3, miss),
		asm.FnRedirectMap.Call(),
		asm.Return(),
		asm.Mov.Imm(asm.R0, xdpPass).WithSymbol("pass"),
		asm.Return(),
	}
}

// Program is the sink's XDP program and its XSKMAP.
type Program struct {
	prog *ebpf.Program
	xsks *ebpf.Map
	link link.Link
}

// Load creates the XSKMAP (queues 0..queues-1) and loads the program.
func Load(queues int) (*Program, error) { return load(queues, xdpPass) }

// load takes the verdict for a bench frame whose queue has no socket
// (XDP_PASS; tests choose another to see the path taken).
func load(queues int, miss int32) (*Program, error) {
	xsks, err := ebpf.NewMap(&ebpf.MapSpec{Name: "lbx_sink_xsks", Type: ebpf.XSKMap, KeySize: 4, ValueSize: 4, MaxEntries: uint32(queues)})
	if err != nil {
		return nil, fmt.Errorf("sink: XSKMAP: %w", err)
	}
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{Name: "lbx_sink", Type: ebpf.XDP, License: "Dual MIT/GPL", Instructions: instructions(xsks, miss)})
	if err != nil {
		xsks.Close()
		return nil, fmt.Errorf("sink: loading the XDP program: %w", err)
	}
	return &Program{prog: prog, xsks: xsks}, nil
}

// Attach attaches the program in native mode to ifindex of the calling
// thread's namespace (a bpf_link: gone with the process).
func (p *Program) Attach(ifindex int) error {
	l, err := link.AttachXDP(link.XDPOptions{Program: p.prog, Interface: ifindex, Flags: link.XDPDriverMode})
	if err != nil {
		return fmt.Errorf("sink: attaching XDP to ifindex %d: %w", ifindex, err)
	}
	p.link = l
	return nil
}

// Register puts an AF_XDP socket bound to queue into the XSKMAP.
func (p *Program) Register(queue, fd int) error {
	if err := p.xsks.Update(uint32(queue), uint32(fd), ebpf.UpdateAny); err != nil {
		return fmt.Errorf("sink: registering socket for queue %d: %w", queue, err)
	}
	return nil
}

// Close detaches the program and frees the map.
func (p *Program) Close() error {
	var errs []error
	if p.link != nil {
		errs = append(errs, p.link.Close())
	}
	errs = append(errs, p.prog.Close(), p.xsks.Close())
	return errors.Join(errs...)
}

// Run runs the program on one frame with BPF_PROG_TEST_RUN and returns its
// verdict and the frame after it, metadata in front (tests).
func (p *Program) Run(frame []byte) (uint32, []byte, error) {
	out := make([]byte, len(frame)+256)
	opts := &ebpf.RunOptions{Data: frame, DataOut: out}
	ret, err := p.prog.Run(opts)
	return ret, opts.DataOut, err
}

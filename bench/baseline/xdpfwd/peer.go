package xdpfwd

import (
	"fmt"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"

	"xlb/internal/nsx"
)

// peerPass is the XDP_PASS program on a veth peer (see the package comment).
type peerPass struct {
	prog *ebpf.Program
	link link.Link
}

// attachPeerPass attaches a program returning XDP_PASS to the interface in
// native mode; nil, nil when it already has an XDP program.
func attachPeerPass(ns, name string) (*peerPass, error) {
	var p *peerPass
	err := nsx.Do(ns, func() error {
		l, err := netlink.LinkByName(name)
		if err != nil {
			return fmt.Errorf("peer %s: %w", nsx.Where(name, ns), err)
		}
		if x := l.Attrs().Xdp; x != nil && x.Attached {
			return nil
		}
		prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
			Name: "blxf_peer_pass", Type: ebpf.XDP, License: "Dual MIT/GPL",
			Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, xdpPass), asm.Return()},
		})
		if err != nil {
			return fmt.Errorf("loading the peer's pass program: %w", err)
		}
		lk, err := link.AttachXDP(link.XDPOptions{Program: prog, Interface: l.Attrs().Index, Flags: link.XDPDriverMode})
		if err != nil {
			prog.Close()
			return fmt.Errorf("attaching the pass program to peer %s: %w", nsx.Where(name, ns), err)
		}
		p = &peerPass{prog: prog, link: lk}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("xdpfwd: %w", err)
	}
	return p, nil
}

func (p *peerPass) close() error {
	err := p.link.Close()
	if cerr := p.prog.Close(); err == nil {
		err = cerr
	}
	return err
}

package xdpprog

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf/link"
)

// Mode is how the program is attached to an interface.
type Mode string

// Attach modes.
const (
	ModeAuto    Mode = "auto"    // native, else generic
	ModeNative  Mode = "native"  // in the driver (XDP_FLAGS_DRV_MODE)
	ModeGeneric Mode = "generic" // after the skb is built (XDP_FLAGS_SKB_MODE); any driver
)

// Attach attaches the program to the interface ifindex of the calling
// thread's network namespace with a BPF link, and returns the link and the
// mode in use. The kernel detaches the program when the link is closed or
// the process exits, however it exits, so a stopped xlb leaves no program
// behind. It fails when the interface already has an XDP program (also one
// attached through netlink), and wraps ErrMode for an unknown mode.
func (o *Objects) Attach(ifindex int, mode Mode) (link.Link, Mode, error) {
	if ifindex <= 0 {
		return nil, "", fmt.Errorf("xdpprog: attaching: bad ifindex %d", ifindex)
	}
	o.mu.Lock()
	prog := o.Program
	o.mu.Unlock()
	if prog == nil {
		return nil, "", ErrClosed
	}
	attach := func(m Mode, flags link.XDPAttachFlags) (link.Link, Mode, error) {
		l, err := link.AttachXDP(link.XDPOptions{Program: prog, Interface: ifindex, Flags: flags})
		if err != nil {
			return nil, "", fmt.Errorf("xdpprog: attaching to ifindex %d in %s mode: %w", ifindex, m, err)
		}
		return l, m, nil
	}
	if mode == ModeNative || mode == ModeAuto {
		// Natively, the device-bound variant first: it sees the VLAN tags
		// the kernel holds apart. Where it cannot load or attach, the
		// plain program still serves (Retags says why).
		bp, err := o.loadBound(ifindex)
		if err == nil {
			l, errAttach := link.AttachXDP(link.XDPOptions{Program: bp, Interface: ifindex, Flags: link.XDPDriverMode})
			if errAttach == nil {
				o.mu.Lock()
				o.bound, o.retagErr = bp, nil
				o.mu.Unlock()
				return l, ModeNative, nil
			}
			bp.Close()
			err = fmt.Errorf("xdpprog: attaching the device-bound program: %w", errAttach)
		}
		o.mu.Lock()
		o.retagErr = err
		o.mu.Unlock()
	}
	switch mode {
	case ModeNative:
		return attach(ModeNative, link.XDPDriverMode)
	case ModeGeneric:
		o.noRetagIn(ModeGeneric)
		return attach(ModeGeneric, link.XDPGenericMode)
	case ModeAuto:
		l, m, errNative := attach(ModeNative, link.XDPDriverMode)
		if errNative == nil {
			return l, m, nil
		}
		l, m, errGeneric := attach(ModeGeneric, link.XDPGenericMode)
		if errGeneric == nil {
			o.noRetagIn(ModeGeneric)
			return l, m, nil
		}
		return nil, "", errors.Join(errNative, errGeneric)
	}
	return nil, "", fmt.Errorf("%w %q: want auto, native or generic", ErrMode, mode)
}

// noRetagIn records that the program attached in mode cannot see VLAN tags
// held in the receive metadata.
func (o *Objects) noRetagIn(m Mode) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.retagErr = fmt.Errorf("xdpprog: %s mode: XDP cannot read VLAN tags held in the receive metadata (device-bound programs attach natively only)", m)
}

package xdpprog

import (
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"golang.org/x/sys/unix"
)

// Limits of the maps.
const (
	// MaxQueues bounds Load's maxQueues (an XSKMAP entry per rx queue).
	MaxQueues = 4096
	// MaxVIPs is how many addresses SetVIPs accepts. The map holds twice
	// as many, so that a replacement can add every new address before it
	// deletes the old ones: 65,536 entries of 17 bytes, a few MiB of
	// kernel memory, for configurations of 20,000 VIPs and more.
	MaxVIPs = 32768
)

// Errors that the functions of this package wrap.
var (
	ErrQueue   = errors.New("xdpprog: queue out of range")
	ErrAddr    = errors.New("xdpprog: not a usable VIP address")
	ErrTooMany = errors.New("xdpprog: too many VIPs")
	ErrMode    = errors.New("xdpprog: unknown XDP attach mode")
	ErrClosed  = errors.New("xdpprog: objects closed")
)

// Objects are the loaded program and its maps. The exported fields are for
// inspection and for asavie/xdp's helper in the comparison tests; change the maps
// through the methods. Close releases everything; a BPF link made by Attach
// holds its own reference to the program and must be closed separately.
type Objects struct {
	Program  *ebpf.Program
	VIPs     *ebpf.Map // [16]byte address (IPv4-mapped for IPv4) → uint8 IP version
	Sockets  *ebpf.Map // XSKMAP: uint32 rx queue → AF_XDP socket
	Queues   *ebpf.Map // hash: uint32 rx queue → uint32 1 while a socket is registered
	Counters *ebpf.Map // per-CPU array of uint64, see Stats

	maxQueues int
	mu        sync.Mutex // serialises SetVIPs and socket registration
	// bound is the device-bound variant of Program that Attach attached
	// in native mode (it puts back VLAN tags the receive metadata hold);
	// retagErr says why there is none.
	bound    *ebpf.Program
	retagErr error
	// vipKeys is what the VIP map holds, as SetVIPs last wrote it: a
	// reload writes only what changed (a handful of syscalls instead of
	// tens of thousands for a large set). nil when not known: before the
	// first SetVIPs and after one that failed, when the map is read back.
	vipKeys map[[16]byte]uint8
}

// collectionSpec describes the program and maps for maxQueues rx queues.
func collectionSpec(maxQueues int) (*ebpf.CollectionSpec, error) {
	insns, err := instructions(0)
	if err != nil {
		return nil, fmt.Errorf("xdpprog: assembling: %w", err)
	}
	return &ebpf.CollectionSpec{
		Maps: map[string]*ebpf.MapSpec{
			nameVIPs: {
				Name: nameVIPs, Type: ebpf.Hash,
				KeySize: 16, ValueSize: 1, MaxEntries: 2 * MaxVIPs,
			},
			nameSockets: {
				Name: nameSockets, Type: ebpf.XSKMap,
				KeySize: 4, ValueSize: 4, MaxEntries: uint32(maxQueues),
			},
			nameQueues: {
				Name: nameQueues, Type: ebpf.Hash,
				KeySize: 4, ValueSize: 4, MaxEntries: uint32(maxQueues),
			},
			nameCounters: {
				Name: nameCounters, Type: ebpf.PerCPUArray,
				KeySize: 4, ValueSize: 8, MaxEntries: numStats,
			},
		},
		Programs: map[string]*ebpf.ProgramSpec{
			progName: {
				Name:         progName,
				Type:         ebpf.XDP,
				Instructions: insns,
				License:      "Dual MIT/GPL",
			},
		},
	}, nil
}

const progName = "xlb_xdp"

// Load assembles the program, creates its maps with room for maxQueues rx
// queues (queue ids 0..maxQueues-1) and loads both into the kernel. A
// verifier rejection is returned with the verifier's whole log. It wraps
// ErrQueue when maxQueues is not in 1..MaxQueues.
func Load(maxQueues int) (*Objects, error) {
	if maxQueues < 1 || maxQueues > MaxQueues {
		return nil, fmt.Errorf("%w: %d queues, want 1..%d", ErrQueue, maxQueues, MaxQueues)
	}
	spec, err := collectionSpec(maxQueues)
	if err != nil {
		return nil, err
	}
	coll, err := loadCollection(spec)
	if err != nil {
		return nil, err
	}
	o := &Objects{
		Program:   coll.DetachProgram(progName),
		VIPs:      coll.DetachMap(nameVIPs),
		Sockets:   coll.DetachMap(nameSockets),
		Queues:    coll.DetachMap(nameQueues),
		Counters:  coll.DetachMap(nameCounters),
		maxQueues: maxQueues,
	}
	coll.Close()
	return o, nil
}

// loadCollection loads spec, with the whole verifier log in the error when
// the verifier rejects a program.
func loadCollection(spec *ebpf.CollectionSpec) (*ebpf.Collection, error) {
	coll, err := ebpf.NewCollection(spec)
	if err != nil {
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			return nil, fmt.Errorf("xdpprog: loading: %w\nverifier log:\n%s", err, strings.Join(ve.Log, "\n"))
		}
		return nil, fmt.Errorf("xdpprog: loading: %w", err)
	}
	return coll, nil
}

// Close releases the program and the maps; it is safe to call twice. An
// attached link keeps the program running until that link is closed.
func (o *Objects) Close() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	var errs []error
	if o.Program != nil {
		errs = append(errs, o.Program.Close())
	}
	if o.bound != nil {
		errs = append(errs, o.bound.Close())
		o.bound = nil
	}
	for _, m := range []*ebpf.Map{o.VIPs, o.Sockets, o.Queues, o.Counters} {
		if m != nil {
			errs = append(errs, m.Close())
		}
	}
	o.Program, o.VIPs, o.Sockets, o.Queues, o.Counters = nil, nil, nil, nil, nil
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("xdpprog: closing: %w", err)
	}
	return nil
}

// kfuncVLAN is the kfunc that reads the receive metadata's VLAN tag
// (Linux 6.8 and later; drivers implement it: veth, mlx5, ice, ...). A
// program that calls it must be bound to its device, and a device-bound
// program attaches in native mode only: in generic mode nothing tells
// XDP of a tag the kernel holds apart.
const kfuncVLAN = "bpf_xdp_metadata_rx_vlan_tag"

// errNoKfunc: the kernel has no kfuncVLAN.
var errNoKfunc = errors.New("xdpprog: the kernel has no " + kfuncVLAN)

// xdpDevBoundOnly is BPF_F_XDP_DEV_BOUND_ONLY: a device-bound program
// that is not offloaded to the NIC.
const xdpDevBoundOnly = unix.BPF_F_XDP_DEV_BOUND_ONLY

// loadBound loads the device-bound variant of the program for ifindex
// (the VLAN retag prologue, see retag), on the objects' own maps.
func (o *Objects) loadBound(ifindex int) (*ebpf.Program, error) {
	kernel, err := btf.LoadKernelSpec()
	if err != nil {
		return nil, fmt.Errorf("xdpprog: kernel BTF: %w", err)
	}
	var fn *btf.Func
	if err := kernel.TypeByName(kfuncVLAN, &fn); err != nil {
		return nil, fmt.Errorf("%w: %w", errNoKfunc, err)
	}
	id, err := kernel.TypeID(fn)
	if err != nil {
		return nil, fmt.Errorf("xdpprog: %s: %w", kfuncVLAN, err)
	}
	insns, err := instructions(id)
	if err != nil {
		return nil, fmt.Errorf("xdpprog: assembling: %w", err)
	}
	spec, err := collectionSpec(o.maxQueues)
	if err != nil {
		return nil, err
	}
	ps := spec.Programs[progName]
	ps.Instructions, ps.Flags, ps.Ifindex = insns, xdpDevBoundOnly, uint32(ifindex)
	o.mu.Lock()
	repl := map[string]*ebpf.Map{nameVIPs: o.VIPs, nameSockets: o.Sockets, nameQueues: o.Queues, nameCounters: o.Counters}
	o.mu.Unlock()
	coll, err := ebpf.NewCollectionWithOptions(spec, ebpf.CollectionOptions{MapReplacements: repl})
	if err != nil {
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			return nil, fmt.Errorf("xdpprog: loading the device-bound program: %w\nverifier log:\n%s", err, strings.Join(ve.Log, "\n"))
		}
		return nil, fmt.Errorf("xdpprog: loading the device-bound program: %w", err)
	}
	defer coll.Close()
	return coll.DetachProgram(progName), nil
}

// Retags reports whether the attached program puts back VLAN tags that
// the receive metadata hold (native mode, a kernel and driver with
// bpf_xdp_metadata_rx_vlan_tag), and otherwise why not.
func (o *Objects) Retags() (bool, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.bound != nil, o.retagErr
}

// attachedProgram is the program Attach attached natively, the
// device-bound one when it could.
func (o *Objects) attachedProgram() *ebpf.Program {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.bound != nil {
		return o.bound
	}
	return o.Program
}

package xdpfwd

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"xlb/dataplane/xdpprog"
	"xlb/internal/nsx"
)

// Limits of the maps.
const (
	MaxBackends = 1024
	MaxVIPs     = 256
)

// ErrConfig is wrapped by Start for a configuration it refuses.
var ErrConfig = errors.New("xdpfwd: invalid configuration")

// Config says where the forwarder runs and where it sends.
type Config struct {
	// NS is the named network namespace (/run/netns/NS) of Iface; "" is
	// the caller's.
	NS string
	// Iface is the interface frames arrive on and leave by.
	Iface string
	// VIPs are the destinations forwarded (IPv4 or IPv6); other traffic
	// goes to the kernel.
	VIPs []netip.Addr
	// Backends are the MACs frames are sent to, chosen by flow hash.
	Backends []net.HardwareAddr
	// Mode is the XDP attach mode (default xdpprog.ModeAuto: native, else
	// generic).
	Mode xdpprog.Mode
	// PeerNS and PeerIface, when PeerIface is set, name the veth peer of
	// Iface: unless it has an XDP program already, Start attaches one
	// there that passes every frame (Close removes it), without which the
	// peer never picks up XDP_TX frames (see the package comment).
	PeerNS, PeerIface string
}

func (c *Config) validate() error {
	var bad []string
	if c.Iface == "" {
		bad = append(bad, "Iface is required")
	}
	if len(c.VIPs) == 0 || len(c.VIPs) > MaxVIPs {
		bad = append(bad, fmt.Sprintf("%d VIPs: want 1..%d", len(c.VIPs), MaxVIPs))
	}
	for _, a := range c.VIPs {
		if !a.IsValid() || a.Zone() != "" || a.Is4In6() {
			bad = append(bad, fmt.Sprintf("VIP %s: want a plain IPv4 or IPv6 address", a))
		}
	}
	if len(c.Backends) == 0 || len(c.Backends) > MaxBackends {
		bad = append(bad, fmt.Sprintf("%d backends: want 1..%d", len(c.Backends), MaxBackends))
	}
	for _, m := range c.Backends {
		if len(m) != 6 {
			bad = append(bad, fmt.Sprintf("backend MAC %q: want 6 bytes", m))
		}
	}
	switch c.Mode {
	case "":
		c.Mode = xdpprog.ModeAuto
	case xdpprog.ModeAuto, xdpprog.ModeNative, xdpprog.ModeGeneric:
	default:
		bad = append(bad, fmt.Sprintf("mode %q: want auto, native or generic", c.Mode))
	}
	if len(bad) > 0 {
		return fmt.Errorf("%w: %s", ErrConfig, strings.Join(bad, "; "))
	}
	return nil
}

// Stats are the program's verdict counters, summed over CPUs. Every frame
// it sees is counted in exactly one.
type Stats struct {
	TX            uint64 // forwarded (XDP_TX)
	PassNotVIP    uint64 // not IP, or not to a VIP
	PassNotL4     uint64 // to a VIP but neither UDP nor TCP
	PassShort     uint64 // truncated or malformed headers
	PassNoBackend uint64 // no backend configured
}

// Total is the number of frames counted.
func (s Stats) Total() uint64 {
	return s.TX + s.PassNotVIP + s.PassNotL4 + s.PassShort + s.PassNoBackend
}

// Forwarder is a loaded and attached forwarder.
type Forwarder struct {
	cfg  Config
	link nsx.Link
	objs *objects
	xdp  link.Link
	mode xdpprog.Mode
	// peerXDP is the pass program Start attached to the peer, if any.
	peerXDP *peerPass

	mu     sync.Mutex
	closed bool
}

// Start loads the program for cfg and attaches it to cfg.Iface. It fails
// when the interface already has an XDP program. ctx bounds nothing that
// blocks today; it is there for the baselines' common shape.
func Start(ctx context.Context, cfg Config) (_ *Forwarder, err error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	l, err := nsx.LookupLink(cfg.NS, cfg.Iface)
	if err != nil {
		return nil, fmt.Errorf("xdpfwd: %w", err)
	}
	o, err := load()
	if err != nil {
		return nil, err
	}
	f := &Forwarder{cfg: cfg, link: l, objs: o}
	defer func() {
		if err != nil {
			f.Close()
		}
	}()
	if err := o.setVIPs(cfg.VIPs); err != nil {
		return nil, err
	}
	if err := o.setBackends(cfg.Backends, l.MAC); err != nil {
		return nil, err
	}
	if cfg.PeerIface != "" {
		if f.peerXDP, err = attachPeerPass(cfg.PeerNS, cfg.PeerIface); err != nil {
			return nil, err
		}
	}
	err = nsx.Do(cfg.NS, func() error {
		f.xdp, f.mode, err = o.attach(l.Index, cfg.Mode)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("xdpfwd: %s: %w", nsx.Where(cfg.Iface, cfg.NS), err)
	}
	return f, nil
}

// Mode is the attach mode in use (native or generic).
func (f *Forwarder) Mode() xdpprog.Mode { return f.mode }

// Link is the interface the forwarder runs on (its MAC is the frames' new
// source MAC).
func (f *Forwarder) Link() nsx.Link { return f.link }

// SetBackends replaces the backends (at once for new frames).
func (f *Forwarder) SetBackends(macs []net.HardwareAddr) error {
	c := f.cfg
	c.Backends = macs
	if err := c.validate(); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return errClosed
	}
	return f.objs.setBackends(macs, f.link.MAC)
}

var errClosed = errors.New("xdpfwd: closed")

// Stats reads the counters.
func (f *Forwarder) Stats() (Stats, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return Stats{}, errClosed
	}
	return f.objs.stats()
}

// Close detaches the program, releases it and its maps, and removes the
// peer's pass program if Start attached one. It is idempotent.
func (f *Forwarder) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil
	}
	f.closed = true
	var errs []error
	if f.xdp != nil {
		if err := f.xdp.Close(); err != nil {
			errs = append(errs, fmt.Errorf("detaching: %w", err))
		}
	}
	if f.peerXDP != nil {
		errs = append(errs, f.peerXDP.close())
	}
	errs = append(errs, f.objs.close())
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("xdpfwd: closing: %w", err)
	}
	return nil
}

// objects are the loaded program and maps.
type objects struct {
	prog                            *ebpf.Program
	vips, backends, config, counter *ebpf.Map
}

func collectionSpec() (*ebpf.CollectionSpec, error) {
	insns, err := instructions()
	if err != nil {
		return nil, fmt.Errorf("xdpfwd: assembling: %w", err)
	}
	return &ebpf.CollectionSpec{
		Maps: map[string]*ebpf.MapSpec{
			nameVIPs:     {Name: nameVIPs, Type: ebpf.Hash, KeySize: 16, ValueSize: 1, MaxEntries: MaxVIPs},
			nameBackends: {Name: nameBackends, Type: ebpf.Array, KeySize: 4, ValueSize: backendValueLen, MaxEntries: MaxBackends},
			nameConfig:   {Name: nameConfig, Type: ebpf.Array, KeySize: 4, ValueSize: cfgValueLen, MaxEntries: 1},
			nameCounters: {Name: nameCounters, Type: ebpf.PerCPUArray, KeySize: 4, ValueSize: 8, MaxEntries: numStats},
		},
		Programs: map[string]*ebpf.ProgramSpec{
			progName: {Name: progName, Type: ebpf.XDP, Instructions: insns, License: "Dual MIT/GPL"},
		},
	}, nil
}

// load assembles and loads the program; a verifier rejection carries the
// verifier's log.
func load() (*objects, error) {
	spec, err := collectionSpec()
	if err != nil {
		return nil, err
	}
	coll, err := ebpf.NewCollection(spec)
	if err != nil {
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			return nil, fmt.Errorf("xdpfwd: loading: %w\nverifier log:\n%s", err, strings.Join(ve.Log, "\n"))
		}
		return nil, fmt.Errorf("xdpfwd: loading: %w", err)
	}
	o := &objects{
		prog:     coll.DetachProgram(progName),
		vips:     coll.DetachMap(nameVIPs),
		backends: coll.DetachMap(nameBackends),
		config:   coll.DetachMap(nameConfig),
		counter:  coll.DetachMap(nameCounters),
	}
	coll.Close()
	return o, nil
}

func (o *objects) close() error {
	var errs []error
	for _, c := range []interface{ Close() error }{o.prog, o.vips, o.backends, o.config, o.counter} {
		errs = append(errs, c.Close())
	}
	return errors.Join(errs...)
}

// setVIPs adds addrs to the VIP map (the forwarder's VIPs never change).
func (o *objects) setVIPs(addrs []netip.Addr) error {
	for _, a := range addrs {
		v := uint8(6)
		if a.Is4() {
			v = 4
		}
		if err := o.vips.Update(a.As16(), v, ebpf.UpdateAny); err != nil {
			return fmt.Errorf("xdpfwd: adding VIP %s: %w", a, err)
		}
	}
	return nil
}

// setBackends writes the MACs first and the count last, so the program
// never picks a slot not yet written; a shrinking set is safe the same way.
func (o *objects) setBackends(macs []net.HardwareAddr, src net.HardwareAddr) error {
	for i, m := range macs {
		var v [backendValueLen]byte
		copy(v[:], m)
		if err := o.backends.Update(uint32(i), v, ebpf.UpdateAny); err != nil {
			return fmt.Errorf("xdpfwd: writing backend %d: %w", i, err)
		}
	}
	var c [cfgValueLen]byte
	putCount(c[cfgCount:], uint32(len(macs)))
	copy(c[cfgSrcMAC:], src)
	if err := o.config.Update(uint32(0), c, ebpf.UpdateAny); err != nil {
		return fmt.Errorf("xdpfwd: writing the config: %w", err)
	}
	return nil
}

func (o *objects) attach(ifindex int, mode xdpprog.Mode) (link.Link, xdpprog.Mode, error) {
	try := func(m xdpprog.Mode, flags link.XDPAttachFlags) (link.Link, xdpprog.Mode, error) {
		l, err := link.AttachXDP(link.XDPOptions{Program: o.prog, Interface: ifindex, Flags: flags})
		if err != nil {
			return nil, "", fmt.Errorf("attaching in %s mode: %w", m, err)
		}
		return l, m, nil
	}
	switch mode {
	case xdpprog.ModeNative:
		return try(xdpprog.ModeNative, link.XDPDriverMode)
	case xdpprog.ModeGeneric:
		return try(xdpprog.ModeGeneric, link.XDPGenericMode)
	}
	l, m, errNative := try(xdpprog.ModeNative, link.XDPDriverMode)
	if errNative == nil {
		return l, m, nil
	}
	l, m, errGeneric := try(xdpprog.ModeGeneric, link.XDPGenericMode)
	if errGeneric == nil {
		return l, m, nil
	}
	return nil, "", errors.Join(errNative, errGeneric)
}

func (o *objects) stats() (Stats, error) {
	var sums [numStats]uint64
	var perCPU []uint64
	for i := range sums {
		if err := o.counter.Lookup(uint32(i), &perCPU); err != nil {
			return Stats{}, fmt.Errorf("xdpfwd: reading counter %d: %w", i, err)
		}
		for _, v := range perCPU {
			sums[i] += v
		}
	}
	return Stats{
		TX:            sums[statTX],
		PassNotVIP:    sums[statPassNotVIP],
		PassNotL4:     sums[statPassNotL4],
		PassShort:     sums[statPassShort],
		PassNoBackend: sums[statPassNoBackend],
	}, nil
}

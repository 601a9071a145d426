package decap

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// MaxLocal is how many local addresses the Local map holds.
const MaxLocal = 256

// DefaultGUEPort is the GUE port of `xlb decap` without --gue-port, the
// default of the configuration's gue_port.
const DefaultGUEPort = 5555

// Errors that the functions of this package wrap.
var (
	ErrAddr    = errors.New("decap: not a usable local address")
	ErrTooMany = errors.New("decap: too many local addresses")
	ErrPort    = errors.New("decap: GUE port 0")
	ErrClosed  = errors.New("decap: objects closed")
)

// Objects are the loaded program and its maps. Close releases them; a
// pinned link holds its own references.
type Objects struct {
	Program  *ebpf.Program
	Local    *ebpf.Map // [16]byte address (IPv4-mapped for IPv4) → uint8 IP version
	Allow    *ebpf.Map // LPM trie (prefixKeyOf) → 1: the outer sources accepted
	VIPs     *ebpf.Map // LPM trie (prefixKeyOf) → 1: the inner destinations delivered
	Counters *ebpf.Map // per-CPU array of uint64, see Stats
}

const progName = "xlb_decap"

// Load assembles the program for GUE port guePort and loads it and its
// maps into the kernel; Local, Allow and VIPs start empty, so nothing is
// decapsulated until SetLocal, SetAllow and SetVIPs. A verifier rejection
// comes with the verifier's log.
func Load(guePort uint16) (*Objects, error) {
	if guePort == 0 {
		return nil, ErrPort
	}
	insns, err := instructions(guePort)
	if err != nil {
		return nil, fmt.Errorf("decap: assembling: %w", err)
	}
	spec := &ebpf.CollectionSpec{
		Maps: map[string]*ebpf.MapSpec{
			nameLocal: {
				Name: nameLocal, Type: ebpf.Hash,
				KeySize: 16, ValueSize: 1, MaxEntries: MaxLocal,
			},
			nameAllow: {
				Name: nameAllow, Type: ebpf.LPMTrie, Flags: unix.BPF_F_NO_PREALLOC,
				KeySize: 24, ValueSize: 1, MaxEntries: MaxAllow,
			},
			nameVIPs: {
				Name: nameVIPs, Type: ebpf.LPMTrie, Flags: unix.BPF_F_NO_PREALLOC,
				KeySize: 24, ValueSize: 1, MaxEntries: MaxVIPs,
			},
			nameMartian: {
				Name: nameMartian, Type: ebpf.LPMTrie, Flags: unix.BPF_F_NO_PREALLOC,
				KeySize: 24, ValueSize: 1, MaxEntries: maxMartian,
			},
			nameCounters: {
				Name: nameCounters, Type: ebpf.PerCPUArray,
				KeySize: 4, ValueSize: 8, MaxEntries: numStats,
			},
		},
		Programs: map[string]*ebpf.ProgramSpec{
			progName: {
				Name: progName, Type: ebpf.XDP, Instructions: insns, License: "Dual MIT/GPL",
			},
		},
	}
	coll, err := ebpf.NewCollection(spec)
	if err != nil {
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			return nil, fmt.Errorf("decap: loading: %w\nverifier log:\n%s", err, strings.Join(ve.Log, "\n"))
		}
		return nil, fmt.Errorf("decap: loading: %w", err)
	}
	// The program holds the martian map; no one else needs it.
	err = fillMartians(coll.Maps[nameMartian])
	o := &Objects{
		Program:  coll.DetachProgram(progName),
		Local:    coll.DetachMap(nameLocal),
		Allow:    coll.DetachMap(nameAllow),
		VIPs:     coll.DetachMap(nameVIPs),
		Counters: coll.DetachMap(nameCounters),
	}
	coll.Close()
	if err != nil {
		_ = o.Close()
		return nil, err
	}
	return o, nil
}

// SetLocal replaces the local addresses: adds the new ones first, then
// removes those that are gone, so an address in both sets is never
// missing. It wraps ErrAddr for an unspecified, multicast or zoned
// address and ErrTooMany beyond MaxLocal.
func (o *Objects) SetLocal(addrs []netip.Addr) error {
	if o.Local == nil {
		return ErrClosed
	}
	return setLocal(o.Local, addrs)
}

func setLocal(m *ebpf.Map, addrs []netip.Addr) error {
	want := make(map[[16]byte]uint8, len(addrs))
	for _, a := range addrs {
		if !a.IsValid() || a.IsUnspecified() || a.IsMulticast() || a.Zone() != "" {
			return fmt.Errorf("%w: %v", ErrAddr, a)
		}
		a = a.Unmap()
		v := uint8(6)
		if a.Is4() {
			v = 4
		}
		want[a.As16()] = v
	}
	if len(want) > MaxLocal {
		return fmt.Errorf("%w: %d, at most %d", ErrTooMany, len(want), MaxLocal)
	}
	var stale [][16]byte
	var k [16]byte
	var v uint8
	it := m.Iterate()
	for it.Next(&k, &v) {
		if _, ok := want[k]; !ok {
			stale = append(stale, k)
		}
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("decap: reading local addresses: %w", err)
	}
	for k, v := range want {
		if err := m.Put(k, v); err != nil {
			return fmt.Errorf("decap: adding local address: %w", err)
		}
	}
	for _, k := range stale {
		if err := m.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("decap: removing local address: %w", err)
		}
	}
	return nil
}

// localAddrs lists the addresses in m.
func localAddrs(m *ebpf.Map) ([]netip.Addr, error) {
	var out []netip.Addr
	var k [16]byte
	var v uint8
	it := m.Iterate()
	for it.Next(&k, &v) {
		a := netip.AddrFrom16(k)
		if v == 4 {
			a = a.Unmap()
		}
		out = append(out, a)
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("decap: reading local addresses: %w", err)
	}
	return out, nil
}

// Stats are the program's counters, summed over CPUs since it was loaded.
// Every frame it sees is counted in exactly one of them.
type Stats struct {
	IPIP4 uint64 `json:"ipip_outer_v4"` // IPIP decapsulated, outer IPv4
	IPIP6 uint64 `json:"ipip_outer_v6"` // IPIP decapsulated, outer IPv6
	GUE4  uint64 `json:"gue_outer_v4"`  // GUE decapsulated, outer IPv4
	GUE6  uint64 `json:"gue_outer_v6"`  // GUE decapsulated, outer IPv6
	// PassedNotTunnel: frames that are not IPIP or UDP to the GUE port
	// (or not IP): the host's own traffic, passed untouched.
	PassedNotTunnel uint64 `json:"passed_not_tunnel"`
	// PassedNotLocal: tunnel packets whose outer destination is not a
	// local address, passed untouched.
	PassedNotLocal uint64 `json:"passed_not_local"`
	// PassedInvalid: truncated or malformed frames, outer fragments,
	// GUE that is not version 0 data, inner packets that are not IPv4 or
	// IPv6, passed untouched (the kernel drops what it cannot use).
	PassedInvalid uint64 `json:"passed_invalid"`

	// Tunnel frames to a local address that the balancers did not send,
	// dropped (XDP_DROP) by reason, checked in this order:
	DroppedOuterTTL     uint64 `json:"dropped_outer_ttl_zero"`    // outer TTL or hop limit 0
	DroppedOuterMartian uint64 `json:"dropped_outer_martian"`     // outer source a martian (Martians)
	DroppedNotAllowed   uint64 `json:"dropped_outer_not_allowed"` // outer source not in Allow
	DroppedInnerMartian uint64 `json:"dropped_inner_martian"`     // inner source a martian
	// DroppedInnerOwn: the inner source is a balancer's (in Allow), a VIP
	// or a local address: no client has it.
	DroppedInnerOwn uint64 `json:"dropped_inner_own"`
	// DroppedNotServed: the inner destination is not in VIPs; the kernel
	// would route it on (ip_forward) or drop it.
	DroppedNotServed uint64 `json:"dropped_inner_not_served"`
}

// Decapsulated is the number of frames stripped.
func (s Stats) Decapsulated() uint64 { return s.IPIP4 + s.IPIP6 + s.GUE4 + s.GUE6 }

// Dropped is the number of tunnel frames dropped, all reasons.
func (s Stats) Dropped() uint64 {
	return s.DroppedOuterTTL + s.DroppedOuterMartian + s.DroppedNotAllowed +
		s.DroppedInnerMartian + s.DroppedInnerOwn + s.DroppedNotServed
}

// Total is the number of frames counted.
func (s Stats) Total() uint64 {
	return s.Decapsulated() + s.PassedNotTunnel + s.PassedNotLocal + s.PassedInvalid + s.Dropped()
}

// Stats reads and sums the per-CPU counters.
func (o *Objects) Stats() (Stats, error) {
	if o.Counters == nil {
		return Stats{}, ErrClosed
	}
	return readStats(o.Counters)
}

func readStats(m *ebpf.Map) (Stats, error) {
	var sums [numStats]uint64
	var perCPU []uint64
	for i := range sums {
		if err := m.Lookup(uint32(i), &perCPU); err != nil {
			return Stats{}, fmt.Errorf("decap: reading counter %d: %w", i, err)
		}
		for _, v := range perCPU {
			sums[i] += v
		}
	}
	return Stats{
		IPIP4: sums[statIPIP4], IPIP6: sums[statIPIP6], GUE4: sums[statGUE4], GUE6: sums[statGUE6],
		PassedNotTunnel: sums[statPassedNotTunnel],
		PassedNotLocal:  sums[statPassedNotLocal],
		PassedInvalid:   sums[statPassedInvalid],

		DroppedOuterTTL:     sums[statDroppedOuterTTL],
		DroppedOuterMartian: sums[statDroppedOuterMartian],
		DroppedNotAllowed:   sums[statDroppedNotAllowed],
		DroppedInnerMartian: sums[statDroppedInnerMartian],
		DroppedInnerOwn:     sums[statDroppedInnerOwn],
		DroppedNotServed:    sums[statDroppedNotServed],
	}, nil
}

// Close releases the program and the maps; it is safe to call twice.
func (o *Objects) Close() error {
	var errs []error
	if o.Program != nil {
		errs = append(errs, o.Program.Close())
	}
	for _, m := range []*ebpf.Map{o.Local, o.Allow, o.VIPs, o.Counters} {
		if m != nil {
			errs = append(errs, m.Close())
		}
	}
	o.Program, o.Local, o.Allow, o.VIPs, o.Counters = nil, nil, nil, nil, nil
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("decap: closing: %w", err)
	}
	return nil
}

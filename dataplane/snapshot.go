package dataplane

import (
	"encoding/binary"
	"net/netip"

	"xlb/config"
)

// BackendRef names a backend stably across reloads: the low 20 bits are its
// slot in Snapshot.Backends, the high 12 bits the slot's generation. A
// tracking entry that outlives its backend finds a different generation (or
// an empty slot) and is known to be invalid (M5), even after the slot is
// reused.
type BackendRef uint32

const (
	refSlotBits = 20
	refSlotMask = 1<<refSlotBits - 1
	// MaxBackendSlots bounds the number of backends (live and draining).
	MaxBackendSlots = 1 << refSlotBits
	// MaxGeneration is the largest generation a ref can carry.
	MaxGeneration = 1<<(32-refSlotBits) - 1
)

// MakeRef packs a slot and generation.
func MakeRef(slot, gen uint32) BackendRef {
	return BackendRef(gen<<refSlotBits | slot&refSlotMask)
}

// Slot returns the slot index.
func (r BackendRef) Slot() uint32 { return uint32(r) & refSlotMask }

// Gen returns the generation.
func (r BackendRef) Gen() uint32 { return uint32(r) >> refSlotBits }

// Side is the group role of an eligible set (SPEC E5).
type Side uint8

const (
	SidePrimary Side = iota
	SideFailover
)

func (s Side) String() string {
	if s == SideFailover {
		return "failover"
	}
	return "primary"
}

// Backend is one backend as the hot path sees it. Immutable once published.
type Backend struct {
	Ref      BackendRef
	Name     string
	IP       netip.Addr
	Addr     [16]byte // IP in 16-byte form (IPv4-mapped for IPv4)
	V6       bool
	Service  uint16 // ID of its backend service
	Group    string
	Failover bool
	// FleetID names the backend to the other instances ([flow_sync]):
	// FleetID(its service's name, IP).
	FleetID uint64

	// MAC is the destination MAC of frames for this backend: the backend's
	// own (L2_DSR) or the next hop's (IPIP/GUE). MACKnown false means it is
	// not resolved yet; such a backend is never sent a frame.
	MAC      [6]byte
	MACKnown bool

	Healthy bool
	// Weight is the weight used for selection (already 1 for everyone when
	// the service is not weighted or has fallen back to equal weights).
	Weight uint32
	// ReportedWeight is the last weight the backend reported (W1);
	// WeightState what its latest reply said about it (W1a: VALID,
	// MISSING_WEIGHT, INVALID_WEIGHT, UNAVAILABLE_WEIGHT), for reports only.
	ReportedWeight uint32
	WeightState    string

	// Removed: the backend left the configuration or was drained by an
	// operator (M5). It is never selected; entries that point at it stay
	// valid while now < DrainUntil.
	Removed    bool
	DrainUntil int64 // ms
}

// Service is one backend service as the hot path sees it. Immutable once
// published; a new eligible set means a new Service value.
type Service struct {
	ID   uint16
	Name string

	Affinity    config.Affinity
	Mode        config.TrackingMode
	Persistence config.Persistence
	IdleSec     uint32
	Weighted    bool
	// WeightFallback: a backend reported a missing or invalid weight, so the
	// service uses equal weights (W1a).
	WeightFallback bool

	Method  config.ForwardingMethod
	GUEPort uint16

	FailoverEnabled        bool
	FailoverRatio          float64
	DropTrafficIfUnhealthy bool
	DisableDrainOnFailover bool
	DrainingTimeoutMs      int64

	// Members are all current (not removed) backends of the service, in
	// configuration order.
	Members []BackendRef

	// Eligible is the eligible set (E1–E4) and Side its side (E5);
	// EligibleWhy says which rule produced it, for explain.
	Eligible    []BackendRef
	Side        Side
	EligibleWhy string
	// Fingerprint is Snapshot.Fingerprint of this service, as the control
	// plane computed it when the set or table last changed.
	Fingerprint string
	// Table is the Maglev table: Table[h % len] indexes Eligible. Empty when
	// Eligible is empty. An entry is 2 bytes: a service has at most
	// maglev.MaxBackends (65,535) backends, as the configuration checks.
	Table []uint16
	// QUIC routes the service's QUIC packets by connection ID; nil without
	// [[backend_service.quic_lb]].
	QUIC *QUICRoutes
}

// Rule is one forwarding rule.
type Rule struct {
	Name     string
	Index    int // position in the configuration
	VIP      netip.Addr
	Protocol config.RuleProtocol
	AllPorts bool
	Ports    []config.PortRange
	Sources  []Prefix // empty: every source is allowed
	Service  uint16
	// DrainUntil is 0 for a rule of the running configuration. A rule a
	// reload removed is kept, in VIPRules.Draining, until then (ms): its
	// tracked flows keep forwarding, anything else is dropped (M5).
	DrainUntil int64
}

// Prefix is a source range in 16-byte form, checked with two masked words.
type Prefix struct {
	Hi, Lo         uint64
	MaskHi, MaskLo uint64
	Text           string
}

// MakePrefix converts a netip.Prefix into 16-byte form (IPv4 as mapped).
func MakePrefix(p netip.Prefix) Prefix {
	a := Addr16(p.Addr())
	bits := p.Bits()
	if p.Addr().Is4() {
		bits += 96
	}
	var m [16]byte
	for i := 0; i < bits; i++ {
		m[i/8] |= 0x80 >> (i % 8)
	}
	return Prefix{
		Hi:     binary.BigEndian.Uint64(a[0:8]) & binary.BigEndian.Uint64(m[0:8]),
		Lo:     binary.BigEndian.Uint64(a[8:16]) & binary.BigEndian.Uint64(m[8:16]),
		MaskHi: binary.BigEndian.Uint64(m[0:8]), MaskLo: binary.BigEndian.Uint64(m[8:16]),
		Text: p.String(),
	}
}

// Contains reports whether a (16-byte form) is inside the prefix.
func (p *Prefix) Contains(a *[16]byte) bool {
	return binary.BigEndian.Uint64(a[0:8])&p.MaskHi == p.Hi &&
		binary.BigEndian.Uint64(a[8:16])&p.MaskLo == p.Lo
}

// Addr16 returns an address in 16-byte form (IPv4 as ::ffff:a.b.c.d).
func Addr16(a netip.Addr) [16]byte {
	if a.Is4() {
		return netip.AddrFrom16(a.As16()).As16()
	}
	return a.As16()
}

// AddrFrom16 turns a 16-byte form address back into a netip.Addr (unmapping IPv4).
func AddrFrom16(a [16]byte) netip.Addr {
	return netip.AddrFrom16(a).Unmap()
}

// VIPRules are the rules of one VIP: protocol-specific rules first, then the
// L3_DEFAULT rule if any (FR2 precedence).
type VIPRules struct {
	VIP   netip.Addr
	Rules []Rule
	// Draining are the rules of the VIP a reload removed, still draining,
	// in the same order; a frame is matched against them only when no
	// current rule takes it. A VIP whose rules were all removed has only
	// these.
	Draining []Rule
}

type vipEntry struct {
	hi, lo uint64
	rules  *VIPRules
}

// Local is what the balancer itself contributes to rewritten frames.
type Local struct {
	MAC        [6]byte  // source MAC of frames we send
	EncapSrcV4 [16]byte // outer source for IPv4 outer headers (IPIP/GUE)
	EncapSrcV6 [16]byte // outer source for IPv6 outer headers
	HasSrcV4   bool
	HasSrcV6   bool
	// MaxFrame bounds a rewritten frame (the frame buffer, or the MTU plus
	// L2 header); 0 means unbounded except by the buffer.
	MaxFrame int
	// MTU is the interface's IP MTU: an encapsulated packet longer than
	// that is too big, and its sender is told the MTU left for it (ICMP
	// fragmentation needed / packet too big, X1). 0: unknown, only
	// MaxFrame bounds.
	MTU int
	// Self are the interface's own addresses and SubnetBroadcasts the
	// directed broadcasts of its IPv4 subnets (SelfAddrs): no client
	// sends from either (FR8). The encapsulation sources count as Self.
	Self             []netip.Addr
	SubnetBroadcasts []netip.Addr
}

// Snapshot is everything the hot path needs, immutable once published.
type Snapshot struct {
	Gen      uint64
	Backends []*Backend // indexed by BackendRef.Slot(); nil for free slots
	Services []*Service // indexed by service ID; nil for unused IDs
	Rules    []*VIPRules
	Local    Local

	vips   []vipEntry             // small: linear scan
	vipMap map[[16]byte]*VIPRules // large: map
	srcs   srcIndex               // sources no client has (FR8)
}

const vipLinearMax = 8

// IndexVIPs prepares the VIP lookup and the source checks (FR8); call
// once after filling Rules, Backends and Local.
func (s *Snapshot) IndexVIPs() {
	defer s.indexSources()
	s.vips = s.vips[:0]
	s.vipMap = nil
	if len(s.Rules) > vipLinearMax {
		s.vipMap = make(map[[16]byte]*VIPRules, len(s.Rules))
	}
	for _, r := range s.Rules {
		a := Addr16(r.VIP)
		if s.vipMap != nil {
			s.vipMap[a] = r
			continue
		}
		s.vips = append(s.vips, vipEntry{
			hi: binary.LittleEndian.Uint64(a[0:8]), lo: binary.LittleEndian.Uint64(a[8:16]), rules: r,
		})
	}
}

// LookupVIP returns the rules of a VIP, or nil when dst is not a VIP (FR1).
func (s *Snapshot) LookupVIP(dst *[16]byte) *VIPRules {
	if s.vipMap != nil {
		return s.vipMap[*dst]
	}
	hi, lo := binary.LittleEndian.Uint64(dst[0:8]), binary.LittleEndian.Uint64(dst[8:16])
	for i := range s.vips {
		if s.vips[i].hi == hi && s.vips[i].lo == lo {
			return s.vips[i].rules
		}
	}
	return nil
}

// Backend resolves a ref; nil when the slot is free or was reused.
func (s *Snapshot) Backend(r BackendRef) *Backend {
	slot := r.Slot()
	if int(slot) >= len(s.Backends) {
		return nil
	}
	b := s.Backends[slot]
	if b == nil || b.Ref != r {
		return nil
	}
	return b
}

// Service returns the service with an ID, or nil.
func (s *Snapshot) Service(id uint16) *Service {
	if int(id) >= len(s.Services) {
		return nil
	}
	return s.Services[id]
}

// BackendByName returns the backends named n (the configured name, or the IP
// text of unnamed ones), removed ones included.
func (s *Snapshot) BackendByName(n string) []*Backend {
	var out []*Backend
	for _, b := range s.Backends {
		if b != nil && (b.Name == n || b.IP.String() == n) {
			out = append(out, b)
		}
	}
	return out
}

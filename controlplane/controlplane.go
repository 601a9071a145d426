package controlplane

import (
	"cmp"
	"errors"
	"fmt"
	"hash/fnv"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"xlb/config"
	"xlb/dataplane"
	"xlb/maglev"
	"xlb/quiclb"
)

// WeightState is what the last health-check reply said about the weight (W1a).
type WeightState uint8

const (
	// WeightValid: a valid weight 0..1000 was reported.
	WeightValid WeightState = iota
	// WeightMissing: the reply had no weight header; the service falls back
	// to equal weights.
	WeightMissing
	// WeightInvalid: the header was not an integer 0..1000; fallback too.
	WeightInvalid
	// WeightUnavailable: no reply (timeout, never answered); the last valid
	// weight is kept and there is no fallback.
	WeightUnavailable
)

var weightStateNames = [...]string{"VALID", "MISSING_WEIGHT", "INVALID_WEIGHT", "UNAVAILABLE_WEIGHT"}

func (w WeightState) String() string { return weightStateNames[w] }

// Options configure a control plane.
type Options struct {
	// Local is what the balancer contributes to rewritten frames.
	Local dataplane.Local
	// InitialHealthy: a backend new to the configuration starts healthy
	// (sim, explain) instead of unhealthy until probed (run).
	InitialHealthy bool
	// InitialWeight is a new backend's weight until it reports one.
	InitialWeight uint32
	// Resolve gives the destination MAC of a backend (its own for L2_DSR,
	// the next hop's for IPIP/GUE); nil uses the configured MAC or, when
	// there is none, a synthetic one (sim and explain send nothing).
	Resolve func(ep config.Endpoint, method config.ForwardingMethod) ([6]byte, bool)
	Logger  *zap.Logger
	// Restore is the state a previous process left (State): its service
	// IDs and backend refs are taken over for what the configuration
	// still has, so that the conntrack entries kept with it stay valid.
	Restore *State
	// OnRefs, when set, is called with the state before any snapshot that
	// carries a service ID or backend ref the last call did not (and
	// before the first), under the control plane's lock: once it returns,
	// the refs the data plane may record are in the state it saved.
	OnRefs func(State)
}

// ErrUnknownBackend is returned for a name that names no current backend.
var ErrUnknownBackend = errors.New("no such backend")

// ControlPlane owns all mutable policy: configuration, health, weights,
// draining. Every change builds a new immutable snapshot and publishes it to
// the engine atomically; workers never wait for it.
type ControlPlane struct {
	mu       sync.Mutex
	opts     Options
	log      *zap.Logger
	engine   *dataplane.Engine
	cfg      *config.Config
	services map[string]*serviceState
	order    []string // service names in configuration order
	nextSvc  uint16
	slots    []*backendState // by slot; nil when free
	gens     []uint32        // current generation of each slot
	free     []uint32        // free slots, oldest first
	builders map[uint32]*maglev.Builder
	gen      uint64
	snap     *dataplane.Snapshot

	// ids are the IDs of c.services; bySvcIP finds the slot of a service's
	// backend by address (removed ones too, until their slot is freed).
	// Both keep a reload and a batch of health reports linear in the
	// number of backends.
	ids     map[uint16]struct{}
	bySvcIP map[svcIP]uint32

	// draining are the forwarding rules reloads removed, until their
	// drains end (M5); retired the removed services such rules still name,
	// by ID, for what resolving a tracked flow needs (affinity, tracking,
	// forwarding method). A retired service keeps its ID reserved.
	draining []drainingRule
	retired  map[uint16]*serviceState
	// refsDirty: IDs, refs or drains changed since OnRefs was last called.
	refsDirty bool
	restored  int // backends taken over from Options.Restore
}

// drainingRule is a removed forwarding rule while it drains; key is what
// makes a rule the same rule in the next configuration (ruleKey).
type drainingRule struct {
	key  string
	rule dataplane.Rule
}

// svcIP names a backend as the configuration does: a service and an
// address, unique within the service.
type svcIP struct {
	service string
	ip      netip.Addr
}

type serviceState struct {
	id      uint16
	cfg     config.Service
	members []uint32 // slots, configuration order

	// The last Maglev build, reused while the table size, the eligible set
	// and its weights stay the same: tableSize and tableSet are what it was
	// built from.
	tableSize uint32
	tableSet  []member
	table     []uint16
	eligible  []dataplane.BackendRef
	// fingerprint is the table's and set's (dataplane.Snapshot.Fingerprint),
	// computed when either changes, for fpSide.
	fingerprint string
	fpSide      dataplane.Side
	lastSide    dataplane.Side
	sideSet     bool
	// switches counts side changes: [0] to failover, [1] back to primary.
	switches [2]uint64
	// quic is cfg's QUIC-LB configurations by config rotation value; nil
	// without [[backend_service.quic_lb]].
	quic *[8]*quiclb.Config
}

type backendState struct {
	ref      dataplane.BackendRef
	service  string
	fleetID  uint64 // dataplane.FleetID(service, its IP): set once, as the key never changes
	ep       config.Endpoint
	method   config.ForwardingMethod // its service's
	group    string
	failover bool

	healthy     bool
	weight      uint32 // last valid reported weight
	weightState WeightState

	removed    bool
	drained    bool // by an operator rather than by the configuration
	drainUntil int64
}

// New builds the control plane for cfg and publishes its first snapshot to
// engine at time now (ms).
func New(cfg *config.Config, engine *dataplane.Engine, opts Options, now int64) (*ControlPlane, error) {
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	c := &ControlPlane{
		opts:     opts,
		log:      opts.Logger,
		engine:   engine,
		services: map[string]*serviceState{},
		builders: map[uint32]*maglev.Builder{},
		ids:      map[uint16]struct{}{},
		bySvcIP:  map[svcIP]uint32{},
		retired:  map[uint16]*serviceState{},
	}
	if opts.Restore != nil {
		c.restore(cfg, opts.Restore)
	}
	if _, err := c.Apply(cfg, now); err != nil {
		return nil, err
	}
	return c, nil
}

// Diff summarises what Apply changed.
type Diff struct {
	ServicesAdded, ServicesRemoved []string
	BackendsAdded, BackendsRemoved []string
	BackendsKept                   int
}

// Apply makes cfg the running configuration as one atomic step (X2):
// unchanged backends keep their refs (so their flows keep going), removed
// ones drain per M5 from now, new ones start per Options.
func (c *ControlPlane) Apply(cfg *config.Config, now int64) (Diff, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var d Diff
	for _, s := range cfg.Services {
		if _, err := c.builder(s.MaglevTableSize); err != nil {
			return d, fmt.Errorf("backend_service %q: %w", s.Name, err)
		}
	}
	// Let finished drains go first, so a backend re-added after its drain
	// ended starts afresh instead of reviving entries M5 removed.
	c.reap(now)
	c.drainRules(cfg, now)

	// The slots of each service's backends, removed ones too (so a backend
	// that comes back revives its slot and its flows), in slot order.
	slotsOf := map[string][]uint32{}
	for slot, b := range c.slots {
		if b != nil {
			slotsOf[b.service] = append(slotsOf[b.service], uint32(slot))
		}
	}
	seen := make(map[string]bool, len(cfg.Services))
	newOrder := make([]string, 0, len(cfg.Services))
	kept := map[uint32]bool{}
	for _, s := range cfg.Services {
		seen[s.Name] = true
		newOrder = append(newOrder, s.Name)
		st, ok := c.services[s.Name]
		if !ok {
			// A service back under its old name ends the drain of the
			// retired one: names stay unique in the snapshot.
			c.endRetired(s.Name)
			st = &serviceState{id: c.allocServiceID()}
			c.services[s.Name] = st
			c.ids[st.id] = struct{}{}
			d.ServicesAdded = append(d.ServicesAdded, s.Name)
		}
		st.cfg = s
		st.quic = c.quicConfigs(&s)
		drain := s.DrainingTimeout.Milliseconds()

		clear(kept)
		st.members = st.members[:0]
		for _, g := range s.Groups {
			for _, ep := range g.Endpoints {
				key := svcIP{s.Name, ep.IP}
				slot, ok := c.bySvcIP[key]
				if ok {
					b := c.slots[slot]
					if b.removed && !b.drained {
						b.removed = false
					}
					d.BackendsKept++
				} else {
					slot = c.allocSlot()
					c.slots[slot] = &backendState{
						ref:     dataplane.MakeRef(slot, c.gens[slot]),
						service: s.Name,
						fleetID: dataplane.FleetID(s.Name, ep.IP),
						healthy: c.opts.InitialHealthy,
						weight:  c.opts.InitialWeight,
					}
					c.bySvcIP[key] = slot
					d.BackendsAdded = append(d.BackendsAdded, ep.Name)
				}
				b := c.slots[slot]
				b.ep, b.method, b.group, b.failover = ep, s.ForwardingMethod, g.Name, g.Failover
				kept[slot] = true
				st.members = append(st.members, slot)
			}
		}
		for _, slot := range slotsOf[s.Name] {
			if b := c.slots[slot]; !kept[slot] && !b.removed {
				b.removed, b.drained, b.drainUntil = true, false, now+drain
				d.BackendsRemoved = append(d.BackendsRemoved, b.ep.Name)
			}
		}
	}
	for name, st := range c.services {
		if seen[name] {
			continue
		}
		drain := st.cfg.DrainingTimeout.Milliseconds()
		for _, slot := range slotsOf[name] {
			if b := c.slots[slot]; !b.removed {
				b.removed, b.drainUntil = true, now+drain
				d.BackendsRemoved = append(d.BackendsRemoved, b.ep.Name)
			}
		}
		delete(c.services, name)
		if c.ruleDrains(st.id) {
			st.members = nil
			c.retired[st.id] = st
		} else {
			delete(c.ids, st.id)
		}
		d.ServicesRemoved = append(d.ServicesRemoved, name)
	}
	c.order = newOrder
	c.cfg = cfg
	c.refsDirty = true
	c.publish(now)
	return d, nil
}

func (c *ControlPlane) builder(size uint32) (*maglev.Builder, error) {
	if b, ok := c.builders[size]; ok {
		return b, nil
	}
	b, err := maglev.NewBuilder(size)
	if err != nil {
		return nil, err
	}
	c.builders[size] = b
	return b, nil
}

// allocServiceID returns an ID no current service uses. IDs scope tracking
// keys (T4); a retired ID is reused only after every other ID, and entries of
// a retired service name backends that no longer resolve.
func (c *ControlPlane) allocServiceID() uint16 {
	for {
		if _, used := c.ids[c.nextSvc]; !used {
			break
		}
		c.nextSvc++
	}
	id := c.nextSvc
	c.nextSvc++
	return id
}

func (c *ControlPlane) allocSlot() uint32 {
	if len(c.free) > 0 {
		slot := c.free[0]
		c.free = c.free[1:]
		c.gens[slot] = (c.gens[slot] + 1) & dataplane.MaxGeneration
		return slot
	}
	c.slots = append(c.slots, nil)
	c.gens = append(c.gens, 0)
	return uint32(len(c.slots) - 1)
}

// ruleKey is what makes a forwarding rule of cfg the same rule in another
// configuration: what it matches and the name of its service (not its own
// name nor its place in the file).
func ruleKey(cfg *config.Config, r *config.ForwardingRule) string {
	return fmt.Sprintf("%s|%d|%t|%v|%v|%s", r.VIP, r.Protocol, r.AllPorts, r.Ports, r.SourceRanges,
		cfg.Services[r.Service].Name)
}

// drainRules starts the drain of every rule of the running configuration
// that cfg lacks, for its service's connection_draining_timeout_sec from
// now (none with 0), and ends the drain of rules cfg has again. It runs
// before c.services changes, while the removed rules' services still
// have their IDs there.
func (c *ControlPlane) drainRules(cfg *config.Config, now int64) {
	keys := make(map[string]bool, len(cfg.Rules))
	for i := range cfg.Rules {
		keys[ruleKey(cfg, &cfg.Rules[i])] = true
	}
	kept := c.draining[:0]
	for _, dr := range c.draining {
		if !keys[dr.key] {
			kept = append(kept, dr)
		}
	}
	c.draining = kept
	if c.cfg == nil {
		return
	}
	for i := range c.cfg.Rules {
		r := &c.cfg.Rules[i]
		k := ruleKey(c.cfg, r)
		timeout := c.cfg.Services[r.Service].DrainingTimeout.Milliseconds()
		if keys[k] || timeout <= 0 {
			continue
		}
		keys[k] = true // once, however many times it was listed
		dr := c.rule(c.cfg, i)
		dr.DrainUntil = now + timeout
		c.draining = append(c.draining, drainingRule{key: k, rule: dr})
	}
	c.dropRetired()
}

// ruleDrains reports whether a draining rule names the service id.
func (c *ControlPlane) ruleDrains(id uint16) bool {
	for _, dr := range c.draining {
		if dr.rule.Service == id {
			return true
		}
	}
	return false
}

// dropRetired forgets the retired services no draining rule names and
// frees their IDs.
func (c *ControlPlane) dropRetired() {
	for id := range c.retired {
		if !c.ruleDrains(id) {
			delete(c.retired, id)
			delete(c.ids, id)
		}
	}
}

// endRetired ends the drain of the retired service called name, and of
// its rules, at once.
func (c *ControlPlane) endRetired(name string) {
	for id, st := range c.retired {
		if st.cfg.Name != name {
			continue
		}
		kept := c.draining[:0]
		for _, dr := range c.draining {
			if dr.rule.Service != id {
				kept = append(kept, dr)
			}
		}
		c.draining = kept
	}
	c.dropRetired()
}

// reapRules ends the drains of removed rules that are over.
func (c *ControlPlane) reapRules(now int64) {
	kept := c.draining[:0]
	for _, dr := range c.draining {
		if now < dr.rule.DrainUntil {
			kept = append(kept, dr)
		}
	}
	if len(kept) != len(c.draining) {
		c.draining = kept
		c.dropRetired()
	}
}

// VIPs returns the VIPs the data plane must still see at now: those of the
// running configuration's rules and of removed rules still draining (M5),
// each once; and drainEnd, the time the next drain ends (0: none drains),
// when the list will shrink. Drains already over are ended first (and the
// snapshot without them published).
func (c *ControlPlane) VIPs(now int64) (vips []netip.Addr, drainEnd int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if n := len(c.draining); n > 0 {
		if c.reapRules(now); len(c.draining) != n {
			c.publish(now)
		}
	}
	for _, vr := range c.snap.Rules {
		vips = append(vips, vr.VIP)
	}
	for _, dr := range c.draining {
		if drainEnd == 0 || dr.rule.DrainUntil < drainEnd {
			drainEnd = dr.rule.DrainUntil
		}
	}
	return vips, drainEnd
}

// Draining returns the backends still draining at now (removed by a
// reload or an operator, M5), whose tracked flows are still sent to them,
// as a configuration of their own for the neighbour resolver: each under
// its service, with its forwarding method, in slot order (nil: none). It
// also returns when the first of those drains ends (0: none).
func (c *ControlPlane) Draining(now int64) (cfg *config.Config, drainEnd int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	index := map[string]int{}
	for _, b := range c.slots {
		if b == nil || !b.removed || now >= b.drainUntil {
			continue
		}
		if cfg == nil {
			cfg = &config.Config{}
		}
		i, ok := index[b.service]
		if !ok {
			i = len(cfg.Services)
			index[b.service] = i
			cfg.Services = append(cfg.Services, config.Service{Name: b.service, ForwardingMethod: b.method,
				Groups: []config.Group{{}}})
		}
		g := &cfg.Services[i].Groups[0]
		g.Endpoints = append(g.Endpoints, b.ep)
		if drainEnd == 0 || b.drainUntil < drainEnd {
			drainEnd = b.drainUntil
		}
	}
	return cfg, drainEnd
}

// reap frees the slots of removed backends whose draining is over; their
// entries then resolve to nothing (M5) and the slot's next owner gets a new
// generation.
func (c *ControlPlane) reap(now int64) {
	for slot, b := range c.slots {
		if b != nil && b.removed && !b.drained && now >= b.drainUntil {
			if key := (svcIP{b.service, b.ep.IP}); c.bySvcIP[key] == uint32(slot) {
				delete(c.bySvcIP, key)
			}
			c.slots[slot] = nil
			c.free = append(c.free, uint32(slot))
			c.refsDirty = true
		}
	}
}

// SetHealth sets the health of the backends named name (configured name or
// IP text) at once, without thresholds (sim; the health checker applies its
// thresholds before calling this).
func (c *ControlPlane) SetHealth(name string, healthy bool, now int64) error {
	_, err := c.update(name, now, func(b *backendState) { b.healthy = healthy })
	return err
}

// SetWeight records a weight report for the backends named name.
func (c *ControlPlane) SetWeight(name string, weight uint32, state WeightState, now int64) error {
	_, err := c.update(name, now, func(b *backendState) { b.setWeight(weight, state) })
	return err
}

// Drain removes a backend from service as an operator (M5), without editing
// the file: never selected again, its flows drain for the service's timeout.
// name is an endpoint's name or address, which drains it in every service
// that has it, or SERVICE/NAME for one service's. It returns the backends
// it drained, as "service/name".
func (c *ControlPlane) Drain(name string, now int64) ([]string, error) {
	return c.update(name, now, func(b *backendState) {
		if b.removed {
			return
		}
		b.removed, b.drained = true, true
		b.drainUntil = now + c.services[b.service].cfg.DrainingTimeout.Milliseconds()
		c.refsDirty = true
	})
}

// Undrain returns an operator-drained backend to service; name as for
// Drain.
func (c *ControlPlane) Undrain(name string, now int64) ([]string, error) {
	return c.update(name, now, func(b *backendState) {
		if !b.drained {
			return
		}
		b.removed, b.drained = false, false
		c.refsDirty = true
		if now >= b.drainUntil {
			// Its entries were removed when draining ended (M5); a new
			// generation keeps them from coming back to life.
			slot := b.ref.Slot()
			c.gens[slot] = (c.gens[slot] + 1) & dataplane.MaxGeneration
			b.ref = dataplane.MakeRef(slot, c.gens[slot])
		}
	})
}

// update applies fn to every current backend that name selects: an
// endpoint's name or address (in every service), or SERVICE/NAME (in that
// service only). It returns them as "service/name", in slot order.
func (c *ControlPlane) update(name string, now int64, fn func(b *backendState)) ([]string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	svc, inSvc, scoped := strings.Cut(name, "/")
	var hit []string
	for _, b := range c.slots {
		if b == nil || (b.removed && !b.drained) {
			continue
		}
		is := func(n string) bool { return b.ep.Name == n || b.ep.IP.String() == n }
		if is(name) || (scoped && b.service == svc && is(inSvc)) {
			fn(b)
			label := b.ep.Name
			if label == "" {
				label = b.ep.IP.String()
			}
			hit = append(hit, b.service+"/"+label)
		}
	}
	if len(hit) == 0 {
		return nil, fmt.Errorf("%w: %q", ErrUnknownBackend, name)
	}
	c.publish(now)
	return hit, nil
}

// Publish rebuilds and publishes the snapshot at now (e.g. to let expired
// drains go).
func (c *ControlPlane) Publish(now int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.publish(now)
}

// SetSelf replaces the balancer's own addresses and its subnets'
// broadcasts (Local.Self, Local.SubnetBroadcasts: sources no client has,
// FR8) when the interface's addresses change, and publishes; nothing when
// they are the same. It reports whether they changed.
func (c *ControlPlane) SetSelf(self, bcast []netip.Addr, now int64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	l := &c.opts.Local
	if slices.Equal(l.Self, self) && slices.Equal(l.SubnetBroadcasts, bcast) {
		return false
	}
	l.Self, l.SubnetBroadcasts = slices.Clone(self), slices.Clone(bcast)
	c.publish(now)
	return true
}

// SetMTU replaces the interface's MTU and the longest frame a rewrite may
// make (Local.MTU, Local.MaxFrame: what makes an encapsulated packet too
// big, X1) when the interface's MTU changes, and publishes; nothing when
// they are the same. It reports whether they changed.
func (c *ControlPlane) SetMTU(mtu, maxFrame int, now int64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	l := &c.opts.Local
	if l.MTU == mtu && l.MaxFrame == maxFrame {
		return false
	}
	l.MTU, l.MaxFrame = mtu, maxFrame
	c.publish(now)
	return true
}

// Snapshot returns the last published snapshot.
func (c *ControlPlane) Snapshot() *dataplane.Snapshot {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.snap
}

// Config returns the running configuration.
func (c *ControlPlane) Config() *config.Config {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cfg
}

// publish builds the snapshot from the current state and stores it.
func (c *ControlPlane) publish(now int64) {
	c.reap(now)
	c.reapRules(now)
	c.gen++
	s := &dataplane.Snapshot{Gen: c.gen, Local: c.opts.Local}

	s.Backends = make([]*dataplane.Backend, len(c.slots))
	// A service's backends mostly sit in consecutive slots: its state is
	// looked up once per run of them.
	var st *serviceState
	stName := ""
	for slot, b := range c.slots {
		if b == nil {
			continue
		}
		if st == nil || b.service != stName {
			st, stName = c.serviceNamed(b.service), b.service
		}
		db := &dataplane.Backend{
			Ref:            b.ref,
			FleetID:        b.fleetID,
			Name:           b.ep.Name,
			IP:             b.ep.IP,
			Addr:           dataplane.Addr16(b.ep.IP),
			V6:             b.ep.IP.Is6(),
			Group:          b.group,
			Failover:       b.failover,
			Healthy:        b.healthy,
			ReportedWeight: b.weight,
			WeightState:    b.weightState.String(),
			Removed:        b.removed,
			DrainUntil:     b.drainUntil,
		}
		method := config.ForwardL2DSR
		if st != nil {
			db.Service = st.id
			method = st.cfg.ForwardingMethod
		}
		db.MAC, db.MACKnown = c.resolve(b.ep, method)
		s.Backends[slot] = db
	}

	maxID := 0
	for _, st := range c.services {
		maxID = max(maxID, int(st.id)+1)
	}
	for id := range c.retired {
		maxID = max(maxID, int(id)+1)
	}
	s.Services = make([]*dataplane.Service, maxID)
	for _, name := range c.order {
		st := c.services[name]
		s.Services[st.id] = c.buildService(st, s)
	}
	for id, st := range c.retired {
		// No members, no eligible set: only tracked flows reach it, and
		// QUIC connections by connection ID while their backends drain.
		s.Services[id] = serviceHeader(st)
	}
	c.addQUICRoutes(s)

	byVIP := make(map[netip.Addr]*dataplane.VIPRules, len(c.cfg.Rules))
	vips := make([]netip.Addr, 0, len(c.cfg.Rules))
	vipOf := func(v netip.Addr) *dataplane.VIPRules {
		vr, ok := byVIP[v]
		if !ok {
			vr = &dataplane.VIPRules{VIP: v}
			byVIP[v] = vr
			vips = append(vips, v)
		}
		return vr
	}
	// The ID of each service of the configuration, by index: rules refer
	// to services by index, many rules to one.
	ids := make([]uint16, len(c.cfg.Services))
	for i, cs := range c.cfg.Services {
		ids[i] = c.services[cs.Name].id
	}
	for i := range c.cfg.Rules {
		r := &c.cfg.Rules[i]
		vr := vipOf(r.VIP)
		vr.Rules = append(vr.Rules, dataRule(r, i, ids[r.Service]))
	}
	for _, dr := range c.draining {
		vr := vipOf(dr.rule.VIP)
		vr.Draining = append(vr.Draining, dr.rule)
	}
	// Protocol-specific rules first, L3_DEFAULT last (FR2).
	byPrecedence := func(rs []dataplane.Rule) {
		if len(rs) > 1 {
			slices.SortStableFunc(rs, func(a, b dataplane.Rule) int {
				return cmp.Compare(b2i(a.Protocol == config.RuleL3Default), b2i(b.Protocol == config.RuleL3Default))
			})
		}
	}
	if len(vips) > 0 {
		s.Rules = make([]*dataplane.VIPRules, 0, len(vips))
	}
	for _, v := range vips {
		vr := byVIP[v]
		byPrecedence(vr.Rules)
		byPrecedence(vr.Draining)
		s.Rules = append(s.Rules, vr)
	}
	s.IndexVIPs()
	if c.refsDirty && c.opts.OnRefs != nil {
		c.opts.OnRefs(c.state())
	}
	c.refsDirty = false
	c.snap = s
	if c.engine != nil {
		c.engine.Store(s)
	}
}

// rule is forwarding rule i of cfg as the data plane sees it; its service
// is one of c.services.
func (c *ControlPlane) rule(cfg *config.Config, i int) dataplane.Rule {
	r := &cfg.Rules[i]
	return dataRule(r, i, c.services[cfg.Services[r.Service].Name].id)
}

// dataRule is rule r, the i-th of its configuration, for the service with
// ID id.
func dataRule(r *config.ForwardingRule, i int, id uint16) dataplane.Rule {
	dr := dataplane.Rule{
		Name: r.Name, Index: i, VIP: r.VIP, Protocol: r.Protocol,
		AllPorts: r.AllPorts, Ports: r.Ports,
		Service: id,
	}
	for _, p := range r.SourceRanges {
		dr.Sources = append(dr.Sources, dataplane.MakePrefix(p))
	}
	return dr
}

// serviceNamed is the current service called name, or else the retired one.
func (c *ControlPlane) serviceNamed(name string) *serviceState {
	if st := c.services[name]; st != nil {
		return st
	}
	for _, st := range c.retired {
		if st.cfg.Name == name {
			return st
		}
	}
	return nil
}

// serviceHeader is a service's configuration as the data plane sees it,
// without members, eligible set or table.
func serviceHeader(st *serviceState) *dataplane.Service {
	cfg := &st.cfg
	return &dataplane.Service{
		ID:                     st.id,
		Name:                   cfg.Name,
		Affinity:               cfg.Affinity,
		Mode:                   cfg.Tracking.Mode,
		Persistence:            cfg.Tracking.Persistence,
		IdleSec:                uint32(cfg.Tracking.IdleTimeout / time.Second),
		Weighted:               cfg.Locality == config.LocalityWeightedMaglev,
		Method:                 cfg.ForwardingMethod,
		GUEPort:                cfg.GUEPort,
		FailoverRatio:          cfg.Failover.Ratio,
		DropTrafficIfUnhealthy: cfg.Failover.DropTrafficIfUnhealthy,
		DisableDrainOnFailover: cfg.Failover.DisableDrainOnFailover,
		DrainingTimeoutMs:      cfg.DrainingTimeout.Milliseconds(),
	}
}

// buildService computes the eligible set, side and Maglev table of a service.
func (c *ControlPlane) buildService(st *serviceState, s *dataplane.Snapshot) *dataplane.Service {
	cfg := &st.cfg
	ds := serviceHeader(st)
	var ms []member
	for _, slot := range st.members {
		b := c.slots[slot]
		if b.removed {
			continue // never selected again (M5)
		}
		ds.Members = append(ds.Members, b.ref)
		if ds.Weighted && (b.weightState == WeightMissing || b.weightState == WeightInvalid) {
			ds.WeightFallback = true
		}
		ms = append(ms, member{ref: b.ref, failover: b.failover, healthy: b.healthy, weight: b.weight})
	}
	if !ds.Weighted || ds.WeightFallback {
		for i := range ms {
			ms[i].weight = 1
		}
	}
	for _, m := range ms {
		if db := s.Backends[m.ref.Slot()]; db != nil {
			db.Weight = m.weight
		}
	}
	ds.FailoverEnabled = failoverEnabled(ms)
	set, side, why := eligibleSet(policy{weighted: ds.Weighted && !ds.WeightFallback, ratio: cfg.Failover.Ratio, drop: cfg.Failover.DropTrafficIfUnhealthy}, ms)
	if len(set) == 0 && st.sideSet {
		// An empty set (drop_traffic_if_unhealthy) has no members to give it
		// a side; keep the last one so M4 sees no switch that did not happen.
		side = st.lastSide
	}
	ds.Side, ds.EligibleWhy = side, why
	if st.sideSet && st.lastSide != side && ds.FailoverEnabled {
		c.log.Info("failover side switched", zap.String("service", cfg.Name),
			zap.Stringer("from", st.lastSide), zap.Stringer("to", side), zap.String("why", why))
		if side == dataplane.SideFailover {
			st.switches[0]++
		} else {
			st.switches[1]++
		}
	}
	st.lastSide, st.sideSet = side, true

	rebuilt := !st.sameTable(cfg.MaglevTableSize, set) || len(set) == 0
	if rebuilt {
		st.eligible, st.table = nil, nil
		if len(set) > 0 {
			bs := make([]maglev.Backend, len(set))
			st.eligible = make([]dataplane.BackendRef, len(set))
			for i, m := range set {
				// The Maglev key is the address: the same on every instance
				// that has the same configuration (S5), whatever the slots.
				bs[i] = maglev.Backend{Key: c.slots[m.ref.Slot()].ep.IP.String(), Weight: m.weight}
				st.eligible[i] = m.ref
			}
			b, _ := c.builder(cfg.MaglevTableSize)
			st.table = make([]uint16, b.Size())
			if err := b.Build(bs, st.table); err != nil {
				c.log.Error("maglev build failed", zap.String("service", cfg.Name), zap.Error(err))
				st.eligible, st.table = nil, nil
			}
		}
		st.tableSize = cfg.MaglevTableSize
		st.tableSet = append(st.tableSet[:0], set...)
	}
	ds.Eligible, ds.Table = st.eligible, st.table
	// Hashing a table costs about its size: once per change, not per
	// status request or metrics scrape.
	if rebuilt || st.fingerprint == "" || st.fpSide != ds.Side {
		st.fingerprint, st.fpSide = s.Fingerprint(ds), ds.Side
	}
	ds.Fingerprint = st.fingerprint
	return ds
}

// sameTable reports whether the last table was built with size from set:
// the same backends (refs), in the same order, with the same weights.
func (st *serviceState) sameTable(size uint32, set []member) bool {
	if st.tableSize != size || len(st.tableSet) != len(set) {
		return false
	}
	for i := range set {
		if set[i].ref != st.tableSet[i].ref || set[i].weight != st.tableSet[i].weight {
			return false
		}
	}
	return true
}

func (c *ControlPlane) resolve(ep config.Endpoint, method config.ForwardingMethod) ([6]byte, bool) {
	if c.opts.Resolve != nil {
		return c.opts.Resolve(ep, method)
	}
	if ep.HasMAC {
		return ep.MAC, true
	}
	return SyntheticMAC(ep.IP), true
}

// SyntheticMAC is a locally administered MAC derived from an address, used
// where no frame leaves the process (sim, explain).
func SyntheticMAC(ip netip.Addr) [6]byte {
	h := fnv.New32a()
	b := ip.As16()
	h.Write(b[:])
	v := h.Sum32()
	return [6]byte{0x02, 0x00, byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

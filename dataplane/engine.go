package dataplane

import (
	"encoding/binary"
	"sync"
	"sync/atomic"

	"xlb/config"
	"xlb/conntrack"
	"xlb/dataplane/packet"
	"xlb/maglev"
	"xlb/quiclb"
)

const (
	tcpSYN = 0x02
	tcpRST = 0x04
)

// Engine is the decision engine shared by all deciders: the current snapshot
// and the conntrack table.
type Engine struct {
	snap atomic.Pointer[Snapshot]
	// ct is replaced only when a fault in a file table's mapping is
	// contained (tablefault.go); deciders load it once per batch.
	ct     atomic.Pointer[conntrack.Table]
	lim    FloodLimits
	faults tableFaults

	// Flow sync (syncring.go): the ring size of deciders made from now
	// on (0: none) and their rings. The lock is taken by NewDecider and
	// SyncRings, never per packet.
	syncMu   sync.Mutex
	syncSize int
	rings    []*SyncRing
}

// FloodLimits bound what new flows may cost the tracking table.
type FloodLimits struct {
	// SYNIdleSec is the idle timeout of a TCP entry on probation (capped
	// by the service's own): one that has seen only a connection's SYN,
	// or only the first packet of a flow the table did not know. A
	// flood's entries go within seconds, while a real handshake completes
	// (or its client retransmits its SYN, at 1 s and 3 s) and a real flow
	// sends its next segment well inside it. The flow's next packet that
	// is not a SYN or a reset gives the entry the service's timeout.
	SYNIdleSec uint32
	// NewPerSec is how many new entries each decider records per second
	// (burst: one second's worth); above it a new flow is still forwarded
	// by Maglev, unrecorded (Stats.NotRecorded). 0: no limit.
	NewPerSec uint32
}

// FloodLimitsOf reads the limits from the [dataplane] section.
func FloodLimitsOf(d *config.Dataplane) FloodLimits {
	return FloodLimits{SYNIdleSec: uint32(d.ConntrackSYNTimeoutSec), NewPerSec: uint32(d.ConntrackNewEntryRate)}
}

// DefaultSYNIdleSec outlives a client's first two SYN retransmits (1 s, 3 s).
const DefaultSYNIdleSec = 5

// NewEngine returns an engine over a conntrack table. It has no snapshot
// until Store is called; until then every frame is passed to the host.
func NewEngine(ct *conntrack.Table) *Engine {
	e := &Engine{lim: FloodLimits{SYNIdleSec: DefaultSYNIdleSec}}
	e.ct.Store(ct)
	return e
}

// SetFloodLimits sets the limits deciders made afterwards use (a zero
// SYNIdleSec keeps the default).
func (e *Engine) SetFloodLimits(l FloodLimits) {
	if l.SYNIdleSec == 0 {
		l.SYNIdleSec = DefaultSYNIdleSec
	}
	e.lim = l
}

// Store publishes a new snapshot; deciders see it from their next batch.
func (e *Engine) Store(s *Snapshot) { e.snap.Store(s) }

// Load returns the current snapshot (nil before the first Store).
func (e *Engine) Load() *Snapshot { return e.snap.Load() }

// Conntrack returns the shared tracking table (a new one once a fault in
// a file table was contained: Decider.Contain).
func (e *Engine) Conntrack() *conntrack.Table { return e.ct.Load() }

// Frame is one frame in a batch: Buf[Off:Off+Len] is the packet, Buf[:Off]
// headroom that encapsulation may use. The engine sets Verdict and Reason and
// may move Off/Len when it encapsulates. VerdictForward means: send
// Data() out. That is the rewritten frame, or, for a packet the
// encapsulation made too big, the ICMP error to its sender that replaces
// it (Reason then ReasonTooBig; the decision itself is a drop).
type Frame struct {
	Buf     []byte
	Off     int
	Len     int
	Verdict Verdict
	Reason  Reason
	// Backend is the chosen backend when Verdict is VerdictForward.
	Backend BackendRef
}

// Data returns the frame's bytes.
func (f *Frame) Data() []byte { return f.Buf[f.Off : f.Off+f.Len] }

// Decision is everything the engine decided about one frame: what sim
// prints and what explain shows. Deciders keep one and overwrite it.
type Decision struct {
	Verdict Verdict
	Reason  Reason
	Track   Track
	Side    Side

	Rule    *Rule
	Service *Service
	Backend *Backend

	// ICMPSteered: an ICMP error steered by its quoted flow (X1).
	ICMPSteered bool
	// TooBigSent: the packet was dropped as too big (ReasonTooBig) and
	// its frame now carries the ICMP error that tells the sender the MTU
	// left after encapsulation (X1).
	TooBigSent bool
	// Flow is the flow the decision was made for (the reversed quoted flow
	// for X1).
	Flow Flow

	// SelKind is the selection key's form (§2); SelHash its hash, computed
	// only when a backend is selected or an encapsulation needs entropy
	// (a conntrack hit needs neither), and always by Decide.
	SelKind   conntrack.Kind
	SelHash   uint64
	TableSlot uint32
	selHashed bool

	Trackable bool
	TrackKey  conntrack.Key
	// Invalid says why an existing entry was replaced: "unhealthy" (M3),
	// "failover" (M4) or "removed" (M5).
	Invalid string
	// Evicted: recording the entry displaced another live entry (X3).
	Evicted bool
	// Draining: Rule is a removed rule still draining (M5): only a live
	// tracking entry forwards.
	Draining bool
	// NotRecorded: a new flow over FloodLimits.NewPerSec, forwarded
	// without an entry.
	NotRecorded bool
	// Refused: the new flow's entry, on probation, was not stored: both
	// its buckets held only established entries (X3). It was forwarded.
	Refused bool
	// CID is what routing by QUIC connection ID read of the packet
	// (Outcome CIDNone when the service has no QUIC-LB).
	CID CIDRoute

	pending bool // front passed the frame on to steps 1–2
}

// Flow is the part of a packet the rules look at.
type Flow struct {
	Src, Dst   [16]byte
	SrcPort    uint16
	DstPort    uint16
	Proto      packet.Proto
	HasDstPort bool // a destination port is present (FR3)
	PortInfo   bool // "has port information" (SPEC §0)
	Fragmented bool
	SYN        bool
	RST        bool // a TCP reset: it never makes a half-open entry established
	V6         bool
}

// batchMax is the most frames a decider decides in one pass; Process splits
// larger batches.
const batchMax = 64

// Decider decides frames with an engine: the per-thread state (parses,
// decisions, counters) that the shared Engine does not hold. Not safe for
// concurrent use; each polling worker (goroutine) owns one, as do sim and
// explain.
type Decider struct {
	e     *Engine
	stats *Stats

	// Per-frame state of the batch being decided.
	ps    [batchMax]packet.Parsed
	ds    [batchMax]Decision
	hints [batchMax]conntrack.Hint
	one   [1]Frame
	sink  uint64      // keeps prefetch loads alive
	ipid  uint16      // outer IPv4 identification of encapsulated frames and ICMP errors
	icmp  tokenBucket // ICMP errors sent (icmpRate)
	lim   FloodLimits
	rec   tokenBucket // new entries recorded (FloodLimits.NewPerSec)

	ct *conntrack.Table // the engine's table, loaded once per batch

	// ring takes the flows that become established and this instance's
	// own ([flow_sync]); nil without flow sync.
	ring *SyncRing

	quic quiclb.Scratch // AES work of connection ID decoding
}

// NewDecider returns a decider of e.
func (e *Engine) NewDecider() *Decider {
	return &Decider{e: e, stats: newStats(), lim: e.lim, ring: e.newSyncRing()}
}

// tokenBucket is a token bucket on the decider's clock (ms) that starts
// full. It keeps thousandths of a token, so that a millisecond at a rate
// below 1000/s still adds some. No lock: one decider owns it.
type tokenBucket struct {
	milli   int64 // tokens * 1000
	last    int64 // ms
	started bool
}

// allow takes a token at now, refilling at rate per second up to burst.
func (b *tokenBucket) allow(rate, burst, now int64) bool {
	if !b.started {
		b.milli, b.last, b.started = burst*1000, now, true
	}
	if el := now - b.last; el > 0 {
		b.milli = min(burst*1000, b.milli+el*rate)
		b.last = now
	}
	if b.milli < 1000 {
		return false
	}
	b.milli -= 1000
	return true
}

// Stats returns the decider's counters (safe to read from other goroutines).
func (dc *Decider) Stats() *Stats { return dc.stats }

// Process decides a batch: one snapshot load for the whole batch, then
// every frame gets its verdict and, when forwarded, its rewrite.
func (dc *Decider) Process(frames []Frame, now int64) {
	snap := dc.e.snap.Load()
	dc.ct = dc.e.ct.Load()
	dc.stats.ensure(snap)
	for len(frames) > 0 {
		n := min(len(frames), batchMax)
		dc.decideBatch(frames[:n], snap, now)
		frames = frames[n:]
	}
	dc.stats.flush()
	if dc.ring != nil {
		dc.ring.publish()
	}
}

// Decide decides a single frame and returns the full decision (sim,
// explain, tests), through the same path as Process.
func (dc *Decider) Decide(f *Frame, now int64) Decision {
	snap := dc.e.snap.Load()
	dc.ct = dc.e.ct.Load()
	dc.stats.ensure(snap)
	dc.one[0] = *f
	dc.decideBatch(dc.one[:], snap, now)
	*f = dc.one[0]
	dc.stats.flush()
	if dc.ring != nil {
		dc.ring.publish()
	}
	if d := &dc.ds[0]; d.pending {
		d.selectionHash() // sim and explain show it for every decision
	}
	return dc.ds[0]
}

// Parsed returns the parse of the last frame Decide decided.
func (dc *Decider) Parsed() *packet.Parsed { return &dc.ps[0] }

// decideBatch decides up to batchMax frames in three passes. The tracking
// table is far larger than any cache, so a lookup is a memory miss; doing
// every frame's front half first and then touching all their buckets in a
// tight loop lets the CPU overlap those misses (one latency per batch, not
// one per packet). The rules themselves are applied per frame, in order.
func (dc *Decider) decideBatch(frames []Frame, snap *Snapshot, now int64) {
	ct := dc.ct
	n := len(frames)
	for i := range n {
		d := &dc.ds[i]
		*d = Decision{}
		if dc.front(&frames[i], snap, &dc.ps[i], d, now) && d.Trackable {
			dc.hints[i] = ct.Hint(&d.TrackKey)
		}
	}
	sink := dc.sink
	for i := range n {
		if d := &dc.ds[i]; d.pending && d.Trackable {
			sink += ct.Prefetch(dc.hints[i])
			if d.Flow.SYN {
				sink += ct.PrefetchInsert(dc.hints[i])
			}
		}
	}
	for i := range n {
		if d := &dc.ds[i]; d.pending && d.Trackable {
			sink += ct.PrefetchSlot(&d.TrackKey, dc.hints[i])
		}
	}
	dc.sink = sink
	for i := range n {
		f, d, p := &frames[i], &dc.ds[i], &dc.ps[i]
		if d.pending {
			dc.back(snap, now, d, dc.hints[i])
		}
		if d.Verdict == VerdictForward {
			dc.rewrite(f, snap, p, d, now)
		}
		f.Verdict, f.Reason = d.Verdict, d.Reason
		if d.TooBigSent {
			f.Verdict = VerdictForward
		}
		if d.Backend != nil {
			f.Backend = d.Backend.Ref
		}
		dc.stats.count(d, f.Len)
	}
}

// front applies SPEC §1–§3 to the frame: parse, VIP, rule, source ranges,
// selection and tracking keys. It returns true (and sets d.pending) when the
// frame goes on to steps 1–2; otherwise d holds the final verdict.
func (dc *Decider) front(f *Frame, snap *Snapshot, p *packet.Parsed, d *Decision, now int64) bool {
	if snap == nil {
		d.Verdict = VerdictPass
		return false
	}
	if err := packet.Parse(f.Data(), p); err != nil {
		// Malformed VIP traffic is ours to count and drop; anything else
		// (or a frame too broken to tell) stays with the kernel.
		if p.DstValid && lookupVIP(snap, &p.Dst, p.IPVersion) != nil {
			d.Verdict, d.Reason = VerdictDrop, ReasonMalformed
			return false
		}
		d.Verdict = VerdictPass
		return false
	}
	vr := lookupVIP(snap, &p.Dst, p.IPVersion)
	if vr == nil { // FR1
		d.Verdict = VerdictPass
		return false
	}
	fl := &d.Flow
	if isNDP(p) {
		// Neighbour discovery for a VIP is the host's business.
		d.Verdict = VerdictPass
		return false
	}
	if foreignMAC(f.Data(), &snap.Local.MAC) { // FR9
		d.Verdict, d.Reason = VerdictDrop, ReasonNotOurMAC
		return false
	}
	why, src := checkSource(snap, &p.Src, p.IPVersion == 4)
	if why != ReasonNone { // FR8
		d.Verdict, d.Reason = VerdictDrop, why
		return false
	}
	if p.HasInner && (p.Proto == packet.ProtoICMP || p.Proto == packet.ProtoICMPv6) {
		// X1: steer an ICMP error by the flow it quotes, reversed.
		in := &p.Inner
		fl.Src, fl.Dst = in.Dst, in.Src
		fl.SrcPort, fl.DstPort = in.DstPort, in.SrcPort
		fl.Proto = in.Proto
		fl.HasDstPort = in.HasPorts
		fl.PortInfo = in.HasPorts
		fl.V6 = in.IPVersion == 6
		d.ICMPSteered = true
		if rv := lookupVIP(snap, &fl.Dst, in.IPVersion); rv != nil {
			vr = rv
		}
	} else {
		copyAddr(&fl.Src, &p.Src)
		copyAddr(&fl.Dst, &p.Dst)
		fl.Proto = p.Proto
		fl.V6 = p.IPVersion == 6
		fl.Fragmented = p.Frag != packet.FragNone
		if p.HasPorts {
			fl.SrcPort, fl.DstPort = p.SrcPort, p.DstPort
			fl.HasDstPort = true
			fl.PortInfo = !fl.Fragmented
		}
		fl.SYN = p.Proto == packet.ProtoTCP && p.TCPFlags&tcpSYN != 0 && p.Frag != packet.FragLater
		fl.RST = p.Proto == packet.ProtoTCP && p.TCPFlags&tcpRST != 0 && p.Frag != packet.FragLater
	}

	rule := matchRule(vr.Rules, fl)
	if rule == nil && len(vr.Draining) > 0 {
		// A removed rule still draining takes what no current rule does.
		if r := matchRule(vr.Draining, fl); r != nil && now < r.DrainUntil {
			rule, d.Draining = r, true
		}
	}
	if rule == nil { // FR4
		d.Verdict, d.Reason = VerdictDrop, ReasonNoRule
		return false
	}
	d.Rule = rule
	svc := snap.Service(rule.Service)
	if svc == nil {
		d.Verdict, d.Reason = VerdictDrop, ReasonNoRule
		return false
	}
	d.Service = svc
	if sourceIsBackend(src, svc.ID) { // FR8
		d.Verdict, d.Reason = VerdictDrop, ReasonSourceIsBackend
		return false
	}
	if len(rule.Sources) > 0 && !sourceAllowed(rule, &fl.Src) { // FR6
		d.Verdict, d.Reason = VerdictDrop, ReasonSourceNotAllowed
		return false
	}

	if q := svc.QUIC; q != nil && fl.Proto == packet.ProtoUDP && fl.PortInfo && !d.ICMPSteered {
		dc.readCID(f.Data(), p, snap, q, d)
	}
	selectionKey(svc, fl, d)
	trackingKey(svc, fl, d)
	d.pending = true
	return true
}

// back applies steps 1 and 2 (§4–§6) to a frame front passed on: lookup
// and validity, selection, recording. h is the tracking key's hint when
// d.Trackable.
func (dc *Decider) back(snap *Snapshot, now int64, d *Decision, h conntrack.Hint) {
	if d.CID.Outcome == CIDRouted && dc.routeByCID(d, now) {
		// The server that issued the connection ID has the connection,
		// whatever the client's address and port are now.
		return
	}
	ct := dc.ct
	svc, fl := d.Service, &d.Flow
	switch {
	case !d.Trackable: // CT3
		d.Track = TrackUntracked
	case fl.SYN && !d.ICMPSteered && (svc.Mode == config.PerConnection ||
		svc.Affinity == config.AffinityNone || svc.Affinity == config.AffinityClientIPPortProto):
		d.Track = TrackNew // CT1, CT2
	default: // CT2 (session SYN), CT4
		e, ok := ct.LookupHint(&d.TrackKey, h, now)
		if !ok {
			d.Track = TrackNew
			break
		}
		b := snap.Backend(BackendRef(e.Backend))
		if d.Invalid = unavailable(svc, b, Side(e.Side), fl.Proto, now); d.Invalid == "" {
			switch {
			case d.ICMPSteered:
			case !fl.RST && (e.HalfOpen || e.Peer) && !(fl.SYN && e.HalfOpen):
				// A second packet confirms a flow on probation: the
				// handshake went on, or a flow that began elsewhere (another
				// instance, before a restart) goes on. It gets the service's
				// timeout and counts as established (a SYN or a reset, a
				// spoofed source's answer to a SYN-ACK, does not confirm).
				// A packet of a peer's entry (Peer) claims it: the flow
				// moved here. A session SYN (CT2: the only SYN that looks
				// up) claims one too, since the session's new connection is
				// served here now; a reset does not (it may be forged, and
				// its flow is ending). Either way the flow is now
				// established and this instance's: its peers are told.
				ct.UpsertHint(&d.TrackKey, h, conntrack.Value{Backend: e.Backend, Side: e.Side, IdleSec: svc.IdleSec}, now)
				if dc.ring != nil {
					dc.ring.put(&d.TrackKey, e.Backend, e.Side, now)
				}
			default:
				ct.Touch(&e, now)
			}
			d.Track = TrackHit
			d.Backend = b
			d.Side = Side(e.Side)
			d.Verdict = VerdictForward
			return
		}
		d.Track = TrackReplaced
	}
	if d.ICMPSteered {
		// An ICMP error never creates or replaces an entry.
		d.Track = TrackUntracked
	}
	if d.Draining {
		// The rule was removed: nothing new starts on it (M5).
		if d.Track == TrackReplaced {
			ct.Delete(&d.TrackKey)
		}
		d.Track = TrackUntracked
		d.Verdict, d.Reason = VerdictDrop, ReasonVIPDraining
		return
	}

	// Step 2 (§5): select among the eligible set.
	if len(svc.Eligible) == 0 { // S6
		if d.Track == TrackReplaced {
			ct.Delete(&d.TrackKey)
		}
		d.Verdict, d.Reason = VerdictDrop, ReasonNoEligibleBackend
		return
	}
	sel := d.selectionHash()
	d.TableSlot = uint32(sel % uint64(len(svc.Table)))
	ref := svc.Eligible[maglev.Lookup(svc.Table, sel)]
	d.Backend = snap.Backend(ref)
	d.Side = svc.Side
	d.Verdict = VerdictForward

	// R1: record.
	if d.Track == TrackNew || d.Track == TrackReplaced {
		if rate := int64(dc.lim.NewPerSec); d.Track == TrackNew && rate > 0 && !dc.rec.allow(rate, rate, now) {
			d.NotRecorded = true
			return
		}
		v := conntrack.Value{Backend: uint32(ref), Side: uint8(svc.Side), IdleSec: svc.IdleSec}
		// A flow's first packet proves nothing: it may be forged, one of
		// a flood of SYNs or of mid-flow packets from random sources.
		// Its entry starts on probation (evicted first, never evicting an
		// established entry) until a later packet confirms it (the hit
		// above); TCP's for the short SYN timeout. A replaced entry's flow
		// had shown itself already and stays established, unless this is
		// a new connection's SYN.
		tcp := fl.Proto == packet.ProtoTCP
		if d.Track == TrackNew || (fl.SYN && tcp) {
			v.HalfOpen = true
			if tcp {
				v.IdleSec = min(v.IdleSec, dc.lim.SYNIdleSec)
			}
		}
		r := ct.UpsertHint(&d.TrackKey, h, v, now)
		d.Evicted = r == conntrack.Evicted
		d.Refused = r == conntrack.Refused
		if dc.ring != nil && !v.HalfOpen {
			// A replaced entry that stays established: its peers learn
			// the new backend.
			dc.ring.put(&d.TrackKey, v.Backend, v.Side, now)
		}
	}
}

// lookupVIP is Snapshot.LookupVIP for a packet of IP version v: an IPv6
// packet to ::ffff:a.b.c.d has the IPv4 VIP a.b.c.d's 16-byte form but is not
// addressed to it (FR1), and must not reach its rules (nor pass its IPv4
// source_ip_ranges with a mapped source, FR6).
func lookupVIP(snap *Snapshot, dst *[16]byte, v uint8) *VIPRules {
	vr := snap.LookupVIP(dst)
	if vr == nil || vr.VIP.Is4() != (v == 4) {
		return nil
	}
	return vr
}

// isNDP reports router/neighbour solicitation/advertisement and redirect.
func isNDP(p *packet.Parsed) bool {
	return p.Proto == packet.ProtoICMPv6 && p.ICMPType >= 133 && p.ICMPType <= 137
}

// matchRule applies FR2 and FR3: a protocol-specific rule whose ports match
// wins; otherwise the VIP's L3_DEFAULT rule takes TCP, UDP, ESP, GRE, ICMP
// and ICMPv6.
func matchRule(rules []Rule, fl *Flow) *Rule {
	var l3 *Rule
	for i := range rules {
		r := &rules[i]
		switch r.Protocol {
		case config.RuleL3Default:
			l3 = r
		case config.RuleTCP:
			if fl.Proto == packet.ProtoTCP && portsMatch(r, fl) {
				return r
			}
		case config.RuleUDP:
			if fl.Proto == packet.ProtoUDP && portsMatch(r, fl) {
				return r
			}
		}
	}
	if l3 != nil {
		switch fl.Proto {
		case packet.ProtoTCP, packet.ProtoUDP, packet.ProtoESP, packet.ProtoGRE, packet.ProtoICMP, packet.ProtoICMPv6:
			return l3
		}
	}
	return nil
}

// portsMatch is FR3: a packet without a destination port matches only an
// all-ports rule; a first fragment matches on its ports.
func portsMatch(r *Rule, fl *Flow) bool {
	if r.AllPorts {
		return true
	}
	if !fl.HasDstPort {
		return false
	}
	for _, pr := range r.Ports {
		if pr.Contains(fl.DstPort) {
			return true
		}
	}
	return false
}

func sourceAllowed(r *Rule, src *[16]byte) bool {
	for i := range r.Sources {
		if r.Sources[i].Contains(src) {
			return true
		}
	}
	return false
}

// selectionKey picks the selection key's form (§2, A1); selectionHash
// hashes it when needed.
func selectionKey(svc *Service, fl *Flow, d *Decision) {
	switch svc.Affinity {
	case config.AffinityClientIP:
		d.SelKind = conntrack.Kind2T
	case config.AffinityClientIPProto:
		d.SelKind = conntrack.Kind3T
	default: // NONE, CLIENT_IP_PORT_PROTO
		if fl.PortInfo {
			d.SelKind = conntrack.Kind5T
		} else {
			d.SelKind = conntrack.Kind3T
		}
	}
}

// selectionHash is the selection hash of d's flow in the form SelKind,
// computed once.
func (d *Decision) selectionHash() uint64 {
	if d.selHashed {
		return d.SelHash
	}
	fl := &d.Flow
	switch d.SelKind {
	case conntrack.Kind2T:
		d.SelHash = FlowHash(&fl.Src, &fl.Dst, 0, 0, 0, uint8(conntrack.Kind2T))
	case conntrack.Kind3T:
		d.SelHash = FlowHash(&fl.Src, &fl.Dst, 0, 0, fl.Proto, uint8(conntrack.Kind3T))
	default:
		d.SelHash = FlowHash(&fl.Src, &fl.Dst, fl.SrcPort, fl.DstPort, fl.Proto, uint8(conntrack.Kind5T))
	}
	d.selHashed = true
	return d.SelHash
}

// trackingKey decides T1 (trackable?) and builds the T2 key, scoped by the
// service (T4).
func trackingKey(svc *Service, fl *Flow, d *Decision) {
	switch fl.Proto {
	case packet.ProtoTCP:
		d.Trackable = true
	case packet.ProtoUDP, packet.ProtoESP, packet.ProtoGRE:
		d.Trackable = svc.Affinity != config.AffinityNone
	default:
		d.Trackable = false
	}
	if !d.Trackable {
		return
	}
	kind := conntrack.Kind3T
	if (fl.Proto == packet.ProtoTCP || fl.Proto == packet.ProtoUDP) && !fl.Fragmented && fl.HasDstPort {
		kind = conntrack.Kind5T
	}
	if svc.Mode == config.PerSession {
		switch svc.Affinity {
		case config.AffinityClientIPProto:
			kind = conntrack.Kind3T
		case config.AffinityClientIP:
			kind = conntrack.Kind2T
		}
	}
	k := &d.TrackKey
	copyAddr(&k.Src, &fl.Src)
	copyAddr(&k.Dst, &fl.Dst)
	k.Kind, k.Service = kind, svc.ID
	if kind >= conntrack.Kind3T {
		k.Proto = uint8(fl.Proto)
	}
	if kind == conntrack.Kind5T {
		k.SrcPort, k.DstPort = fl.SrcPort, fl.DstPort
	}
}

// unavailable says why backend b, on side, may no longer take a flow's
// packets of proto ("" when it may): a tracked flow's, or a QUIC
// connection's that its connection ID names.
func unavailable(svc *Service, b *Backend, side Side, proto packet.Proto, now int64) string {
	switch {
	case b == nil || (b.Removed && now >= b.DrainUntil): // M5
		return "removed"
	case !b.Healthy && !persists(svc, proto): // M3, P1
		return "unhealthy"
	case svc.FailoverEnabled && svc.DisableDrainOnFailover && side != svc.Side: // M4
		return "failover"
	}
	return ""
}

// persists is P1: does an entry on an unhealthy backend keep its packets?
func persists(svc *Service, proto packet.Proto) bool {
	switch svc.Persistence {
	case config.PersistNever:
		return false
	case config.PersistAlways: // valid only with PER_CONNECTION
		return proto == packet.ProtoTCP ||
			(svc.Affinity != config.AffinityNone && (proto == packet.ProtoUDP || proto == packet.ProtoESP || proto == packet.ProtoGRE))
	default: // DEFAULT_FOR_PROTOCOL
		if proto != packet.ProtoTCP {
			return false
		}
		if svc.Mode == config.PerConnection {
			return true
		}
		return svc.Affinity == config.AffinityNone || svc.Affinity == config.AffinityClientIPPortProto
	}
}

// rewrite turns a forward decision into the frame that goes on the wire.
func (dc *Decider) rewrite(f *Frame, snap *Snapshot, p *packet.Parsed, d *Decision, now int64) {
	b := d.Backend
	if b == nil || !b.MACKnown {
		d.Verdict, d.Reason = VerdictDrop, ReasonBackendNotReady
		return
	}
	svc := d.Service
	if svc.Method == config.ForwardL2DSR {
		packet.RewriteL2(f.Data(), b.MAC, snap.Local.MAC)
		return
	}
	enc := packet.Encap{
		SrcMAC:   snap.Local.MAC,
		DstMAC:   b.MAC,
		OuterDst: b.Addr,
		OuterV6:  b.V6,
		GUE:      svc.Method == config.ForwardGUE,
		GUEPort:  svc.GUEPort,
		FlowHash: uint32(d.selectionHash()),
		IPID:     dc.ipid,
	}
	dc.ipid++
	switch {
	case b.V6 && snap.Local.HasSrcV6:
		enc.OuterSrc = snap.Local.EncapSrcV6
	case !b.V6 && snap.Local.HasSrcV4:
		enc.OuterSrc = snap.Local.EncapSrcV4
	default:
		d.Verdict, d.Reason = VerdictDrop, ReasonNoEncapSource
		return
	}
	if mtu := snap.Local.MTU; mtu > 0 && p.IPLen+enc.Overhead() > mtu {
		d.Verdict, d.Reason = VerdictDrop, ReasonTooBig
		dc.tooBig(f, snap, p, d, mtu-enc.Overhead(), now)
		return
	}
	maxLen := len(f.Buf) - f.Off
	if snap.Local.MaxFrame > 0 {
		maxLen = snap.Local.MaxFrame
	}
	off, n, err := packet.Encapsulate(f.Buf, f.Off, p, &enc, maxLen)
	if err != nil {
		d.Verdict, d.Reason = VerdictDrop, ReasonTooBig
		return
	}
	f.Off, f.Len = off, n
}

// copyAddr copies an address as two 8-byte words. Parse writes IPv4
// addresses as two words, and conntrack reads keys as words: a 16-byte copy
// in between would load across two recent 8-byte stores, which the CPU
// cannot forward from its store buffer (the load waits for both stores to
// reach the cache), on every packet.
func copyAddr(dst, src *[16]byte) {
	binary.LittleEndian.PutUint64(dst[0:8], binary.LittleEndian.Uint64(src[0:8]))
	binary.LittleEndian.PutUint64(dst[8:16], binary.LittleEndian.Uint64(src[8:16]))
}

// tooBig answers a packet that encapsulation makes longer than the MTU
// with the ICMP error that tells its sender the room left (mtu), when the
// sender may be told (packet.CanSendTooBig) and the decider's rate limit
// allows: its path MTU discovery then shrinks what it sends (X1).
// Otherwise the frame stays a plain drop.
func (dc *Decider) tooBig(f *Frame, snap *Snapshot, p *packet.Parsed, d *Decision, mtu int, now int64) {
	if !packet.CanSendTooBig(p) || !dc.icmp.allow(icmpRate, icmpBurst, now) {
		return
	}
	off, n, err := packet.TooBig(f.Buf, f.Off, p, snap.Local.MAC, mtu, dc.ipid)
	if err != nil {
		return
	}
	dc.ipid++
	f.Off, f.Len = off, n
	d.TooBigSent = true
}

// ICMP errors a decider may send: icmpRate per second, in bursts of up to
// icmpBurst, like the kernel's own limit (net.ipv4.icmp_msgs_per_sec and
// icmp_msgs_burst). A flood of oversized packets must not make the
// balancer a reflector.
const (
	icmpRate  = 1000
	icmpBurst = 50
)

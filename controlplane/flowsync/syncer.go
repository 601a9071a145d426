package flowsync

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"xlb/config"
	"xlb/conntrack"
	"xlb/dataplane"
	"xlb/dataplane/worker"
)

// Timing of the sync goroutine.
const (
	tick = 5 * time.Millisecond
	// heartbeatMs: a peer hears from this instance at least this often,
	// records or not; peerUpMs: a peer heard within it is up.
	heartbeatMs = 1000
	peerUpMs    = 3000
	// logEveryMs spaces the summaries of refused datagrams and send
	// errors: never a line per datagram.
	logEveryMs = 10_000
	// DefaultMaxRecordsPerSec is the rate bound when the configuration
	// gives none.
	DefaultMaxRecordsPerSec = 100_000
	// DefaultPullTimeout bounds Pull when the configuration gives none.
	DefaultPullTimeout = 10 * time.Second
	// ringChunk is how many records one ring gives up in a turn, so that
	// under the rate bound every worker's ring is served.
	ringChunk = 64
)

// reason is why a message or a record was refused.
type reason uint8

const (
	reasonNone reason = iota
	reasonKey
	reasonVersion
	reasonMalformed
	reasonRepeat
	reasonStale
	reasonPeer
	reasonUnknownBackend
	reasonConflict
	reasonExpired
	reasonTableFull
	numReasons
)

var reasonNames = [numReasons]string{"", "key", "version", "malformed", "repeat", "stale", "peer",
	"unknown_backend", "conflict", "expired", "table_full"}

func (r reason) String() string { return reasonNames[r] }

// Options are what New needs.
type Options struct {
	Config *config.FlowSync
	// Engine gives the snapshot (Load), the table (Conntrack) and the
	// deciders' rings (SyncRings, after EnableFlowSync).
	Engine *dataplane.Engine
	// Now is the workers' clock, ms (worker.NowMs when nil): the table's
	// last-use times are on it.
	Now func() int64
	Log *zap.Logger
	// AdoptDraining, when set, is given the backends a pulled peer drains
	// (removed there, M5), before any of its records is merged, so that
	// the records of those this instance's configuration lacks resolve:
	// it must publish the snapshot that has them before it returns (the
	// control plane's AdoptDraining does). nil: they are ignored, and
	// such records refused (unknown_backend).
	AdoptDraining func([]DrainingBackend)
}

// Syncer shares the tracked flows of one instance with its peers
// ([flow_sync]): it sends the flows its workers hand it and refreshes the
// live ones, applies what peers send, and serves and makes table pulls.
type Syncer struct {
	log    *zap.Logger
	eng    engine
	adopt  func([]DrainingBackend)
	now    func() int64 // workers' clock, ms
	wall   func() int64 // unix ms
	id     uint64       // sender ID
	listen netip.AddrPort
	udp    *net.UDPConn
	tcp    *net.TCPListener
	seq    atomic.Uint64 // last sequence number used, UDP and pulls alike

	state atomic.Pointer[state]
	fleet atomic.Pointer[fleetMap]
	m     metrics

	// The sync goroutine's own.
	enc      *encoder
	ringBuf  []dataplane.SyncRecord
	ringList []ring
	tokens   float64
	filled   int64 // when tokens were last refilled (Now)
	lastSent int64 // wall clock of the last datagram sent
	ref      refresher
	cur      struct { // what refreshEntry needs, set per walk
		st   *state
		snap *dataplane.Snapshot
		now  int64
		wall int64
	}
	refreshFn func(conntrack.Key, conntrack.Entry) bool
	logged    [numReasons]uint64
	loggedErr uint64
	nextLog   int64

	// The receive goroutine's own.
	recs    []Record
	senders senders
	rsc     scratch

	pulls     chan struct{} // a token per concurrent pull served
	closeOnce sync.Once
}

// state is what Reconfigure swaps.
type state struct {
	keys   *keyring
	peers  []*peer
	byAddr map[netip.AddrPort]*peer
	rate   int
	pullTO time.Duration
}

// peer is one configured peer and what was heard from it.
type peer struct {
	addr  netip.AddrPort
	heard atomic.Int64 // wall clock, ms; 0: never
	lagMs atomic.Int64
	in    atomic.Uint64
	out   atomic.Uint64
	wasUp bool // the sync goroutine's, for logging changes
}

func (p *peer) up(wall int64) bool {
	h := p.heard.Load()
	return h != 0 && wall-h < peerUpMs
}

// lookup is the peer a datagram from a comes from, or nil.
func (st *state) lookup(a netip.AddrPort) *peer {
	return st.byAddr[netip.AddrPortFrom(a.Addr().Unmap(), a.Port())]
}

// hasIP reports whether a peer has address ip (a TCP puller's port is
// its own).
func (st *state) hasIP(ip netip.Addr) bool {
	ip = ip.Unmap()
	for _, p := range st.peers {
		if p.addr.Addr() == ip {
			return true
		}
	}
	return false
}

// New binds UDP and TCP on c.Listen (the same port for both; with port 0,
// one the system picks).
func New(o Options) (*Syncer, error) {
	if o.Engine == nil {
		return nil, errors.New("flowsync: no engine")
	}
	return newSyncer(o, realEngine{o.Engine})
}

func newSyncer(o Options, eng engine) (*Syncer, error) {
	if o.Config == nil {
		return nil, errors.New("flowsync: no [flow_sync] configuration")
	}
	var b [8]byte
	for binary.BigEndian.Uint64(b[:]) == 0 {
		rand.Read(b[:])
	}
	s := &Syncer{
		log:     o.Log,
		eng:     eng,
		adopt:   o.AdoptDraining,
		now:     o.Now,
		wall:    func() int64 { return time.Now().UnixMilli() },
		id:      binary.BigEndian.Uint64(b[:]),
		enc:     newEncoder(maxPayload),
		ringBuf: make([]dataplane.SyncRecord, ringChunk),
		recs:    make([]Record, 0, maxRecordsPerDatagram),
		pulls:   make(chan struct{}, maxConcurrentPulls),
	}
	if s.log == nil {
		s.log = zap.NewNop()
	}
	if s.now == nil {
		s.now = worker.NowMs
	}
	s.refreshFn = s.refreshEntry
	s.m.init()
	st, err := s.makeState(o.Config, nil)
	if err != nil {
		return nil, err
	}
	if err := s.bind(o.Config.Listen); err != nil {
		return nil, err
	}
	s.state.Store(st)
	s.filled = s.now()
	s.tokens = float64(burst(st.rate))
	return s, nil
}

// bind opens the UDP socket and the TCP listener on one port.
func (s *Syncer) bind(l netip.AddrPort) error {
	for try := 0; ; try++ {
		u, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(l))
		if err != nil {
			return fmt.Errorf("flowsync: listen udp %s: %w", l, err)
		}
		ua := u.LocalAddr().(*net.UDPAddr).AddrPort()
		t, err := net.ListenTCP("tcp", net.TCPAddrFromAddrPort(netip.AddrPortFrom(l.Addr(), ua.Port())))
		if err != nil {
			u.Close()
			if l.Port() == 0 && try < 10 { // the port the system chose for UDP is taken for TCP
				continue
			}
			return fmt.Errorf("flowsync: listen tcp %s: %w", l, err)
		}
		s.udp, s.tcp = u, t
		s.listen = netip.AddrPortFrom(ua.Addr().Unmap(), ua.Port())
		return nil
	}
}

// makeState checks and prepares a configuration.
func (s *Syncer) makeState(c *config.FlowSync, old *state) (*state, error) {
	kr, err := newKeyring(c.Keys, s.id)
	if err != nil {
		return nil, err
	}
	st := &state{keys: kr, byAddr: map[netip.AddrPort]*peer{}, rate: c.MaxRecordsPerSec, pullTO: c.PullTimeout}
	if st.rate <= 0 {
		st.rate = DefaultMaxRecordsPerSec
	}
	if st.pullTO <= 0 {
		st.pullTO = DefaultPullTimeout
	}
	if old != nil {
		kr.carryCache(old.keys)
	}
	for _, a := range c.Peers {
		a = netip.AddrPortFrom(a.Addr().Unmap(), a.Port())
		if a == s.listen || st.byAddr[a] != nil {
			continue
		}
		var p *peer
		if old != nil {
			p = old.byAddr[a]
		}
		if p == nil {
			p = &peer{addr: a}
		}
		st.peers = append(st.peers, p)
		st.byAddr[a] = p
	}
	return st, nil
}

// Reconfigure applies a reload's peers, keys and rate bound (Listen needs
// a restart). Safe from any goroutine. A configuration it cannot use (no
// key) is logged and the running one kept.
func (s *Syncer) Reconfigure(c *config.FlowSync) {
	st, err := s.makeState(c, s.state.Load())
	if err != nil {
		s.log.Error("flow sync: reload ignored", zap.Error(err))
		return
	}
	s.state.Store(st)
}

// addr is where the Syncer listens (UDP and TCP).
func (s *Syncer) addr() netip.AddrPort { return s.listen }

// Close closes the sockets (Run does when its context ends); for a Syncer
// that never runs.
func (s *Syncer) Close() {
	s.closeOnce.Do(func() {
		s.udp.Close()
		s.tcp.Close()
	})
}

// Run sends, refreshes, receives and serves pulls until ctx ends, then
// closes the sockets. Call it once.
func (s *Syncer) Run(ctx context.Context) {
	var wg sync.WaitGroup
	wg.Go(s.receiveLoop)
	wg.Go(func() { s.serveLoop(ctx) })
	t := time.NewTicker(tick)
	for done := false; !done; {
		select {
		case <-ctx.Done():
			done = true
		case <-t.C:
			s.sendTick()
		}
	}
	t.Stop()
	s.Close()
	wg.Wait()
}

// burst is the token bucket's depth: a tenth of a second of records.
func burst(rate int) int { return max(rate/10, maxRecordsPerDatagram) }

// sendTick is one turn of the sync goroutine: ring records first, then
// the refresh walk with the tokens left, then a heartbeat if due.
func (s *Syncer) sendTick() {
	st := s.state.Load()
	now, wall := s.now(), s.wall()
	if el := now - s.filled; el > 0 {
		s.tokens = min(s.tokens+float64(st.rate)*float64(el)/1000, float64(burst(st.rate)))
		s.filled = now
	}
	snap := s.eng.Load()
	s.ringList = s.eng.rings(s.ringList)
	if snap == nil || len(st.peers) == 0 {
		// Nobody to tell: the records would only fill the rings.
		for _, rg := range s.ringList {
			for rg.Pop(s.ringBuf) > 0 {
			}
		}
	} else {
		s.sendRings(st, snap, now, wall)
		s.refreshStep(st, snap, now, wall)
		s.flush(st, wall)
	}
	if len(st.peers) > 0 && wall-s.lastSent >= heartbeatMs {
		s.flushHeartbeat(st, wall) // with no snapshot yet too: "up" means alive
	}
	s.housekeeping(st, wall)
}

// sendRings sends what the rings hold, a chunk per ring in turn, within
// the tokens; the rest waits in the rings.
func (s *Syncer) sendRings(st *state, snap *dataplane.Snapshot, now, wall int64) {
	for more := true; more && s.tokens >= 1; {
		more = false
		for _, rg := range s.ringList {
			n := int(min(s.tokens, ringChunk))
			if n == 0 {
				break
			}
			n = rg.Pop(s.ringBuf[:n])
			if n == len(s.ringBuf) {
				more = true
			}
			s.tokens -= float64(n)
			for i := range n {
				rec := &s.ringBuf[i]
				b := snap.Backend(rec.Backend)
				if b == nil {
					s.m.unresolved.Add(1)
					continue
				}
				r := Record{Key: rec.Key, FleetID: b.FleetID, Side: uint8(rec.Side), AgeMs: ageMs(now - rec.Now)}
				s.emit(st, &r, wall)
				s.m.sentRing.Add(1)
			}
		}
	}
}

func ageMs(d int64) uint32 { return uint32(min(max(d, 0), math.MaxUint32)) }

// emit adds r to the datagram being built, sending it first when full.
func (s *Syncer) emit(st *state, r *Record, wall int64) {
	if !s.enc.add(r) {
		s.flush(st, wall)
		s.enc.add(r)
	}
}

// flush seals the records gathered and sends the datagram to every peer.
func (s *Syncer) flush(st *state, wall int64) {
	if s.enc.count == 0 {
		return
	}
	s.send(st, wall)
}

func (s *Syncer) flushHeartbeat(st *state, wall int64) { s.send(st, wall) }

func (s *Syncer) send(st *state, wall int64) {
	h := header{kind: kindRecords, keyID: st.keys.sealID(), sender: s.id, seq: s.seq.Add(1), wall: wall}
	pkt := s.enc.seal(st.keys.seal, &h, nil)
	n := uint64(s.enc.count)
	for _, p := range st.peers {
		if _, err := s.udp.WriteToUDPAddrPort(pkt, p.addr); err != nil {
			s.m.sendErrors.Add(1)
			continue
		}
		p.out.Add(n)
		s.m.bytesSent.Add(uint64(len(pkt)))
		s.m.datagramsSent.Add(1)
	}
	s.enc.reset()
	s.lastSent = wall
}

// refresher is the walk that sends live flows again (doc.go).
type refresher struct {
	active  bool
	started bool  // a pass ran before
	cursor  int   // next bucket
	start   int64 // when the current pass started (Now)
	since   int64 // when the previous one did: entries used later are sent
	next    int64 // when the next pass may start
	period  int64 // ms
}

// refreshPeriod is the time a pass takes: a third of the shortest idle
// timeout, so that an active flow is refreshed at least twice before a
// peer's copy could expire; within [1 s, 60 s].
func refreshPeriod(snap *dataplane.Snapshot) int64 {
	p := int64(60_000)
	for _, svc := range snap.Services {
		if svc != nil && svc.IdleSec > 0 {
			p = min(p, int64(svc.IdleSec)*1000/3)
		}
	}
	return max(p, 1000)
}

// refreshStep walks the part of the table the pass should have reached by
// now, within the tokens the rings left.
func (s *Syncer) refreshStep(st *state, snap *dataplane.Snapshot, now, wall int64) {
	r := &s.ref
	if !r.active {
		if r.started && now < r.next {
			return
		}
		r.since = math.MinInt64
		if r.started {
			r.since = r.start
		}
		r.active, r.started, r.cursor, r.start = true, true, 0, now
		r.period = refreshPeriod(snap)
		s.m.periodMs.Store(r.period)
	}
	tbl := s.eng.table()
	nb := tbl.Buckets()
	target := nb
	if el := now - r.start; el < r.period {
		target = min(nb, int(int64(nb)*el/r.period)+1)
	}
	per := max(1, tbl.Capacity()/max(nb, 1))
	s.cur.st, s.cur.snap, s.cur.now, s.cur.wall = st, snap, now, wall
	for r.cursor < target && s.tokens >= 1 {
		to := min(target, r.cursor+max(1, int(s.tokens)/per))
		tbl.RangeBuckets(r.cursor, to, now, s.refreshFn)
		r.cursor = to
	}
	s.cur.st, s.cur.snap = nil, nil
	if r.cursor >= nb {
		took := now - r.start
		s.m.passMs.Store(took)
		if took > r.period {
			s.m.passBehind.Add(1)
		}
		r.active = false
		r.next = r.start + r.period
	}
}

// refreshEntry sends one entry of the walk if it is live, established,
// this instance's own, and used since the previous pass started.
func (s *Syncer) refreshEntry(k conntrack.Key, e conntrack.Entry) bool {
	if e.HalfOpen || e.Peer || e.LastUse <= s.ref.since {
		return true
	}
	b := s.cur.snap.Backend(dataplane.BackendRef(e.Backend))
	if b == nil {
		s.m.unresolved.Add(1)
		return true
	}
	r := Record{Key: k, FleetID: b.FleetID, Side: e.Side, AgeMs: ageMs(s.cur.now - e.LastUse)}
	s.emit(s.cur.st, &r, s.cur.wall)
	s.tokens--
	s.m.sentRefresh.Add(1)
	return true
}

// housekeeping logs what changed: peers up or down, and a summary of the
// refused datagrams and send errors at most every logEveryMs.
func (s *Syncer) housekeeping(st *state, wall int64) {
	for _, p := range st.peers {
		if up := p.up(wall); up != p.wasUp {
			p.wasUp = up
			if up {
				s.log.Info("flow sync: peer up", zap.Stringer("peer", p.addr))
			} else {
				s.log.Warn("flow sync: peer down (not heard for 3 s)", zap.Stringer("peer", p.addr))
			}
		}
	}
	if wall < s.nextLog {
		return
	}
	s.nextLog = wall + logEveryMs
	var fields []zap.Field
	for r := reasonKey; r < numReasons; r++ {
		n := s.m.refused[r].Load()
		if d := n - s.logged[r]; d > 0 {
			fields = append(fields, zap.Uint64(r.String(), d))
		}
		s.logged[r] = n
	}
	if len(fields) > 0 {
		s.log.Warn("flow sync: refused in the last 10 s", fields...)
	}
	if n := s.m.sendErrors.Load(); n != s.loggedErr {
		s.log.Warn("flow sync: datagrams not sent in the last 10 s", zap.Uint64("count", n-s.loggedErr))
		s.loggedErr = n
	}
}

// receiveLoop reads datagrams until the socket is closed.
func (s *Syncer) receiveLoop() {
	buf := make([]byte, 64<<10)
	for {
		n, from, err := s.udp.ReadFromUDPAddrPort(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		s.m.bytesRecv.Add(uint64(n))
		s.receive(buf[:n], from)
	}
}

// receive checks one datagram (source, authenticity, replay) and applies
// its records; the reason it was refused (counted), or reasonNone.
func (s *Syncer) receive(msg []byte, from netip.AddrPort) reason {
	r := s.accept(msg, from)
	if r != reasonNone {
		s.m.refused[r].Add(1)
	}
	return r
}

func (s *Syncer) accept(msg []byte, from netip.AddrPort) reason {
	st := s.state.Load()
	p := st.lookup(from)
	if p == nil {
		return reasonPeer
	}
	if len(msg) > maxPayload {
		return reasonMalformed
	}
	h, r := parseHeader(msg)
	if r != reasonNone {
		return r
	}
	if h.kind != kindRecords {
		return reasonMalformed
	}
	if h.sender == s.id {
		return reasonNone // our own, looped back: nothing to learn
	}
	body, ok := st.keys.open(&s.rsc, &h, msg, nil)
	if !ok {
		return reasonKey
	}
	recs, ok := decodeRecords(body, s.recs)
	if !ok {
		return reasonMalformed
	}
	wall := s.wall()
	if r := s.senders.check(h.sender, h.seq, h.wall, wall); r != reasonNone {
		return r
	}
	lag := max(wall-h.wall, 0)
	s.m.lag.Observe(float64(lag) / 1000)
	p.heard.Store(wall)
	p.lagMs.Store(lag)
	p.in.Add(uint64(len(recs)))
	s.m.datagramsRecv.Add(1)
	s.m.received.Add(uint64(len(recs)))
	s.apply(recs, s.now())
	return reasonNone
}

// fleetMap translates fleet IDs to local references, for one snapshot.
type fleetMap struct {
	snap *dataplane.Snapshot
	m    map[uint64]target
}

type target struct {
	ref     dataplane.BackendRef
	service uint16
	idle    uint32
	removed bool
}

// fleetFor is the map of snap, rebuilt when the snapshot changed.
func (s *Syncer) fleetFor(snap *dataplane.Snapshot) *fleetMap {
	if fm := s.fleet.Load(); fm != nil && fm.snap == snap {
		return fm
	}
	fm := &fleetMap{snap: snap, m: map[uint64]target{}}
	if snap != nil {
		for _, b := range snap.Backends {
			if b == nil {
				continue
			}
			svc := snap.Service(b.Service)
			if svc == nil {
				continue
			}
			// A backend removed and added again may hold two slots; the
			// current one wins.
			if t, ok := fm.m[b.FleetID]; ok && !t.removed {
				continue
			}
			fm.m[b.FleetID] = target{ref: b.Ref, service: b.Service, idle: svc.IdleSec, removed: b.Removed}
		}
	}
	s.fleet.Store(fm)
	return fm
}

// apply merges records into the table (setting their keys' service).
func (s *Syncer) apply(recs []Record, now int64) (stored int) {
	fm := s.fleetFor(s.eng.Load())
	tbl := s.eng.table()
	for i := range recs {
		r := &recs[i]
		t, ok := fm.m[r.FleetID]
		if !ok {
			s.m.refused[reasonUnknownBackend].Add(1)
			continue
		}
		// In place: a local key's address would escape (an interface
		// call) and cost an allocation per record.
		r.Key.Service = t.service
		v := conntrack.Value{Backend: uint32(t.ref), Side: r.Side, IdleSec: t.idle, Peer: true}
		switch tbl.Merge(&r.Key, v, now-int64(r.AgeMs), now) {
		case conntrack.MergeStored:
			s.m.stored.Add(1)
			stored++
		case conntrack.MergeRefreshed:
			s.m.refreshed.Add(1)
		case conntrack.MergeConflict:
			s.m.refused[reasonConflict].Add(1)
		case conntrack.MergeExpired:
			s.m.refused[reasonExpired].Add(1)
		case conntrack.MergeRefused:
			s.m.refused[reasonTableFull].Add(1)
		}
	}
	return stored
}

// Status is the Syncer's state for /status and `xlb status`.
type Status struct {
	Listen netip.AddrPort `json:"listen"`
	// SenderID is this process's sender ID (hex), KeyIDs the IDs of the
	// keys it holds (hex; the first seals).
	SenderID string       `json:"sender_id"`
	KeyIDs   []string     `json:"key_ids"`
	Peers    []PeerStatus `json:"peers"`
}

// PeerStatus is one configured peer.
type PeerStatus struct {
	Address netip.AddrPort `json:"address"`
	// Up: heard within 3 s. LastHeard is the unix ms of the last datagram
	// that authenticated (0: never), LagMs that datagram's lag.
	Up        bool  `json:"up"`
	LastHeard int64 `json:"last_heard_unix_ms"`
	LagMs     int64 `json:"lag_ms"`
	// RecordsIn were received from the peer, RecordsOut sent to it.
	RecordsIn  uint64 `json:"records_in"`
	RecordsOut uint64 `json:"records_out"`
}

// Status reports the peers in configuration order.
func (s *Syncer) Status() Status {
	st := s.state.Load()
	out := Status{Listen: s.listen, SenderID: fmt.Sprintf("%016x", s.id)}
	for _, id := range st.keys.ids {
		out.KeyIDs = append(out.KeyIDs, fmt.Sprintf("%x", id))
	}
	wall := s.wall()
	for _, p := range st.peers {
		out.Peers = append(out.Peers, PeerStatus{Address: p.addr, Up: p.up(wall), LastHeard: p.heard.Load(),
			LagMs: p.lagMs.Load(), RecordsIn: p.in.Load(), RecordsOut: p.out.Load()})
	}
	return out
}

package bgp

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	api "github.com/osrg/gobgp/v3/api"
	"github.com/osrg/gobgp/v3/pkg/server"
	"go.uber.org/zap"
)

// Config is what a restart alone can change: the speaker's identity.
type Config struct {
	ASN uint32
	// RouterID is the BGP identifier, an IPv4 address.
	RouterID netip.Addr
	// ConnectRetry is how long GoBGP waits before dialing again a neighbor
	// that refused or did not answer the TCP connection (it waits between
	// once and twice this, jittered); 0 means DefaultConnectRetry.
	ConnectRetry time.Duration
}

// DefaultConnectRetry replaces GoBGP's default of 120 s: an instance whose
// router restarts should not stay out of the fleet for minutes.
const DefaultConnectRetry = 5 * time.Second

// Neighbor is one router the speaker dials: one session each.
type Neighbor struct {
	Address netip.Addr
	ASN     uint32
	// Port is the neighbor's BGP port; 0 means 179.
	Port uint16
	// Password is the TCP MD5 key (RFC 2385); "" for none.
	Password string
	// MultihopTTL is 0 for a directly connected eBGP neighbor (TTL 1), else
	// the TTL of eBGP multihop. iBGP sessions ignore it.
	MultihopTTL uint8
	// HoldTime is the hold time offered (keepalives every third of it); 0
	// means 9 s.
	HoldTime time.Duration
}

// VIP is what the caller wants for one VIP.
type VIP struct {
	// Announce says the VIP should be announced, with NextHop (an address
	// of the VIP's family; without one the VIP is not announced).
	Announce bool
	NextHop  netip.Addr
	// GracefulShutdown announces the route with the GRACEFUL_SHUTDOWN
	// community (RFC 8326): routers that honour it prefer other instances
	// while this one still forwards (before a withdrawal, e.g. a node
	// drain). Method GracefulShutdown does this for every VIP.
	GracefulShutdown bool
	// Reason says why the VIP is not to be announced (one of the Reason
	// constants, or any short text); it only shows in Status.
	Reason string
}

// Why a VIP is not announced, as Status shows it. The speaker itself sets
// ReasonShuttingDown (after GracefulShutdown) and ReasonNoNextHop; the
// caller passes the others in VIP.Reason.
const (
	ReasonNotAttached  = "not attached"
	ReasonNoEligible   = "no eligible backend"
	ReasonNodeDrained  = "node drained"
	ReasonShuttingDown = "shutting down"
	ReasonNoNextHop    = "no next hop of the VIP's family"
)

const defaultHoldTime = 9 * time.Second

// Errors of the Speaker's methods.
var (
	ErrNotStarted = errors.New("bgp: speaker not started")
	ErrStopped    = errors.New("bgp: speaker stopped")
)

// Speaker is the embedded BGP speaker. Its methods are safe for concurrent
// use; SetVIPs, SetNeighbors and GracefulShutdown are applied one at a time.
type Speaker struct {
	cfg Config
	log *zap.Logger
	srv *server.BgpServer

	// mu serializes the changes to GoBGP and guards what the speaker put
	// there; it is held across GoBGP calls.
	mu        sync.Mutex
	started   bool
	stopped   bool
	shutdown  bool
	cancel    context.CancelFunc // of the peer-event watch
	neighbors map[netip.Addr]Neighbor
	wanted    map[netip.Addr]VIP
	announced map[netip.Addr]route

	// smu guards what Status and the metrics read. It is never held
	// across a GoBGP call: GoBGP's own goroutines take it (through the
	// logger and the event watch).
	smu      sync.Mutex
	sessions map[netip.Addr]*session
	vips     map[netip.Addr]VIPStatus
	closed   bool // after Stop: events are ignored

	announcements, withdrawals atomic.Uint64
}

// route is a VIP as it is in GoBGP's table.
type route struct {
	nextHop netip.Addr
	gshut   bool // carries the GRACEFUL_SHUTDOWN community
}

// session is what the speaker knows of one neighbor's session.
type session struct {
	nb          Neighbor
	state       api.PeerState_SessionState
	up          bool
	since       time.Time
	transitions uint64
	reason      string // why it is not up, or why it went down
	logged      string // the reason last logged
}

// New builds a speaker; nothing runs before Start.
func New(cfg Config, log *zap.Logger) (*Speaker, error) {
	if cfg.ASN == 0 {
		return nil, errors.New("bgp: asn 0")
	}
	if !cfg.RouterID.Is4() || cfg.RouterID.IsUnspecified() {
		return nil, fmt.Errorf("bgp: router id %v is not a non-zero IPv4 address", cfg.RouterID)
	}
	if cfg.ConnectRetry == 0 {
		cfg.ConnectRetry = DefaultConnectRetry
	}
	if cfg.ConnectRetry < time.Second {
		return nil, fmt.Errorf("bgp: connect retry %v is below GoBGP's 1 s", cfg.ConnectRetry)
	}
	if log == nil {
		log = zap.NewNop()
	}
	s := &Speaker{
		cfg:       cfg,
		log:       log,
		neighbors: map[netip.Addr]Neighbor{},
		wanted:    map[netip.Addr]VIP{},
		announced: map[netip.Addr]route{},
		sessions:  map[netip.Addr]*session{},
		vips:      map[netip.Addr]VIPStatus{},
	}
	s.srv = server.NewBgpServer(server.LoggerOption(&gobgpLogger{z: log.With(zap.String("component", "gobgp")), hook: s.gobgpReason}))
	return s, nil
}

// Start runs the speaker: GoBGP's loop, its global configuration (listening
// on no port) and the watch of session states. ctx bounds only the start.
func (s *Speaker) Start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return ErrStopped
	}
	if s.started {
		return nil
	}
	go s.srv.Serve()
	err := s.srv.StartBgp(ctx, &api.StartBgpRequest{Global: &api.Global{
		Asn:        s.cfg.ASN,
		RouterId:   s.cfg.RouterID.String(),
		ListenPort: -1, // dial out only: no listener on port 179
	}})
	if err != nil {
		return fmt.Errorf("bgp: starting: %w", err)
	}
	wctx, cancel := context.WithCancel(context.Background())
	err = s.srv.WatchEvent(wctx, &api.WatchEventRequest{Peer: &api.WatchEventRequest_Peer{}}, s.peerEvent)
	if err != nil {
		cancel()
		s.srv.Stop()
		return fmt.Errorf("bgp: watching sessions: %w", err)
	}
	s.cancel, s.started = cancel, true
	return nil
}

// Stop closes every session (a CEASE notification: the routers drop the
// routes at once) and stops the speaker. It does not wait for graceful
// shutdown; call GracefulShutdown first for that.
func (s *Speaker) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return
	}
	s.stopped = true
	s.smu.Lock()
	s.closed = true
	s.smu.Unlock()
	if !s.started {
		return
	}
	s.cancel()
	s.srv.Stop()
	// GoBGP's Serve loop has no way out: its goroutine stays, idle.
}

// SetNeighbors makes the sessions those of ns: new neighbors are added,
// missing ones removed (their routes withdrawn by the router), changed ones
// removed and added again (a new session). Addresses must be unique.
// Errors of single neighbors are joined; the others are applied.
func (s *Speaker) SetNeighbors(ns []Neighbor) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.usable(); err != nil {
		return err
	}
	want := make(map[netip.Addr]Neighbor, len(ns))
	for _, n := range ns {
		if _, dup := want[n.Address]; dup {
			return fmt.Errorf("bgp: neighbor %s listed twice", n.Address)
		}
		want[n.Address] = n
	}
	ctx := context.Background()
	var errs []error
	// Removals first, then additions, each in address order.
	for _, a := range slices.SortedFunc(maps.Keys(s.neighbors), netip.Addr.Compare) {
		if n, keep := want[a]; keep && n == s.neighbors[a] {
			continue
		}
		if err := s.srv.DeletePeer(ctx, &api.DeletePeerRequest{Address: a.String()}); err != nil {
			errs = append(errs, fmt.Errorf("bgp: removing neighbor %s: %w", a, err))
			continue
		}
		delete(s.neighbors, a)
		s.smu.Lock()
		delete(s.sessions, a)
		s.smu.Unlock()
		s.log.Info("bgp neighbor removed", zap.Stringer("neighbor", a))
	}
	for _, a := range slices.SortedFunc(maps.Keys(want), netip.Addr.Compare) {
		if _, have := s.neighbors[a]; have {
			continue
		}
		n := want[a]
		p, err := s.peer(n)
		if err == nil {
			// The session entry exists before GoBGP's first event for it.
			s.smu.Lock()
			s.sessions[a] = &session{nb: n, state: api.PeerState_IDLE, reason: "not connected yet"}
			s.smu.Unlock()
			err = s.srv.AddPeer(ctx, &api.AddPeerRequest{Peer: p})
		}
		if err != nil {
			s.smu.Lock()
			delete(s.sessions, a)
			s.smu.Unlock()
			errs = append(errs, fmt.Errorf("bgp: adding neighbor %s: %w", a, err))
			continue
		}
		s.neighbors[a] = n
		s.log.Info("bgp neighbor added", zap.Stringer("neighbor", a), zap.Uint32("asn", n.ASN),
			zap.Uint16("port", port(n)), zap.Bool("md5", n.Password != ""), zap.Uint8("multihop_ttl", n.MultihopTTL))
	}
	return errors.Join(errs...)
}

func port(n Neighbor) uint16 {
	if n.Port == 0 {
		return 179
	}
	return n.Port
}

// peer is GoBGP's configuration of one neighbor.
func (s *Speaker) peer(n Neighbor) (*api.Peer, error) {
	if !n.Address.IsValid() || n.Address.Zone() != "" || n.Address.Is4In6() {
		return nil, fmt.Errorf("address %v is not a plain IP address", n.Address)
	}
	if n.ASN == 0 {
		return nil, errors.New("asn 0")
	}
	hold := n.HoldTime
	if hold == 0 {
		hold = defaultHoldTime
	}
	if hold < 3*time.Second || hold > 65535*time.Second {
		return nil, fmt.Errorf("hold time %v is outside [3s, 65535s]", hold)
	}
	p := &api.Peer{
		Conf: &api.PeerConf{
			NeighborAddress: n.Address.String(),
			PeerAsn:         n.ASN,
			AuthPassword:    n.Password,
		},
		Timers: &api.Timers{Config: &api.TimersConfig{
			ConnectRetry:      uint64(s.cfg.ConnectRetry / time.Second),
			HoldTime:          uint64(hold / time.Second),
			KeepaliveInterval: uint64(hold / time.Second / 3),
		}},
		Transport: &api.Transport{
			RemotePort:  uint32(port(n)),
			PassiveMode: false,
		},
		// Both families on every session (MP-BGP), whatever the
		// session's own family.
		AfiSafis: []*api.AfiSafi{
			{Config: &api.AfiSafiConfig{Family: familyV4, Enabled: true}},
			{Config: &api.AfiSafiConfig{Family: familyV6, Enabled: true}},
		},
	}
	if n.MultihopTTL > 0 {
		p.EbgpMultihop = &api.EbgpMultihop{Enabled: true, MultihopTtl: uint32(n.MultihopTTL)}
	}
	return p, nil
}

// SetVIPs makes the announced routes those of want: every VIP with
// Announce and a next hop of its family is announced (again, when its next
// hop changed), every other VIP withdrawn, VIPs missing from want too. Until
// Start, and after GracefulShutdown, nothing is announced. Errors of single
// VIPs are joined; the next SetVIPs retries them.
func (s *Speaker) SetVIPs(want map[netip.Addr]VIP) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.usable(); err != nil {
		return err
	}
	s.wanted = maps.Clone(want)
	if s.wanted == nil {
		s.wanted = map[netip.Addr]VIP{}
	}
	return s.reconcile(context.Background(), false)
}

// effective says whether a wanted VIP is to be announced, and why not.
func (s *Speaker) effective(vip netip.Addr, v VIP) (announce bool, reason string) {
	switch {
	case s.shutdown:
		return false, ReasonShuttingDown
	case !v.Announce:
		if v.Reason == "" {
			return false, "not wanted"
		}
		return false, v.Reason
	case !v.NextHop.IsValid() || v.NextHop.Is4() != vip.Is4() || v.NextHop.Is4In6():
		return false, ReasonNoNextHop
	}
	return true, ""
}

// reconcile brings GoBGP's table to s.wanted: withdrawals first, then
// announcements, each in address order; the bookkeeping of each follows
// its success. gshut re-announces every announced VIP with the
// GRACEFUL_SHUTDOWN community instead.
func (s *Speaker) reconcile(ctx context.Context, gshut bool) error {
	var errs []error
	for _, vip := range slices.SortedFunc(maps.Keys(s.announced), netip.Addr.Compare) {
		v, wanted := s.wanted[vip]
		if ok, _ := s.effective(vip, v); wanted && ok {
			continue
		}
		if err := s.srv.DeletePath(ctx, &api.DeletePathRequest{
			TableType: api.TableType_GLOBAL, Family: family(vip), Path: path(vip, s.announced[vip])}); err != nil {
			errs = append(errs, fmt.Errorf("bgp: withdrawing %s: %w", vip, err))
			continue
		}
		s.withdrawals.Add(1)
		delete(s.announced, vip)
		s.log.Info("bgp route withdrawn", zap.Stringer("vip", vip))
	}
	for _, vip := range slices.SortedFunc(maps.Keys(s.wanted), netip.Addr.Compare) {
		if ok, _ := s.effective(vip, s.wanted[vip]); !ok {
			continue
		}
		r := route{nextHop: s.wanted[vip].NextHop, gshut: gshut || s.wanted[vip].GracefulShutdown}
		cur, have := s.announced[vip]
		if have && cur == r || gshut && !have {
			continue // graceful shutdown announces nothing new
		}
		if _, err := s.srv.AddPath(ctx, &api.AddPathRequest{TableType: api.TableType_GLOBAL, Path: path(vip, r)}); err != nil {
			errs = append(errs, fmt.Errorf("bgp: announcing %s: %w", vip, err))
			continue
		}
		s.announcements.Add(1)
		s.announced[vip] = r
		s.log.Info("bgp route announced", zap.Stringer("vip", vip), zap.Stringer("next_hop", r.nextHop),
			zap.Bool("graceful_shutdown", r.gshut))
	}
	s.publishVIPs()
	return errors.Join(errs...)
}

// publishVIPs copies the VIPs' state to what Status and the metrics read.
func (s *Speaker) publishVIPs() {
	out := make(map[netip.Addr]VIPStatus, len(s.wanted))
	for vip, v := range s.wanted {
		st := VIPStatus{VIP: vip, NextHop: v.NextHop}
		if r, ok := s.announced[vip]; ok {
			st.Announced, st.NextHop, st.GracefulShutdown = true, r.nextHop, r.gshut
		}
		if ok, why := s.effective(vip, v); !ok {
			st.Reason = why
		}
		out[vip] = st
	}
	// A VIP no longer wanted whose withdrawal failed is still announced.
	for vip, r := range s.announced {
		if _, ok := out[vip]; !ok {
			out[vip] = VIPStatus{VIP: vip, Announced: true, NextHop: r.nextHop, GracefulShutdown: r.gshut, Reason: "withdrawal failed"}
		}
	}
	s.smu.Lock()
	s.vips = out
	s.smu.Unlock()
}

// GracefulShutdown withdraws every VIP for good (RFC 8326): each announced
// VIP is first announced again with the GRACEFUL_SHUTDOWN community
// (65535:0), so that routers that honour it move traffic to the other
// instances while the route still exists; settle later (or when ctx ends)
// every VIP is withdrawn. GoBGP sends a session's UPDATEs in order, so a
// settle of 0 still delivers the community before the withdrawal. From
// then on SetVIPs announces nothing (ReasonShuttingDown).
func (s *Speaker) GracefulShutdown(ctx context.Context, settle time.Duration) error {
	s.mu.Lock()
	if err := s.usable(); err != nil {
		s.mu.Unlock()
		return err
	}
	n := len(s.announced)
	s.log.Info("bgp graceful shutdown", zap.Int("vips", n), zap.Duration("settle", settle))
	err := s.reconcile(ctx, true)
	s.mu.Unlock()

	if n > 0 && settle > 0 {
		t := time.NewTimer(settle)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
		}
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	if e := s.usable(); e != nil {
		return errors.Join(err, e)
	}
	s.shutdown = true
	return errors.Join(err, s.reconcile(context.Background(), false))
}

func (s *Speaker) usable() error {
	switch {
	case s.stopped:
		return ErrStopped
	case !s.started:
		return ErrNotStarted
	}
	return nil
}

// peerEvent follows GoBGP's session states: the metrics, Status and the log
// (once per change between up and down).
func (s *Speaker) peerEvent(r *api.WatchEventResponse) {
	ev := r.GetPeer()
	if ev == nil || ev.Type != api.WatchEventResponse_PeerEvent_STATE || ev.Peer.GetState() == nil {
		return
	}
	addr, err := netip.ParseAddr(ev.Peer.State.NeighborAddress)
	if err != nil {
		return
	}
	addr = addr.Unmap()
	state := ev.Peer.State.SessionState
	s.smu.Lock()
	defer s.smu.Unlock()
	ss := s.sessions[addr]
	if ss == nil || s.closed {
		return // removed meanwhile
	}
	ss.state = state
	up := state == api.PeerState_ESTABLISHED
	if up == ss.up {
		return
	}
	ss.up = up
	ss.transitions++
	if up {
		ss.since, ss.reason, ss.logged = time.Now(), "", ""
		s.log.Info("bgp session up", zap.Stringer("neighbor", addr), zap.Uint32("asn", ss.nb.ASN))
		return
	}
	ss.since = time.Time{}
	ss.logged = ss.reason
	s.log.Warn("bgp session down", zap.Stringer("neighbor", addr), zap.Uint32("asn", ss.nb.ASN),
		zap.String("reason", ss.reason))
}

// gobgpReason takes, from GoBGP's log, why a session failed or went down.
// A session that is not up logs each new reason once.
func (s *Speaker) gobgpReason(addr netip.Addr, reason string) {
	s.smu.Lock()
	defer s.smu.Unlock()
	ss := s.sessions[addr]
	if ss == nil || s.closed {
		return
	}
	reason = md5Hint(reason, ss.nb.Password != "")
	ss.reason = reason
	if ss.up || reason == ss.logged {
		return
	}
	ss.logged = reason
	s.log.Warn("bgp session not established", zap.Stringer("neighbor", addr), zap.Uint32("asn", ss.nb.ASN),
		zap.String("state", stateName(ss.state)), zap.String("reason", reason))
}

// md5Hint adds to a connect that timed out, on a session with a TCP MD5
// password, that a wrong password looks exactly so: the neighbor's kernel
// drops segments whose signature does not verify, without a word back, so
// the dialer sees only a timeout.
func md5Hint(reason string, md5 bool) string {
	if md5 && strings.HasPrefix(reason, "connect: ") && strings.HasSuffix(reason, "i/o timeout") {
		return reason + " (may be a TCP MD5 password mismatch: the neighbor drops segments whose signature does not verify)"
	}
	return reason
}

// stateName is the FSM state in lower case, as BIRD and RFC 4271 spell it.
func stateName(st api.PeerState_SessionState) string {
	switch st {
	case api.PeerState_IDLE:
		return "idle"
	case api.PeerState_CONNECT:
		return "connect"
	case api.PeerState_ACTIVE:
		return "active"
	case api.PeerState_OPENSENT:
		return "opensent"
	case api.PeerState_OPENCONFIRM:
		return "openconfirm"
	case api.PeerState_ESTABLISHED:
		return "established"
	}
	return "unknown(" + strconv.Itoa(int(st)) + ")"
}

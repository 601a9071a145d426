package appliance

import (
	"context"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"

	"xlb/config"
	"xlb/controlplane/bgp"
	"xlb/controlplane/cptest"
)

var (
	vipA = netip.MustParseAddr("203.0.113.10")
	vipB = netip.MustParseAddr("2001:db8::10")
	nh4  = netip.MustParseAddr("10.97.0.2")
	nh6  = netip.MustParseAddr("fd00:97::2")
)

// TestWantVIPs is the announcement rule of [bgp], case by case: a VIP is
// announced only while attached, with every health verdict in, not
// drained, and (when-healthy) with a non-empty eligible set; otherwise the
// first reason that holds is given. Next hops follow the VIP's family.
func TestWantVIPs(t *testing.T) {
	ready := announceState{attached: true, checked: true, pulled: true, nextHop4: nh4, nextHop6: nh6}
	both := func(netip.Addr) bool { return true }
	onlyA := func(v netip.Addr) bool { return v == vipA }
	for _, tc := range []struct {
		name     string
		st       func(announceState) announceState
		eligible func(netip.Addr) bool
		want     map[netip.Addr]bgp.VIP
	}{
		{"announced", nil, both, map[netip.Addr]bgp.VIP{
			vipA: {Announce: true, NextHop: nh4}, vipB: {Announce: true, NextHop: nh6}}},
		{"not attached", func(s announceState) announceState { s.attached, s.checked = false, false; return s }, both,
			map[netip.Addr]bgp.VIP{vipA: {NextHop: nh4, Reason: bgp.ReasonNotAttached}, vipB: {NextHop: nh6, Reason: bgp.ReasonNotAttached}}},
		{"health not checked", func(s announceState) announceState { s.checked = false; return s }, both,
			map[netip.Addr]bgp.VIP{vipA: {NextHop: nh4, Reason: ReasonHealthNotChecked}, vipB: {NextHop: nh6, Reason: ReasonHealthNotChecked}}},
		{"flow table not pulled yet", func(s announceState) announceState { s.pulled = false; return s }, both,
			map[netip.Addr]bgp.VIP{vipA: {NextHop: nh4, Reason: ReasonTableNotPulled}, vipB: {NextHop: nh6, Reason: ReasonTableNotPulled}}},
		{"no eligible backend behind B", nil, onlyA,
			map[netip.Addr]bgp.VIP{vipA: {Announce: true, NextHop: nh4}, vipB: {NextHop: nh6, Reason: bgp.ReasonNoEligible}}},
		{"always announces without eligible backends", func(s announceState) announceState { s.always = true; return s }, onlyA,
			map[netip.Addr]bgp.VIP{vipA: {Announce: true, NextHop: nh4}, vipB: {Announce: true, NextHop: nh6}}},
		{"node drained", func(s announceState) announceState { s.drained = true; return s }, both,
			map[netip.Addr]bgp.VIP{vipA: {NextHop: nh4, Reason: bgp.ReasonNodeDrained}, vipB: {NextHop: nh6, Reason: bgp.ReasonNodeDrained}}},
		{"node draining: community first", func(s announceState) announceState { s.drained, s.gshut = true, true; return s }, onlyA,
			map[netip.Addr]bgp.VIP{vipA: {Announce: true, NextHop: nh4, GracefulShutdown: true}, vipB: {NextHop: nh6, Reason: bgp.ReasonNoEligible}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := ready
			if tc.st != nil {
				st = tc.st(st)
			}
			got := wantVIPs([]netip.Addr{vipA, vipB}, st, tc.eligible)
			if len(got) != len(tc.want) {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
			for v, w := range tc.want {
				if got[v] != w {
					t.Errorf("%s: got %+v, want %+v", v, got[v], w)
				}
			}
		})
	}
}

// TestEligibleVIPs reads eligible sets from a real snapshot: a VIP whose
// only service has no healthy backend is not eligible, whether its set is
// empty (drop_traffic_if_unhealthy) or E1's fallback to every (unhealthy)
// backend; the other VIP is.
func TestEligibleVIPs(t *testing.T) {
	r := cptest.New(t, cptest.Testdata(t, "announce.toml"))
	el := eligibleVIPs(r.CP.Snapshot())
	if !el(vipA) || !el(vipB) {
		t.Fatalf("all healthy: eligible %v %v, want both", el(vipA), el(vipB))
	}
	r.Health("b2", false)
	el = eligibleVIPs(r.CP.Snapshot())
	if !el(vipA) || el(vipB) {
		t.Errorf("b2 (vipB's only backend) unhealthy: eligible %v %v, want A only", el(vipA), el(vipB))
	}
	r.Health("b1", false)
	if el = eligibleVIPs(r.CP.Snapshot()); el(vipA) {
		t.Error("b1 (vipA's only backend) unhealthy: A eligible through E1's fallback to all backends")
	}
	if el(netip.MustParseAddr("192.0.2.1")) || eligibleVIPs(nil)(vipA) {
		t.Error("an unknown VIP, or no snapshot, is eligible")
	}
}

// fakeSpeaker records what the announcer asks for.
type fakeSpeaker struct {
	mu        sync.Mutex
	vips      []map[netip.Addr]bgp.VIP
	neighbors [][]bgp.Neighbor
	gshut     []time.Duration // settles of GracefulShutdown calls
}

func (f *fakeSpeaker) SetVIPs(v map[netip.Addr]bgp.VIP) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.vips = append(f.vips, v)
	return nil
}

func (f *fakeSpeaker) SetNeighbors(n []bgp.Neighbor) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.neighbors = append(f.neighbors, n)
	return nil
}

func (f *fakeSpeaker) GracefulShutdown(_ context.Context, settle time.Duration) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.gshut = append(f.gshut, settle)
	return nil
}

func (f *fakeSpeaker) Status() bgp.Status { return bgp.Status{} }

func (f *fakeSpeaker) last() map[netip.Addr]bgp.VIP {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.vips) == 0 {
		return nil
	}
	return f.vips[len(f.vips)-1]
}

// newTestAnnouncer is an announcer over a rig's control plane and a fake
// speaker; checked is the first health round.
func newTestAnnouncer(t *testing.T, text string) (*announcer, *fakeSpeaker, *cptest.Rig, chan struct{}) {
	t.Helper()
	r := cptest.New(t, text)
	cfg := cptest.Config(t, text)
	sp := &fakeSpeaker{}
	checked := make(chan struct{})
	a := newAnnouncer(sp, cfg, r.CP.Snapshot, checked, nh4, nh6, zap.NewNop())
	return a, sp, r, checked
}

// TestAnnouncer drives the announcer step by step: nothing is announced
// before the first health round, both VIPs after it; a VIP whose service
// loses its last backend is withdrawn, and announced again when it
// recovers; a node drain first announces with the GRACEFUL_SHUTDOWN
// community, withdraws after the settle, and undrain announces again; a
// reload that drops a VIP withdraws it at once and passes the neighbors;
// a shutdown uses the speaker's graceful shutdown with the settle, and
// nothing is announced after it.
func TestAnnouncer(t *testing.T) {
	a, sp, r, checked := newTestAnnouncer(t, cptest.Testdata(t, "announce.toml"))
	a.st.attached = true // as run does first
	announced := func(v netip.Addr) bool { return sp.last()[v].Announce }

	a.apply()
	if w := sp.last(); w[vipA].Reason != ReasonHealthNotChecked || w[vipB].Reason != ReasonHealthNotChecked {
		t.Fatalf("before the first health round: %+v", w)
	}
	close(checked)
	a.apply()
	if !announced(vipA) || !announced(vipB) {
		t.Fatalf("after the first round: %+v", sp.last())
	}
	calls := len(sp.vips)
	a.apply()
	if len(sp.vips) != calls {
		t.Error("a tick with nothing changed handed the speaker the routes again")
	}

	r.Health("b2", false)
	a.apply()
	if !announced(vipA) || announced(vipB) || sp.last()[vipB].Reason != bgp.ReasonNoEligible {
		t.Errorf("b2 unhealthy: %+v, want B withdrawn (no eligible backend)", sp.last())
	}
	r.Health("b2", true)
	a.apply()
	if !announced(vipB) {
		t.Errorf("b2 healthy again: %+v, want B announced", sp.last())
	}

	if !a.setDrained(true) || a.setDrained(true) {
		t.Error("setDrained(true) twice: want a change, then none")
	}
	a.apply()
	if w := sp.last(); !w[vipA].Announce || !w[vipA].GracefulShutdown {
		t.Errorf("node drain, within the settle: %+v, want announced with the community", w)
	}
	a.mu.Lock()
	a.drainAt = time.Now().Add(-a.settle()) // the settle is over
	a.mu.Unlock()
	a.apply()
	if w := sp.last(); w[vipA].Announce || w[vipA].Reason != bgp.ReasonNodeDrained || w[vipB].Announce {
		t.Errorf("node drained: %+v, want both withdrawn (node drained)", w)
	}
	if !a.nodeDown.Load() {
		t.Error("status does not show the node drained")
	}
	a.setDrained(false)
	a.apply()
	if !announced(vipA) || !announced(vipB) || sp.last()[vipA].GracefulShutdown {
		t.Errorf("undrained: %+v, want both announced without the community", sp.last())
	}

	// A reload without vipB's rule: withdrawn at once (the reloader drops
	// it from the XDP program right after), neighbors passed on.
	cfg := cptest.Config(t, cptest.Testdata(t, "announce.toml"))
	cfg.Rules = cfg.Rules[:1]
	cfg.BGP.Neighbors = append(cfg.BGP.Neighbors, config.BGPNeighbor{Address: netip.MustParseAddr("10.97.0.9"), ASN: 65000, Port: 179})
	if err := a.reload(cfg); err != nil {
		t.Fatal(err)
	}
	if w := sp.last(); len(w) != 1 || !w[vipA].Announce {
		t.Errorf("after the reload: %+v, want only A, announced", w)
	}
	if n := sp.neighbors[len(sp.neighbors)-1]; len(n) != 2 || n[1].Address.String() != "10.97.0.9" {
		t.Errorf("neighbors after the reload: %+v", n)
	}

	calls = len(sp.vips)
	a.shutdown(t.Context())
	if len(sp.gshut) != 1 || sp.gshut[0] != time.Second {
		t.Errorf("shutdown: graceful shutdowns %v, want one with a 1 s settle", sp.gshut)
	}
	a.apply()
	if len(sp.vips) != calls {
		t.Error("the announcer still sets routes after the shutdown")
	}
}

// TestAnnouncerWaitsForPull: with [flow_sync] pull_on_start the VIPs stay
// withdrawn, after the first health round, until the table pull ends
// (done or given up): a joining instance announces only with the fleet's
// flows in its table.
func TestAnnouncerWaitsForPull(t *testing.T) {
	a, sp, _, checked := newTestAnnouncer(t, cptest.Testdata(t, "announce.toml"))
	pulled := make(chan struct{})
	a.waitPull(pulled)
	a.st.attached = true
	close(checked)
	a.apply()
	if w := sp.last(); w[vipA].Announce || w[vipA].Reason != ReasonTableNotPulled || w[vipB].Reason != ReasonTableNotPulled {
		t.Fatalf("health checked, pull running: %+v, want both withdrawn (%s)", w, ReasonTableNotPulled)
	}
	close(pulled)
	a.apply()
	if w := sp.last(); !w[vipA].Announce || !w[vipB].Announce {
		t.Fatalf("pull ended: %+v, want both announced", w)
	}
}

// TestAnnouncerShutdownWithoutGrace: graceful_shutdown_sec = 0 withdraws
// every VIP at once, without the community.
func TestAnnouncerShutdownWithoutGrace(t *testing.T) {
	a, sp, _, _ := newTestAnnouncer(t, cptest.Testdata(t, "announce.toml"))
	a.cfg.BGP.GracefulShutdown = 0
	a.shutdown(t.Context())
	w := sp.last()
	if len(sp.gshut) != 0 || len(w) != 2 || w[vipA].Announce || w[vipA].Reason != bgp.ReasonShuttingDown {
		t.Errorf("graceful shutdowns %v, routes %+v; want none, and both withdrawn (shutting down)", sp.gshut, w)
	}
}

var _ speaker = (*bgp.Speaker)(nil)

// TestAnnouncerKeepsDrainingVIP: a reload that removes vipB's rule while
// its service drains for 30 s (M5) keeps vipB's route, with the
// GRACEFUL_SHUTDOWN community, for as long as the rule drains, so the
// tracked flows still reach this instance; when the drain ends the route
// is withdrawn.
func TestAnnouncerKeepsDrainingVIP(t *testing.T) {
	fixture := cptest.Testdata(t, "announce.toml")
	text := strings.Replace(fixture, "name = \"b\"\nprotocol = \"TCP\"\n", "name = \"b\"\nprotocol = \"TCP\"\nconnection_draining_timeout_sec = 30\n", 1)
	if text == fixture {
		t.Fatal("the fixture changed: no service b to give a draining timeout")
	}
	a, sp, r, checked := newTestAnnouncer(t, text)
	a.st.attached = true
	close(checked)
	a.apply()
	if !sp.last()[vipB].Announce {
		t.Fatalf("before the reload: %+v", sp.last())
	}
	// vipB's rule removed: the rig's control plane drains it, the
	// announcer gets the new configuration.
	without := text[:strings.LastIndex(text, "[[forwarding_rule]]")] + text[strings.Index(text, "[bgp]"):]
	r.Reload(without)
	if err := a.reload(cptest.Config(t, without)); err != nil {
		t.Fatal(err)
	}
	if w := sp.last(); !w[vipA].Announce || w[vipA].GracefulShutdown || !w[vipB].Announce || !w[vipB].GracefulShutdown {
		t.Errorf("vipB draining: %+v, want A announced, B announced with the community", w)
	}
	r.At(31)
	r.CP.VIPs(r.Now) // the reaper's call at the drain's end
	a.apply()
	if w := sp.last(); !w[vipA].Announce || w[vipB].Announce {
		t.Errorf("after the drain: %+v, want B withdrawn", w)
	}
}

package bgp

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap/zaptest/observer"

	"xlb/config"
)

// TestAnnounceWithdraw: an announced VIP reaches the router as a /32 with
// the caller's next hop, and a withdrawn one leaves its table; status and
// metrics follow.
func TestAnnounceWithdraw(t *testing.T) {
	p := newPeer(t, "127.0.0.2", "127.0.0.1", peerOpts{})
	s, _ := newSpeaker(t)
	if err := s.SetNeighbors([]Neighbor{p.neighbor()}); err != nil {
		t.Fatal(err)
	}
	vip := netip.MustParseAddr("203.0.113.10")
	if err := s.SetVIPs(want4("203.0.113.10", "10.0.0.5")); err != nil {
		t.Fatal(err)
	}
	waitUp(t, s, p.addr)
	p.waitRoutes(t, map[string]string{"203.0.113.10/32": "10.0.0.5"})

	st := s.Status()
	if len(st.VIPs) != 1 || st.VIPs[0] != (VIPStatus{VIP: vip, Announced: true, NextHop: netip.MustParseAddr("10.0.0.5")}) {
		t.Errorf("status VIPs %+v", st.VIPs)
	}
	eventually(t, "prefixes sent", func() (bool, string) {
		n, _ := neighborStatus(s, p.addr)
		return n.PrefixesSent == 1 && n.Uptime > 0 && n.Transitions == 1, fmt.Sprintf("%+v", n)
	})
	if v, _ := metric(t, s, "xlb_bgp_vip_announced", "vip=203.0.113.10"); v != 1 {
		t.Errorf("xlb_bgp_vip_announced %v", v)
	}
	if v, _ := metric(t, s, "xlb_bgp_session_up", "neighbor=127.0.0.2"); v != 1 {
		t.Errorf("xlb_bgp_session_up %v", v)
	}

	// Not wanted any more, with a reason: withdrawn.
	if err := s.SetVIPs(map[netip.Addr]VIP{vip: {Reason: ReasonNoEligible}}); err != nil {
		t.Fatal(err)
	}
	p.waitRoutes(t, map[string]string{})
	st = s.Status()
	if len(st.VIPs) != 1 || st.VIPs[0] != (VIPStatus{VIP: vip, Reason: ReasonNoEligible}) {
		t.Errorf("status VIPs %+v", st.VIPs)
	}
	if v, _ := metric(t, s, "xlb_bgp_vip_announced", "vip=203.0.113.10"); v != 0 {
		t.Errorf("xlb_bgp_vip_announced %v after withdrawal", v)
	}
	a, _ := metric(t, s, "xlb_bgp_announcements_total")
	w, _ := metric(t, s, "xlb_bgp_withdrawals_total")
	if a != 1 || w != 1 {
		t.Errorf("announcements %v, withdrawals %v; want 1, 1", a, w)
	}
}

// TestSetVIPsReconciles: SetVIPs is declarative: the router's table follows
// each wanted set (additions, removals, a changed next hop, a VIP whose
// next hop is of the other family), and repeating a set sends nothing.
func TestSetVIPsReconciles(t *testing.T) {
	p := newPeer(t, "127.0.0.2", "127.0.0.1", peerOpts{})
	s, _ := newSpeaker(t)
	if err := s.SetNeighbors([]Neighbor{p.neighbor()}); err != nil {
		t.Fatal(err)
	}
	waitUp(t, s, p.addr)
	a, b, c := netip.MustParseAddr("203.0.113.1"), netip.MustParseAddr("203.0.113.2"), netip.MustParseAddr("203.0.113.3")
	v6 := netip.MustParseAddr("2001:db8::10")
	nh, nh2, nh6 := netip.MustParseAddr("10.0.0.5"), netip.MustParseAddr("10.0.0.6"), netip.MustParseAddr("fd00::5")

	steps := []struct {
		name string
		want map[netip.Addr]VIP
		at   map[string]string
	}{
		{"two", map[netip.Addr]VIP{a: {Announce: true, NextHop: nh}, b: {Announce: true, NextHop: nh}},
			map[string]string{"203.0.113.1/32": "10.0.0.5", "203.0.113.2/32": "10.0.0.5"}},
		{"one replaced, IPv6 added", map[netip.Addr]VIP{a: {Announce: true, NextHop: nh}, c: {Announce: true, NextHop: nh},
			v6: {Announce: true, NextHop: nh6}},
			map[string]string{"203.0.113.1/32": "10.0.0.5", "203.0.113.3/32": "10.0.0.5", "2001:db8::10/128": "fd00::5"}},
		{"next hop changed, IPv6 without an IPv6 next hop", map[netip.Addr]VIP{a: {Announce: true, NextHop: nh2}, c: {Announce: true, NextHop: nh},
			v6: {Announce: true, NextHop: nh}},
			map[string]string{"203.0.113.1/32": "10.0.0.6", "203.0.113.3/32": "10.0.0.5"}},
		{"same again", map[netip.Addr]VIP{a: {Announce: true, NextHop: nh2}, c: {Announce: true, NextHop: nh},
			v6: {Announce: true, NextHop: nh}},
			map[string]string{"203.0.113.1/32": "10.0.0.6", "203.0.113.3/32": "10.0.0.5"}},
		{"graceful shutdown community asked for", map[netip.Addr]VIP{a: {Announce: true, NextHop: nh2, GracefulShutdown: true},
			c: {Announce: true, NextHop: nh, GracefulShutdown: true}},
			map[string]string{"203.0.113.1/32": "10.0.0.6 [4294901760]", "203.0.113.3/32": "10.0.0.5 [4294901760]"}},
		{"node drained", map[netip.Addr]VIP{a: {Reason: ReasonNodeDrained}, c: {Reason: ReasonNodeDrained}}, map[string]string{}},
	}
	for _, step := range steps {
		if err := s.SetVIPs(step.want); err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		p.waitRoutes(t, step.at)
	}
	// 2 + 2 (c, v6) + 1 (a's next hop) + 2 (community) announcements; b,
	// v6, a, c withdrawn.
	if n, _ := metric(t, s, "xlb_bgp_announcements_total"); n != 7 {
		t.Errorf("announcements %v, want 7", n)
	}
	if n, _ := metric(t, s, "xlb_bgp_withdrawals_total"); n != 4 {
		t.Errorf("withdrawals %v, want 4", n)
	}
	st := s.Status()
	if len(st.VIPs) != 2 || st.VIPs[0].Reason != ReasonNodeDrained || st.VIPs[0].Announced {
		t.Errorf("status %+v", st.VIPs)
	}
	// The IPv6 VIP with an IPv4 next hop said why it was not announced.
	if err := s.SetVIPs(map[netip.Addr]VIP{v6: {Announce: true, NextHop: nh}}); err != nil {
		t.Fatal(err)
	}
	if st := s.Status(); len(st.VIPs) != 1 || st.VIPs[0].Reason != ReasonNoNextHop {
		t.Errorf("status %+v", st.VIPs)
	}
}

// TestGracefulShutdown: every announced VIP is announced again with
// GRACEFUL_SHUTDOWN (65535:0) before it is withdrawn, as the router sees
// the updates; afterwards SetVIPs announces nothing.
func TestGracefulShutdown(t *testing.T) {
	p := newPeer(t, "127.0.0.2", "127.0.0.1", peerOpts{watch: true})
	s, _ := newSpeaker(t)
	if err := s.SetNeighbors([]Neighbor{p.neighbor()}); err != nil {
		t.Fatal(err)
	}
	want := map[netip.Addr]VIP{
		netip.MustParseAddr("203.0.113.10"): {Announce: true, NextHop: netip.MustParseAddr("10.0.0.5")},
		netip.MustParseAddr("2001:db8::10"): {Announce: true, NextHop: netip.MustParseAddr("fd00::5")},
	}
	if err := s.SetVIPs(want); err != nil {
		t.Fatal(err)
	}
	p.waitRoutes(t, map[string]string{"203.0.113.10/32": "10.0.0.5", "2001:db8::10/128": "fd00::5"})

	// Settle 0: the order of the updates alone must carry the community
	// before the withdrawal.
	if err := s.GracefulShutdown(context.Background(), 0); err != nil {
		t.Fatal(err)
	}
	p.waitRoutes(t, map[string]string{})
	prefixes := []string{"203.0.113.10/32", "2001:db8::10/128"}
	sequence := func(prefix string) []string {
		var seq []string
		for _, u := range p.seen() {
			if u.prefix != prefix {
				continue
			}
			switch {
			case u.withdraw:
				seq = append(seq, "withdraw")
			case len(u.communities) == 1 && u.communities[0] == CommunityGracefulShutdown:
				seq = append(seq, "gshut")
			case len(u.communities) == 0:
				seq = append(seq, "announce")
			default:
				seq = append(seq, fmt.Sprint(u))
			}
		}
		return seq
	}
	// GoBGP hands the watch its events through a queue of its own, after
	// the table changed: an empty table does not mean the watch has seen
	// the withdrawals yet. Wait for them, then check what came before.
	eventually(t, "the withdrawals at the watch", func() (bool, string) {
		var saw []string
		for _, prefix := range prefixes {
			seq := sequence(prefix)
			if !slices.Contains(seq, "withdraw") {
				return false, fmt.Sprint(prefix, ": ", seq)
			}
			saw = append(saw, fmt.Sprint(seq))
		}
		return true, fmt.Sprint(saw)
	})
	for _, prefix := range prefixes {
		if got := strings.Join(sequence(prefix), " "); got != "announce gshut withdraw" {
			t.Errorf("%s: the router saw %q, want %q", prefix, got, "announce gshut withdraw")
		}
	}
	st := s.Status()
	if !st.ShuttingDown {
		t.Error("status: not shutting down")
	}
	for _, v := range st.VIPs {
		if v.Announced || v.Reason != ReasonShuttingDown {
			t.Errorf("status %+v", v)
		}
	}
	// Nothing is announced any more.
	if err := s.SetVIPs(want); err != nil {
		t.Fatal(err)
	}
	if n, _ := metric(t, s, "xlb_bgp_announcements_total"); n != 4 {
		t.Errorf("announcements %v, want 4 (2 + 2 with the community)", n)
	}
}

// TestGracefulShutdownSettle: the withdrawal waits for settle (here until
// the test has seen the community at the router), or for ctx.
func TestGracefulShutdownSettle(t *testing.T) {
	p := newPeer(t, "127.0.0.2", "127.0.0.1", peerOpts{})
	s, _ := newSpeaker(t)
	if err := s.SetNeighbors([]Neighbor{p.neighbor()}); err != nil {
		t.Fatal(err)
	}
	if err := s.SetVIPs(want4("203.0.113.10", "10.0.0.5")); err != nil {
		t.Fatal(err)
	}
	p.waitRoutes(t, map[string]string{"203.0.113.10/32": "10.0.0.5"})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.GracefulShutdown(ctx, time.Hour) }()
	eventually(t, "community at the router", func() (bool, string) {
		r := p.routes(t)["203.0.113.10/32"]
		return len(r.communities) == 1 && r.communities[0] == CommunityGracefulShutdown, fmt.Sprint(r)
	})
	if st := s.Status(); len(st.VIPs) != 1 || !st.VIPs[0].GracefulShutdown || !st.VIPs[0].Announced {
		t.Errorf("status while settling: %+v", st.VIPs)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	p.waitRoutes(t, map[string]string{})
}

// TestRefusedNeighbor: a neighbor whose AS is not the one configured
// refuses the session; the speaker retries it, shows it as not established
// with the reason, logs the failure once, and keeps serving the other
// neighbor.
func TestRefusedNeighbor(t *testing.T) {
	good := newPeer(t, "127.0.0.2", "127.0.0.1", peerOpts{})
	bad := newPeer(t, "127.0.0.3", "127.0.0.1", peerOpts{asn: 65001})
	s, logs := newSpeaker(t)
	wrong := bad.neighbor() // ASN 65000 configured, 65001 answers
	if err := s.SetNeighbors([]Neighbor{good.neighbor(), wrong}); err != nil {
		t.Fatal(err)
	}
	if err := s.SetVIPs(want4("203.0.113.10", "10.0.0.5")); err != nil {
		t.Fatal(err)
	}
	good.waitRoutes(t, map[string]string{"203.0.113.10/32": "10.0.0.5"})

	// Two OPENs at the refusing router: the speaker tried again.
	eventually(t, "a second attempt", func() (bool, string) {
		n := bad.opensReceived(t)
		return n >= 2, fmt.Sprintf("%d OPEN messages", n)
	})
	n, ok := neighborStatus(s, bad.addr)
	if !ok || n.Up || n.State == "established" || !strings.Contains(n.Reason, "bad peer as") {
		t.Errorf("status of the refusing neighbor: %+v", n)
	}
	if v, ok := metric(t, s, "xlb_bgp_session_up", "neighbor=127.0.0.3"); !ok || v != 0 {
		t.Errorf("xlb_bgp_session_up %v %v", v, ok)
	}
	if got := countLogs(logs, "bgp session not established", "127.0.0.3"); got != 1 {
		t.Errorf("logged %d times, want once: %v", got, logs.FilterMessage("bgp session not established").All())
	}
	if len(bad.routes(t)) != 0 {
		t.Errorf("the refusing router has routes")
	}
	// The good session is untouched.
	if n, _ := neighborStatus(s, good.addr); !n.Up || n.Transitions != 1 {
		t.Errorf("good neighbor: %+v", n)
	}
	// Fixing the ASN (a reload) brings the session up.
	fixed := wrong
	fixed.ASN = 65001
	if err := s.SetNeighbors([]Neighbor{good.neighbor(), fixed}); err != nil {
		t.Fatal(err)
	}
	waitUp(t, s, bad.addr)
	bad.waitRoutes(t, map[string]string{"203.0.113.10/32": "10.0.0.5"})
}

// TestUnreachableNeighbor: nobody listens: the status says so (connection
// refused), the log says it once, and routes flow to the other neighbor.
func TestUnreachableNeighbor(t *testing.T) {
	good := newPeer(t, "127.0.0.2", "127.0.0.1", peerOpts{})
	s, logs := newSpeaker(t)
	none := Neighbor{Address: netip.MustParseAddr("127.0.0.4"), ASN: peerASN, Port: freePort(t, netip.MustParseAddr("127.0.0.4"))}
	if err := s.SetNeighbors([]Neighbor{good.neighbor(), none}); err != nil {
		t.Fatal(err)
	}
	if err := s.SetVIPs(want4("203.0.113.10", "10.0.0.5")); err != nil {
		t.Fatal(err)
	}
	good.waitRoutes(t, map[string]string{"203.0.113.10/32": "10.0.0.5"})
	eventually(t, "refused, twice", func() (bool, string) {
		n, _ := neighborStatus(s, none.Address)
		return strings.Contains(n.Reason, "connection refused") && n.State != "established", fmt.Sprintf("%+v", n)
	})
	// Three failed dials (GoBGP's own debug lines), then count.
	eventually(t, "three attempts", func() (bool, string) {
		n := logs.FilterMessage("failed to connect").Filter(func(e observer.LoggedEntry) bool {
			return e.ContextMap()["Key"] == "127.0.0.4"
		}).Len()
		return n >= 3, fmt.Sprintf("%d attempts", n)
	})
	if got := countLogs(logs, "bgp session not established", "127.0.0.4"); got != 1 {
		t.Errorf("logged %d times, want once", got)
	}
}

// TestSetNeighbors: a neighbor added by a reload gets the routes; one
// removed loses its session and, at the router, the routes.
func TestSetNeighbors(t *testing.T) {
	a := newPeer(t, "127.0.0.2", "127.0.0.1", peerOpts{})
	b := newPeer(t, "127.0.0.3", "127.0.0.1", peerOpts{})
	s, _ := newSpeaker(t)
	if err := s.SetNeighbors([]Neighbor{a.neighbor()}); err != nil {
		t.Fatal(err)
	}
	if err := s.SetVIPs(want4("203.0.113.10", "10.0.0.5")); err != nil {
		t.Fatal(err)
	}
	a.waitRoutes(t, map[string]string{"203.0.113.10/32": "10.0.0.5"})

	if err := s.SetNeighbors([]Neighbor{a.neighbor(), b.neighbor()}); err != nil {
		t.Fatal(err)
	}
	b.waitRoutes(t, map[string]string{"203.0.113.10/32": "10.0.0.5"})
	if n, _ := neighborStatus(s, a.addr); n.Transitions != 1 {
		t.Errorf("the kept session was reset: %+v", n)
	}

	if err := s.SetNeighbors([]Neighbor{b.neighbor()}); err != nil {
		t.Fatal(err)
	}
	a.waitRoutes(t, map[string]string{})
	st := s.Status()
	if len(st.Neighbors) != 1 || st.Neighbors[0].Address != b.addr {
		t.Errorf("status neighbors %+v", st.Neighbors)
	}
	if _, ok := metric(t, s, "xlb_bgp_session_up", "neighbor=127.0.0.2"); ok {
		t.Error("a removed neighbor still has a metric")
	}

	// A changed neighbor (here its hold time) gets a new session.
	nb := b.neighbor()
	nb.HoldTime = 30 * time.Second
	if err := s.SetNeighbors([]Neighbor{nb}); err != nil {
		t.Fatal(err)
	}
	waitUp(t, s, b.addr)
	b.waitRoutes(t, map[string]string{"203.0.113.10/32": "10.0.0.5"})

	if err := s.SetNeighbors([]Neighbor{nb, nb}); err == nil {
		t.Error("a neighbor listed twice was accepted")
	}
}

// TestMD5: a session with the right TCP MD5 password comes up; with a
// wrong one the router's kernel drops the SYNs and the dial times out.
func TestMD5(t *testing.T) {
	p := newPeer(t, "127.0.0.2", "127.0.0.1", peerOpts{password: "s3cret"})
	s, _ := newSpeaker(t)
	nb := p.neighbor()
	nb.Password = "s3cret"
	if err := s.SetNeighbors([]Neighbor{nb}); err != nil {
		t.Fatal(err)
	}
	if err := s.SetVIPs(want4("203.0.113.10", "10.0.0.5")); err != nil {
		t.Fatal(err)
	}
	eventually(t, "MD5 session up", func() (bool, string) {
		n, _ := neighborStatus(s, p.addr)
		return n.Up, fmt.Sprintf("%+v", n)
	})
	p.waitRoutes(t, map[string]string{"203.0.113.10/32": "10.0.0.5"})

	nb.Password = "wrong"
	if err := s.SetNeighbors([]Neighbor{nb}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "wrong password fails", func() (bool, string) {
		n, _ := neighborStatus(s, p.addr)
		return !n.Up && strings.HasPrefix(n.Reason, "connect: "), fmt.Sprintf("%+v", n)
	})
	if n := p.opensReceived(t); n != 1 {
		t.Errorf("the router received %d OPENs; only the first session should have reached it", n)
	}
}

// TestIPv6Session: a session over IPv6 carries IPv4 and IPv6 VIPs.
func TestIPv6Session(t *testing.T) {
	p := newPeer(t, "::1", "::1", peerOpts{})
	s, _ := newSpeaker(t)
	if err := s.SetNeighbors([]Neighbor{p.neighbor()}); err != nil {
		t.Fatal(err)
	}
	if err := s.SetVIPs(map[netip.Addr]VIP{
		netip.MustParseAddr("203.0.113.10"): {Announce: true, NextHop: netip.MustParseAddr("10.0.0.5")},
		netip.MustParseAddr("2001:db8::10"): {Announce: true, NextHop: netip.MustParseAddr("fd00::5")},
	}); err != nil {
		t.Fatal(err)
	}
	p.waitRoutes(t, map[string]string{"203.0.113.10/32": "10.0.0.5", "2001:db8::10/128": "fd00::5"})
}

func TestNewAndLifecycle(t *testing.T) {
	for _, cfg := range []Config{
		{RouterID: netip.MustParseAddr("10.0.0.5")},
		{ASN: 1, RouterID: netip.MustParseAddr("fd00::1")},
		{ASN: 1, RouterID: netip.MustParseAddr("0.0.0.0")},
		{ASN: 1, RouterID: netip.MustParseAddr("10.0.0.5"), ConnectRetry: time.Millisecond},
	} {
		if _, err := New(cfg, nil); err == nil {
			t.Errorf("New(%+v) accepted", cfg)
		}
	}
	s, err := New(Config{ASN: 1, RouterID: netip.MustParseAddr("10.0.0.5")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.SetVIPs(nil); err != ErrNotStarted {
		t.Errorf("before Start: %v", err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := s.SetNeighbors([]Neighbor{{Address: netip.MustParseAddr("127.0.0.9")}}); err == nil {
		t.Error("a neighbor without ASN was accepted")
	}
	if st := s.Status(); len(st.Neighbors) != 0 {
		t.Errorf("a failed neighbor is in the status: %+v", st.Neighbors)
	}
	s.Stop()
	s.Stop()
	if err := s.SetVIPs(nil); err != ErrStopped {
		t.Errorf("after Stop: %v", err)
	}
	if err := s.GracefulShutdown(context.Background(), 0); err != ErrStopped {
		t.Errorf("after Stop: %v", err)
	}
}

func TestNeighborsFromConfig(t *testing.T) {
	cfg, err := config.Parse("t.toml", []byte(`[bgp]
asn = 65010
hold_time_sec = 30
[[bgp.neighbor]]
address = "10.0.0.1"
asn = 65000
password = "x"
multihop_ttl = 2
[[bgp.neighbor]]
address = "fd00::1"
asn = 65001
port = 1179
`))
	if err != nil {
		t.Fatal(err)
	}
	got := Neighbors(cfg.BGP)
	want := []Neighbor{
		{Address: netip.MustParseAddr("10.0.0.1"), ASN: 65000, Port: 179, Password: "x", MultihopTTL: 2, HoldTime: 30 * time.Second},
		{Address: netip.MustParseAddr("fd00::1"), ASN: 65001, Port: 1179, HoldTime: 30 * time.Second},
	}
	if !slices.Equal(got, want) {
		t.Errorf("got %+v\nwant %+v", got, want)
	}
	if Neighbors(nil) != nil {
		t.Error("nil section")
	}
}

// TestNoListener: the speaker only dials; with a neighbor configured and
// being dialed, the process has no listening TCP socket (this test starts
// no router).
func TestNoListener(t *testing.T) {
	s, logs := newSpeaker(t)
	nb := Neighbor{Address: netip.MustParseAddr("127.0.0.5"), ASN: peerASN, Port: freePort(t, netip.MustParseAddr("127.0.0.5"))}
	if err := s.SetNeighbors([]Neighbor{nb}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "a dial", func() (bool, string) {
		n := logs.FilterMessage("failed to connect").Len()
		return n >= 1, fmt.Sprintf("%d attempts", n)
	})
	if n := listeningSockets(t); n != 0 {
		t.Errorf("the process has %d listening TCP sockets", n)
	}
	// The check sees a listener (a plain TCP one: this test binary turns
	// MPTCP listeners off, see peer_test.go).
	l, err := net.Listen("tcp", "127.0.0.5:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if n := listeningSockets(t); n != 1 {
		t.Errorf("with one listener open, counted %d", n)
	}
}

// listeningSockets counts this process's TCP sockets in state LISTEN, from
// /proc.
func listeningSockets(t *testing.T) int {
	listen := map[string]bool{} // socket inodes in LISTEN
	for _, f := range []string{"/proc/self/net/tcp", "/proc/self/net/tcp6"} {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Skipf("no %s: %v", f, err)
		}
		for _, line := range strings.Split(string(data), "\n")[1:] {
			fs := strings.Fields(line)
			if len(fs) > 9 && fs[3] == "0A" {
				listen[fs[9]] = true
			}
		}
	}
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip(err)
	}
	n := 0
	for _, fd := range fds {
		link, err := os.Readlink("/proc/self/fd/" + fd.Name())
		if err != nil {
			continue
		}
		if ino, ok := strings.CutPrefix(link, "socket:["); ok && listen[strings.TrimSuffix(ino, "]")] {
			n++
		}
	}
	return n
}

// TestMD5Hint: a connect that timed out on a session with a TCP MD5
// password says a mismatch may be why (the neighbor's kernel drops such
// segments silently); without a password, or for another failure, the
// reason stays as it was.
func TestMD5Hint(t *testing.T) {
	const timeout = "connect: dial tcp: i/o timeout"
	if got := md5Hint(timeout, true); !strings.Contains(got, "MD5 password mismatch") || !strings.HasPrefix(got, timeout) {
		t.Errorf("with a password: %q", got)
	}
	for _, tc := range []struct {
		reason string
		md5    bool
	}{{timeout, false}, {"connect: connection refused", true}, {"hold timer expired", true}} {
		if got := md5Hint(tc.reason, tc.md5); got != tc.reason {
			t.Errorf("md5Hint(%q, %v) = %q, want it unchanged", tc.reason, tc.md5, got)
		}
	}
}

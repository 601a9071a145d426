// The routers of these tests are GoBGP servers that listen; since Go 1.24 a
// listener is MPTCP by default, and an MPTCP socket takes neither TCP MD5
// ("protocol not available") nor IP_TTL. The speaker only dials (plain TCP).
//go:debug multipathtcp=0

package bgp

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	api "github.com/osrg/gobgp/v3/api"
	"github.com/osrg/gobgp/v3/pkg/apiutil"
	"github.com/osrg/gobgp/v3/pkg/packet/bgp"
	"github.com/osrg/gobgp/v3/pkg/server"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// The tests peer the Speaker with plain GoBGP servers in the same process,
// over loopback: each peer listens on its own 127.0.0.x address and a free
// port and waits (passive) for the speaker, which dials from 127.0.0.1.
// Nothing asserts on the wall clock: conditions are polled until true, with
// a generous limit, so that a loaded machine and -race only make them slower.

const (
	speakerASN = 65010
	peerASN    = 65000
	// patience bounds every wait; a session comes up in about 1–2 s, a
	// refused one is retried about every 7 s.
	patience = 45 * time.Second
)

// eventually polls cond until it holds, failing the test after patience
// with cond's last account of what it saw.
func eventually(tb testing.TB, what string, cond func() (bool, string)) {
	tb.Helper()
	deadline := time.Now().Add(patience)
	for {
		ok, saw := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("%s: not within %v; last saw: %s", what, patience, saw)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// testPeer is a GoBGP server standing for a router.
type testPeer struct {
	srv  *server.BgpServer
	addr netip.Addr
	port uint16

	mu      sync.Mutex
	updates []seenPath // every path the speaker sent, in order
}

// seenPath is one path as a peer received it.
type seenPath struct {
	prefix      string
	nextHop     string
	communities []uint32
	withdraw    bool
}

func (p seenPath) String() string {
	verb := "announce"
	if p.withdraw {
		verb = "withdraw"
	}
	return fmt.Sprintf("%s %s via %s %v", verb, p.prefix, p.nextHop, p.communities)
}

type peerOpts struct {
	asn        uint32 // the peer's own AS; default peerASN
	speakerASN uint32 // what the peer expects of the speaker; default speakerASN
	password   string
	// watch records every update the peer receives (seen). Only for
	// sessions set up once: GoBGP v3.37.0's table watch reads a path's
	// source (PeerInfo) without the lock that the FSM holds when it
	// rewrites it for a new session, a data race -race reports.
	watch bool
}

// freePort finds a port free on addr (a race with other processes is
// possible but unlikely).
func freePort(tb testing.TB, addr netip.Addr) uint16 {
	tb.Helper()
	l, err := net.Listen("tcp", netip.AddrPortFrom(addr, 0).String())
	if err != nil {
		tb.Skipf("cannot listen on %s: %v", addr, err)
	}
	defer l.Close()
	return uint16(l.Addr().(*net.TCPAddr).Port)
}

// newPeer starts a router on addr (127.0.0.x or ::1) that accepts the
// speaker from its source address src.
func newPeer(tb testing.TB, addr, src string, o peerOpts) *testPeer {
	tb.Helper()
	if o.asn == 0 {
		o.asn = peerASN
	}
	if o.speakerASN == 0 {
		o.speakerASN = speakerASN
	}
	p := &testPeer{addr: netip.MustParseAddr(addr)}
	p.port = freePort(tb, p.addr)
	p.srv = server.NewBgpServer(server.LoggerOption(&gobgpLogger{z: peerLog, hook: func(netip.Addr, string) {}}))
	go p.srv.Serve()
	ctx := context.Background()
	rid := "10.255.0.1"
	if p.addr.Is4() {
		rid = addr
	}
	if err := p.srv.StartBgp(ctx, &api.StartBgpRequest{Global: &api.Global{
		Asn: o.asn, RouterId: rid, ListenPort: int32(p.port), ListenAddresses: []string{addr},
	}}); err != nil {
		tb.Fatalf("peer %s: %v", addr, err)
	}
	tb.Cleanup(p.srv.Stop)
	if o.watch {
		p.watch(tb)
	}
	if err := p.srv.AddPeer(ctx, &api.AddPeerRequest{Peer: &api.Peer{
		Conf:      &api.PeerConf{NeighborAddress: src, PeerAsn: o.speakerASN, AuthPassword: o.password},
		Transport: &api.Transport{PassiveMode: true},
		AfiSafis: []*api.AfiSafi{
			{Config: &api.AfiSafiConfig{Family: familyV4, Enabled: true}},
			{Config: &api.AfiSafiConfig{Family: familyV6, Enabled: true}},
		},
	}}); err != nil {
		if o.password != "" {
			tb.Skipf("TCP MD5 not available here: %v", err)
		}
		tb.Fatalf("peer %s: adding the speaker: %v", addr, err)
	}
	return p
}

// watch records every path the peer receives.
func (p *testPeer) watch(tb testing.TB) {
	tb.Helper()
	err := p.srv.WatchEvent(context.Background(), &api.WatchEventRequest{Table: &api.WatchEventRequest_Table{
		Filters: []*api.WatchEventRequest_Table_Filter{{Type: api.WatchEventRequest_Table_Filter_ADJIN}},
	}}, func(r *api.WatchEventResponse) {
		for _, path := range r.GetTable().GetPaths() {
			sp := decodePath(tb, path)
			p.mu.Lock()
			p.updates = append(p.updates, sp)
			p.mu.Unlock()
		}
	})
	if err != nil {
		tb.Fatal(err)
	}
}

// neighbor is how the speaker configures p.
func (p *testPeer) neighbor() Neighbor {
	return Neighbor{Address: p.addr, ASN: peerASN, Port: p.port}
}

// decodePath turns a path of GoBGP's API into what the tests compare.
func decodePath(tb testing.TB, path *api.Path) seenPath {
	nlri, err := apiutil.GetNativeNlri(path)
	if err != nil {
		tb.Errorf("decoding a path: %v", err)
		return seenPath{}
	}
	sp := seenPath{prefix: nlri.String(), withdraw: path.IsWithdraw}
	attrs, err := apiutil.GetNativePathAttributes(path)
	if err != nil {
		tb.Errorf("decoding attributes: %v", err)
	}
	for _, a := range attrs {
		switch a := a.(type) {
		case *bgp.PathAttributeNextHop:
			sp.nextHop = a.Value.String()
		case *bgp.PathAttributeMpReachNLRI:
			sp.nextHop = a.Nexthop.String()
		case *bgp.PathAttributeCommunities:
			sp.communities = a.Value
		}
	}
	return sp
}

// routes lists the peer's table: prefix → the path.
func (p *testPeer) routes(tb testing.TB) map[string]seenPath {
	out := map[string]seenPath{}
	for _, fam := range []*api.Family{familyV4, familyV6} {
		err := p.srv.ListPath(context.Background(), &api.ListPathRequest{TableType: api.TableType_GLOBAL, Family: fam},
			func(d *api.Destination) {
				for _, path := range d.Paths {
					sp := decodePath(tb, path)
					out[sp.prefix] = sp
				}
			})
		if err != nil {
			tb.Errorf("listing paths: %v", err)
		}
	}
	return out
}

// seen is a copy of every update received so far.
func (p *testPeer) seen() []seenPath {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.updates)
}

// opensReceived counts the OPEN messages the peer received from the
// speaker: one per attempt to set up the session.
func (p *testPeer) opensReceived(tb testing.TB) uint64 {
	var n uint64
	err := p.srv.ListPeer(context.Background(), &api.ListPeerRequest{}, func(pe *api.Peer) {
		if m := pe.GetState().GetMessages().GetReceived(); m != nil {
			n += m.Open
		}
	})
	if err != nil {
		tb.Error(err)
	}
	return n
}

// waitRoutes waits until the peer's table is exactly want (prefix → next
// hop, followed by the communities when there are any).
func (p *testPeer) waitRoutes(tb testing.TB, want map[string]string) {
	tb.Helper()
	eventually(tb, fmt.Sprintf("routes at %s", p.addr), func() (bool, string) {
		got := map[string]string{}
		for k, v := range p.routes(tb) {
			got[k] = v.nextHop
			if len(v.communities) > 0 {
				got[k] += fmt.Sprint(" ", v.communities)
			}
		}
		return fmt.Sprint(got) == fmt.Sprint(want), fmt.Sprint(got)
	})
}

// newSpeaker starts a speaker whose log the test can read, GoBGP's debug
// lines included.
func newSpeaker(tb testing.TB) (*Speaker, *observer.ObservedLogs) {
	tb.Helper()
	core, logs := observer.New(zap.DebugLevel)
	s, err := New(Config{ASN: speakerASN, RouterID: netip.MustParseAddr("10.0.0.5"), ConnectRetry: time.Second}, zap.New(core))
	if err != nil {
		tb.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(s.Stop)
	return s, logs
}

// neighborStatus finds one neighbor in the speaker's status.
func neighborStatus(s *Speaker, a netip.Addr) (NeighborStatus, bool) {
	for _, n := range s.Status().Neighbors {
		if n.Address == a {
			return n, true
		}
	}
	return NeighborStatus{}, false
}

func waitUp(tb testing.TB, s *Speaker, a netip.Addr) {
	tb.Helper()
	eventually(tb, fmt.Sprintf("session with %s up", a), func() (bool, string) {
		n, ok := neighborStatus(s, a)
		return ok && n.Up && n.State == "established", fmt.Sprintf("%+v", n)
	})
}

// metric reads one sample of the speaker's metrics; labels are name=value.
func metric(tb testing.TB, s *Speaker, name string, labels ...string) (float64, bool) {
	tb.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(s)
	mfs, err := reg.Gather()
	if err != nil {
		tb.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.Metric {
			for _, l := range labels {
				k, v, _ := strings.Cut(l, "=")
				found := false
				for _, lp := range m.Label {
					found = found || lp.GetName() == k && lp.GetValue() == v
				}
				if !found {
					continue next
				}
			}
			if m.Gauge != nil {
				return m.Gauge.GetValue(), true
			}
			return m.Counter.GetValue(), true
		}
	}
	return 0, false
}

func want4(vip, nh string) map[netip.Addr]VIP {
	return map[netip.Addr]VIP{netip.MustParseAddr(vip): {Announce: true, NextHop: netip.MustParseAddr(nh)}}
}

// countLogs counts the log lines msg about neighbor.
func countLogs(logs *observer.ObservedLogs, msg, neighbor string) int {
	return logs.FilterMessage(msg).Filter(func(e observer.LoggedEntry) bool {
		return e.ContextMap()["neighbor"] == neighbor
	}).Len()
}

var peerLog = func() *zap.Logger {
	l, _ := zap.NewDevelopment(zap.AddStacktrace(zap.FatalLevel))
	return l.WithOptions(zap.IncreaseLevel(zap.ErrorLevel))
}()

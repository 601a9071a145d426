package flowsync

import (
	"context"
	"math"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"xlb/config"
	"xlb/conntrack"
	"xlb/dataplane"
)

type fakeRing struct {
	mu    sync.Mutex
	q     []dataplane.SyncRecord
	size  int
	drops atomic.Uint64
}

func (r *fakeRing) Push(rec *dataplane.SyncRecord) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.q) >= r.size {
		r.drops.Add(1)
		return false
	}
	r.q = append(r.q, *rec)
	return true
}

func (r *fakeRing) Pop(dst []dataplane.SyncRecord) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := copy(dst, r.q)
	r.q = r.q[n:]
	return n
}

func (r *fakeRing) Drops() uint64 { return r.drops.Load() }

func (r *fakeRing) len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.q)
}

// testTable is a table the tests can fill and read.
type testTable interface {
	table
	put(k conntrack.Key, v conntrack.Value, last int64)
	get(k conntrack.Key) (conntrack.Entry, bool)
	len() int
	mergeCount() int64
}

// realTable is a *conntrack.Table for the tests, merges counted.
type realTable struct {
	*conntrack.Table
	merges atomic.Int64
}

func (t *realTable) Merge(k *conntrack.Key, v conntrack.Value, lastUse, now int64) conntrack.MergeResult {
	t.merges.Add(1)
	return t.Table.Merge(k, v, lastUse, now)
}

func (t *realTable) put(k conntrack.Key, v conntrack.Value, last int64) { t.Upsert(&k, v, last) }

// get reads an entry whatever its age (a clock far in the past).
func (t *realTable) get(k conntrack.Key) (conntrack.Entry, bool) {
	return t.Lookup(&k, math.MinInt64/2)
}
func (t *realTable) len() int          { return t.Len() }
func (t *realTable) mergeCount() int64 { return t.merges.Load() }

func newTestTable(t testing.TB, capacity int) testTable {
	tb, err := conntrack.New(max(capacity, conntrack.MinCapacity))
	if err != nil {
		t.Fatal(err)
	}
	return &realTable{Table: tb}
}

type fakeEngine struct {
	snap atomic.Pointer[dataplane.Snapshot]
	tbl  testTable
	rg   []*fakeRing
}

func (e *fakeEngine) Load() *dataplane.Snapshot { return e.snap.Load() }
func (e *fakeEngine) table() table              { return e.tbl }
func (e *fakeEngine) rings(dst []ring) []ring {
	dst = dst[:0]
	for _, r := range e.rg {
		dst = append(dst, r)
	}
	return dst
}

// A fleet of two services as every instance configures them; each
// instance may give them other local IDs and its backends other slots.
var (
	svcWeb = "web"
	svcDNS = "dns"
	webIPs = []netip.Addr{netip.MustParseAddr("10.1.0.1"), netip.MustParseAddr("10.1.0.2"), netip.MustParseAddr("fd00::3")}
	dnsIPs = []netip.Addr{netip.MustParseAddr("10.2.0.1")}
)

// testSnapshot builds a snapshot with service IDs webID and dnsID and the
// backends in slots from slot0 on (generation gen).
func testSnapshot(webID, dnsID uint16, slot0, gen uint32, idleSec uint32) *dataplane.Snapshot {
	s := &dataplane.Snapshot{Services: make([]*dataplane.Service, max(webID, dnsID)+1)}
	s.Services[webID] = &dataplane.Service{ID: webID, Name: svcWeb, IdleSec: idleSec}
	s.Services[dnsID] = &dataplane.Service{ID: dnsID, Name: svcDNS, IdleSec: idleSec}
	s.Backends = make([]*dataplane.Backend, slot0)
	add := func(svc uint16, name string, ip netip.Addr) {
		slot := uint32(len(s.Backends))
		s.Backends = append(s.Backends, &dataplane.Backend{Ref: dataplane.MakeRef(slot, gen), IP: ip, Service: svc,
			FleetID: dataplane.FleetID(name, ip)})
	}
	for _, ip := range webIPs {
		add(webID, svcWeb, ip)
	}
	for _, ip := range dnsIPs {
		add(dnsID, svcDNS, ip)
	}
	return s
}

// backendOf is the local ref of a fleet backend in snap.
func backendOf(t testing.TB, snap *dataplane.Snapshot, service string, ip netip.Addr) *dataplane.Backend {
	t.Helper()
	for _, b := range snap.Backends {
		if b != nil && b.FleetID == dataplane.FleetID(service, ip) {
			return b
		}
	}
	t.Fatalf("no backend %s %s", service, ip)
	return nil
}

var (
	keyA = [32]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	keyB = [32]byte{31: 0xbb}
	keyC = [32]byte{31: 0xcc}
)

func testConfig(keys ...[32]byte) *config.FlowSync {
	return &config.FlowSync{Listen: netip.MustParseAddrPort("127.0.0.1:0"), Keys: keys,
		PullOnStart: true, PullTimeout: 10 * time.Second, MaxRecordsPerSec: 100_000}
}

// testClock is a workers' clock the test moves.
type testClock struct{ ms atomic.Int64 }

func (c *testClock) now() int64 { return c.ms.Load() }

type node struct {
	s   *Syncer
	eng *fakeEngine
	clk *testClock
}

// newNode is a Syncer on 127.0.0.1 over a fake engine with snap and one
// ring; its workers' clock starts at 1,000,000 ms.
func newNode(t testing.TB, snap *dataplane.Snapshot, capacity int, keys ...[32]byte) *node {
	t.Helper()
	eng := &fakeEngine{tbl: newTestTable(t, capacity), rg: []*fakeRing{{size: 1 << 16}}}
	eng.snap.Store(snap)
	clk := &testClock{}
	clk.ms.Store(1_000_000)
	s, err := newSyncer(Options{Config: testConfig(keys...), Now: clk.now}, eng)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return &node{s, eng, clk}
}

// peerWith makes n's peers ps (by their listen addresses).
func (n *node) peerWith(ps ...*node) {
	c := testConfig(n.s.state.Load().keys.keys...)
	for _, p := range ps {
		c.Peers = append(c.Peers, p.s.addr())
	}
	n.s.Reconfigure(c)
}

// run runs n's Syncer until the test ends.
func (n *node) run(t testing.TB) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { n.s.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
}

// eventually waits (generously) for cond: a condition, not a timing.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(20 * time.Second); time.Now().Before(end); time.Sleep(2 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("never: %s", what)
}

func key5(src, dst string, sport, dport uint16, svc uint16) conntrack.Key {
	return conntrack.Key{Src: dataplane.Addr16(netip.MustParseAddr(src)), Dst: dataplane.Addr16(netip.MustParseAddr(dst)),
		SrcPort: sport, DstPort: dport, Proto: 6, Kind: conntrack.Kind5T, Service: svc}
}

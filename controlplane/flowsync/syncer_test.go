package flowsync

import (
	"errors"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"xlb/conntrack"
	"xlb/dataplane"
)

// refusals snapshots the refused counters.
func refusals(s *Syncer) (out [numReasons]uint64) {
	for i := range out {
		out[i] = s.m.refused[i].Load()
	}
	return out
}

func knownRecord(t testing.TB, snap *dataplane.Snapshot) Record {
	return Record{Key: key5("192.0.2.1", "203.0.113.10", 40000, 443, 0),
		FleetID: backendOf(t, snap, svcWeb, webIPs[0]).FleetID, AgeMs: 100}
}

// TestReceive_Refused: every kind of bad datagram is refused for its
// reason, counted once, and nothing it carries reaches the table.
func TestReceive_Refused(t *testing.T) {
	snap := testSnapshot(1, 2, 0, 1, 300)
	a := newNode(t, snap, 1024, keyA)
	b := newNode(t, snap, 1024, keyA)
	b.peerWith(a)
	wall := time.Now().UnixMilli()
	b.s.wall = func() int64 { return wall }
	akeys := a.s.state.Load().keys
	recs := []Record{knownRecord(t, snap)}
	seal := func(seq uint64, w int64) []byte { return sealRecords(akeys, a.s.id, seq, w, recs) }
	from := a.s.addr()

	// A datagram that authenticates, then is replayed: later cases start
	// from a window whose top is 2000.
	if r := b.s.receive(seal(2000, wall), from); r != reasonNone {
		t.Fatalf("a good datagram: %v", r)
	}
	if b.eng.tbl.mergeCount() != 1 {
		t.Fatal("a good datagram was not applied")
	}

	otherKey, _ := newKeyring([][32]byte{keyC}, a.s.id)
	forgedID := sealRecords(otherKey, a.s.id, 2001, wall, recs)
	copy(forgedID[8:12], akeys.ids[0][:])
	flip := func(i int) []byte {
		m := seal(2002, wall)
		m[i] ^= 0x40
		return m
	}
	withByte := func(i int, v byte) []byte {
		m := seal(2003, wall)
		m[i] = v
		return m
	}
	badBody := func() []byte {
		e := newEncoder(maxPayload)
		e.putBody([]byte{0xff, 1, 2, 3})
		h := header{kind: kindRecords, keyID: akeys.sealID(), sender: a.s.id, seq: 2004, wall: wall}
		return e.seal(akeys.seal, &h, nil)
	}
	good := seal(2005, wall)
	cases := []struct {
		name string
		msg  []byte
		from netip.AddrPort
		want reason
	}{
		{"wrong key", sealRecords(otherKey, a.s.id, 2001, wall, recs), from, reasonKey},
		{"another key under our key's ID", forgedID, from, reasonKey},
		{"flipped body byte", flip(headerLen + 3), from, reasonKey},
		{"flipped tag byte", flip(len(good) - 1), from, reasonKey},
		{"flipped header byte (sender clock)", flip(30), from, reasonKey},
		{"flipped sequence number", flip(27), from, reasonKey},
		{"truncated by one byte", good[:len(good)-1], from, reasonKey},
		{"truncated header", good[:20], from, reasonMalformed},
		{"empty", nil, from, reasonMalformed},
		{"bad magic", withByte(0, 'Y'), from, reasonMalformed},
		{"unknown version", withByte(4, 2), from, reasonVersion},
		{"unknown kind", withByte(5, 9), from, reasonMalformed},
		{"ill-formed body that authenticates", badBody(), from, reasonMalformed},
		{"replayed", seal(2000, wall), from, reasonRepeat},
		{"below the window", seal(2000-windowSize, wall), from, reasonStale},
		{"sender clock 31 s behind", seal(2006, wall-31_000), from, reasonStale},
		{"sender clock 31 s ahead", seal(2007, wall+31_000), from, reasonStale},
		{"not from a peer", seal(2008, wall), netip.MustParseAddrPort("127.0.0.1:1"), reasonPeer},
		{"a peer's address, another port", seal(2009, wall), netip.AddrPortFrom(from.Addr(), from.Port()+1), reasonPeer},
		{"oversized", append(seal(2010, wall), make([]byte, maxPayload)...), from, reasonMalformed},
	}
	for _, c := range cases {
		before := refusals(b.s)
		if got := b.s.receive(c.msg, c.from); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
		after := refusals(b.s)
		for r := range after {
			if d := after[r] - before[r]; (reason(r) == c.want) != (d == 1) || d > 1 {
				t.Errorf("%s: %v counted %d times", c.name, reason(r), d)
			}
		}
	}
	if n := b.eng.tbl.mergeCount(); n != 1 {
		t.Errorf("%d records of refused datagrams applied", n-1)
	}
	// The window still takes what is new.
	if r := b.s.receive(seal(2011, wall), from); r != reasonNone {
		t.Errorf("after the refusals: %v", r)
	}
}

// TestReceive_KeyRollover: a sender that moved to the new key is heard by
// a receiver holding both, and refused (key) by one with the old only.
func TestReceive_KeyRollover(t *testing.T) {
	snap := testSnapshot(1, 2, 0, 1, 300)
	a := newNode(t, snap, 1024, keyB, keyA) // rolled: seals with B
	both := newNode(t, snap, 1024, keyA, keyB)
	old := newNode(t, snap, 1024, keyA)
	both.peerWith(a)
	old.peerWith(a)
	recs := []Record{knownRecord(t, snap)}
	msg := sealRecords(a.s.state.Load().keys, a.s.id, 1, time.Now().UnixMilli(), recs)
	if r := both.s.receive(append([]byte(nil), msg...), a.s.addr()); r != reasonNone {
		t.Errorf("receiver with A,B: %v", r)
	}
	if both.eng.tbl.len() != 1 {
		t.Error("receiver with A,B stored nothing")
	}
	if r := old.s.receive(append([]byte(nil), msg...), a.s.addr()); r != reasonKey {
		t.Errorf("receiver with A only: %v, want key", r)
	}
	if old.eng.tbl.mergeCount() != 0 {
		t.Error("receiver with A only applied a record")
	}
	// A sender still on A is heard by both as well.
	a2 := newNode(t, snap, 1024, keyA, keyB)
	both.peerWith(a2)
	msg = sealRecords(a2.s.state.Load().keys, a2.s.id, 1, time.Now().UnixMilli(), recs)
	if r := both.s.receive(msg, a2.s.addr()); r != reasonNone {
		t.Errorf("sender on A, receiver with A,B: %v", r)
	}
}

// TestReceive_Translation: records name backends by fleet ID; the
// receiver stores them under its own service ID and backend ref, and
// counts and drops a backend it does not know.
func TestReceive_Translation(t *testing.T) {
	sa := testSnapshot(1, 2, 0, 1, 300)
	sb := testSnapshot(7, 3, 5, 2, 120) // other IDs, other slots
	a := newNode(t, sa, 1024, keyA)
	b := newNode(t, sb, 1024, keyA)
	b.peerWith(a)
	k1 := key5("192.0.2.1", "203.0.113.10", 40000, 443, 1)
	k2 := key5("2001:db8::1", "2001:db8::10", 40001, 53, 2)
	recs := []Record{
		{Key: k1, FleetID: backendOf(t, sa, svcWeb, webIPs[1]).FleetID, Side: 1, AgeMs: 250},
		{Key: k2, FleetID: backendOf(t, sa, svcDNS, dnsIPs[0]).FleetID, AgeMs: 10},
		{Key: k1, FleetID: dataplane.FleetID("nosuch", webIPs[0])},
	}
	if r := b.s.receive(sealRecords(a.s.state.Load().keys, a.s.id, 1, time.Now().UnixMilli(), recs), a.s.addr()); r != reasonNone {
		t.Fatal(r)
	}
	now := b.clk.now()
	for _, c := range []struct {
		k    conntrack.Key
		svc  uint16
		b    *dataplane.Backend
		side uint8
		age  int64
	}{
		{k1, 7, backendOf(t, sb, svcWeb, webIPs[1]), 1, 250},
		{k2, 3, backendOf(t, sb, svcDNS, dnsIPs[0]), 0, 10},
	} {
		k := c.k
		k.Service = c.svc
		e, ok := b.eng.tbl.get(k)
		want := conntrack.Value{Backend: uint32(c.b.Ref), Side: c.side, IdleSec: 120, Peer: true}
		if !ok || e.Value != want || e.LastUse != now-c.age {
			t.Errorf("%v: got %+v (%v), want %+v last use %d", k, e, ok, want, now-c.age)
		}
	}
	if b.eng.tbl.len() != 2 || b.s.m.refused[reasonUnknownBackend].Load() != 1 || b.s.m.stored.Load() != 2 {
		t.Errorf("%d entries, %d unknown, %d stored", b.eng.tbl.len(), b.s.m.refused[reasonUnknownBackend].Load(), b.s.m.stored.Load())
	}
	// A reload that gives the backend another slot: the map follows the
	// snapshot.
	sb2 := testSnapshot(9, 4, 50, 3, 120)
	b.eng.snap.Store(sb2)
	recs = recs[:1]
	if r := b.s.receive(sealRecords(a.s.state.Load().keys, a.s.id, 2, time.Now().UnixMilli(), recs), a.s.addr()); r != reasonNone {
		t.Fatal(r)
	}
	k := k1
	k.Service = 9
	if e, ok := b.eng.tbl.get(k); !ok || e.Backend != uint32(backendOf(t, sb2, svcWeb, webIPs[1]).Ref) {
		t.Errorf("after a reload: %+v %v", e, ok)
	}
}

// sniffer is a bare UDP peer that decodes what it is sent.
type sniffer struct {
	c  *net.UDPConn
	kr *keyring
}

func newSniffer(t *testing.T, keys ...[32]byte) *sniffer {
	c, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.MustParseAddrPort("127.0.0.1:0")))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	kr, _ := newKeyring(keys, 1)
	return &sniffer{c, kr}
}

func (sn *sniffer) addr() netip.AddrPort { return sn.c.LocalAddr().(*net.UDPAddr).AddrPort() }

// read returns what was sent so far: datagrams and their records.
// Loopback delivers a datagram before the send returns.
func (sn *sniffer) read(t *testing.T) (datagrams int, recs []Record) {
	t.Helper()
	buf := make([]byte, 2048)
	for {
		sn.c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
		n, err := sn.c.Read(buf)
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				return datagrams, recs
			}
			t.Fatal(err)
		}
		h, r := parseHeader(buf[:n])
		if r != reasonNone {
			t.Fatalf("sent a datagram that does not parse: %v", r)
		}
		var sc scratch
		body, ok := sn.kr.open(&sc, &h, buf[:n], nil)
		if !ok {
			t.Fatal("sent a datagram that does not open")
		}
		got, ok := decodeRecords(body, make([]Record, 0, maxRecordsPerDatagram))
		if !ok {
			t.Fatal("sent a malformed body")
		}
		datagrams++
		recs = append(recs, got...)
	}
}

// stepNode drives n's sync goroutine by hand, without Run, against sniffer
// peers, on clocks the test moves.
func stepNode(t *testing.T, snap *dataplane.Snapshot, rate int, sn ...*sniffer) (*node, *int64) {
	n := newNode(t, snap, 1024, keyA)
	c := testConfig(keyA)
	c.MaxRecordsPerSec = rate
	for _, s := range sn {
		c.Peers = append(c.Peers, s.addr())
	}
	n.s.Reconfigure(c)
	wall := new(int64)
	*wall = 1_700_000_000_000
	n.s.wall = func() int64 { return *wall }
	n.s.tokens = float64(burst(rate))
	n.s.filled = n.clk.now()
	return n, wall
}

func TestSend_RingsAndHeartbeat(t *testing.T) {
	snap := testSnapshot(1, 2, 0, 1, 300)
	sn1, sn2 := newSniffer(t, keyA), newSniffer(t, keyA)
	n, wall := stepNode(t, snap, 100_000, sn1, sn2)
	// Nothing to send: a heartbeat, then none until a second passed.
	n.s.sendTick()
	if d, r := sn1.read(t); d != 1 || len(r) != 0 {
		t.Fatalf("first tick: %d datagrams, %d records", d, len(r))
	}
	*wall += 999
	n.s.sendTick()
	if d, _ := sn1.read(t); d != 0 {
		t.Fatalf("a heartbeat within the second")
	}
	*wall++
	n.s.sendTick()
	if d, _ := sn1.read(t); d != 1 {
		t.Fatalf("no heartbeat after a second")
	}
	if d, _ := sn2.read(t); d != 2 {
		t.Fatalf("the other peer had %d heartbeats", d)
	}
	// Ring records go to every peer, translated to fleet IDs, with their
	// age; a record whose backend left the snapshot is not sent.
	b := backendOf(t, snap, svcWeb, webIPs[2])
	rg := n.eng.rg[0]
	for i := range 100 {
		rg.Push(&dataplane.SyncRecord{Key: key5("192.0.2.1", "203.0.113.10", uint16(i), 443, 1), Backend: b.Ref,
			Side: dataplane.SideFailover, Now: n.clk.now() - 40})
	}
	rg.Push(&dataplane.SyncRecord{Key: key5("192.0.2.1", "203.0.113.10", 9, 9, 1), Backend: dataplane.MakeRef(77, 1)})
	n.s.sendTick()
	for _, sn := range []*sniffer{sn1, sn2} {
		d, recs := sn.read(t)
		if d != 3 || len(recs) != 100 { // 49 IPv4 5T records a datagram
			t.Fatalf("%d datagrams, %d records", d, len(recs))
		}
		for i, r := range recs {
			if r.FleetID != b.FleetID || r.Side != 1 || r.AgeMs != 40 || r.Key.SrcPort != uint16(i) || r.Key.Service != 0 {
				t.Fatalf("record %d: %+v", i, r)
			}
		}
	}
	if n.s.m.sentRing.Load() != 100 || n.s.m.unresolved.Load() != 1 {
		t.Errorf("sent %d, unresolved %d", n.s.m.sentRing.Load(), n.s.m.unresolved.Load())
	}
	st := n.s.Status()
	if len(st.Peers) != 2 || st.Peers[0].RecordsOut != 100 || st.Peers[1].RecordsOut != 100 || st.Peers[0].Up {
		t.Errorf("status %+v", st)
	}
}

// TestSend_RateBound: the records sent in a second stay within the bound
// (plus the bucket's depth); ring records go first, the rest wait in the
// ring, and the refresh walk gets nothing while they wait.
func TestSend_RateBound(t *testing.T) {
	snap := testSnapshot(1, 2, 0, 1, 300)
	sn := newSniffer(t, keyA)
	const rate = 1000
	n, wall := stepNode(t, snap, rate, sn)
	b := backendOf(t, snap, svcWeb, webIPs[0])
	for i := range 200 {
		n.eng.tbl.put(key5("192.0.2.9", "203.0.113.10", uint16(i), 80, 1), conntrack.Value{Backend: uint32(b.Ref), IdleSec: 300}, n.clk.now())
	}
	rg := n.eng.rg[0]
	for i := range 5000 {
		rg.Push(&dataplane.SyncRecord{Key: key5("192.0.2.1", "203.0.113.10", uint16(i), 443, 1), Backend: b.Ref, Now: n.clk.now()})
	}
	for range 100 { // one second in 10 ms ticks
		n.clk.ms.Add(10)
		*wall += 10
		n.s.sendTick()
	}
	sent := n.s.m.sentRing.Load()
	_, recs := sn.read(t)
	if sent > rate+uint64(burst(rate)) || sent < rate || uint64(len(recs)) != sent {
		t.Errorf("sent %d in a second at %d/s (burst %d), peer got %d", sent, rate, burst(rate), len(recs))
	}
	if rg.len() != 5000-int(sent) {
		t.Errorf("%d left in the ring, want %d", rg.len(), 5000-int(sent))
	}
	if n.s.m.sentRefresh.Load() != 0 {
		t.Errorf("the refresh walk sent %d while ring records waited", n.s.m.sentRefresh.Load())
	}
}

// TestSend_RefreshWalk: a pass sends the live, established, own entries
// used since the previous pass began, and nothing else.
func TestSend_RefreshWalk(t *testing.T) {
	snap := testSnapshot(1, 2, 0, 1, 30) // idle 30 s: a pass every 10 s
	sn := newSniffer(t, keyA)
	n, wall := stepNode(t, snap, 100_000, sn)
	b := backendOf(t, snap, svcWeb, webIPs[0])
	now := n.clk.now()
	own := key5("192.0.2.1", "203.0.113.10", 1, 80, 1)
	tb := n.eng.tbl
	tb.put(own, conntrack.Value{Backend: uint32(b.Ref), IdleSec: 30}, now-1000)
	tb.put(key5("192.0.2.2", "203.0.113.10", 2, 80, 1), conntrack.Value{Backend: uint32(b.Ref), IdleSec: 30, HalfOpen: true}, now)
	tb.put(key5("192.0.2.3", "203.0.113.10", 3, 80, 1), conntrack.Value{Backend: uint32(b.Ref), IdleSec: 30, Peer: true}, now)
	tb.put(key5("192.0.2.4", "203.0.113.10", 4, 80, 1), conntrack.Value{Backend: uint32(dataplane.MakeRef(99, 1)), IdleSec: 30}, now)
	tick := func(ms int64) []Record {
		for ; ms > 0; ms -= 100 {
			n.clk.ms.Add(100)
			*wall += 100
			n.s.sendTick()
		}
		_, all := sn.read(t)
		return all
	}
	// Pass 1 (the first 10 s): everything live, established and own.
	first := tick(10_000)
	if len(first) != 1 || first[0].Key.SrcPort != 1 || first[0].AgeMs < 1000 || first[0].FleetID != b.FleetID {
		t.Fatalf("first pass sent %+v", first)
	}
	// Idle since: not sent again by the next pass.
	if again := tick(10_000); len(again) != 0 {
		t.Fatalf("an idle entry sent again: %+v", again)
	}
	if n.s.m.periodMs.Load() != 10_000 || n.s.m.passBehind.Load() != 0 || n.s.m.passMs.Load() != 10_000 {
		t.Errorf("period %d ms, last pass %d ms, %d behind", n.s.m.periodMs.Load(), n.s.m.passMs.Load(), n.s.m.passBehind.Load())
	}
	// Used again: sent by the pass under way or the next (both, where
	// the use fell after the pass under way began).
	tb.put(own, conntrack.Value{Backend: uint32(b.Ref), IdleSec: 30}, n.clk.now())
	again := tick(21_000)
	if len(again) < 1 || len(again) > 2 || again[0].Key.SrcPort != 1 {
		t.Fatalf("a used entry refreshed as %+v", again)
	}
	if tail := tick(20_000); len(tail) != 0 {
		t.Fatalf("idle again, still sent: %+v", tail)
	}
	if n.s.m.sentRefresh.Load() != uint64(1+len(again)) {
		t.Errorf("%d refreshes sent", n.s.m.sentRefresh.Load())
	}
}

func TestRefreshPeriod(t *testing.T) {
	for _, c := range []struct {
		idle uint32
		want int64
	}{{1, 1000}, {3, 1000}, {30, 10_000}, {120, 40_000}, {300, 60_000}, {86400, 60_000}} {
		if got := refreshPeriod(testSnapshot(1, 2, 0, 1, c.idle)); got != c.want {
			t.Errorf("idle %d s: %d ms, want %d", c.idle, got, c.want)
		}
	}
}

// TestSync_Loopback: two Syncers over loopback sockets: a record is
// stored where the receiver has nothing, refreshes its entry for the same
// backend, and leaves its entry for another backend (a conflict).
func TestSync_Loopback(t *testing.T) {
	sa := testSnapshot(1, 2, 0, 1, 300)
	sb := testSnapshot(7, 3, 5, 2, 300)
	a := newNode(t, sa, 1024, keyA)
	b := newNode(t, sb, 1024, keyA)
	a.peerWith(b)
	b.peerWith(a)
	a.run(t)
	b.run(t)
	eventually(t, "peers up", func() bool {
		return a.s.Status().Peers[0].Up && b.s.Status().Peers[0].Up
	})

	web0a := backendOf(t, sa, svcWeb, webIPs[0])
	web0b, web1b := backendOf(t, sb, svcWeb, webIPs[0]), backendOf(t, sb, svcWeb, webIPs[1])
	absent := key5("192.0.2.1", "203.0.113.10", 1, 443, 1)
	same := key5("192.0.2.2", "203.0.113.10", 2, 443, 1)
	other := key5("192.0.2.3", "203.0.113.10", 3, 443, 1)
	onB := func(k conntrack.Key) conntrack.Key { k.Service = 7; return k }
	bnow := b.clk.now()
	b.eng.tbl.put(onB(same), conntrack.Value{Backend: uint32(web0b.Ref), IdleSec: 300}, bnow-5000)
	b.eng.tbl.put(onB(other), conntrack.Value{Backend: uint32(web1b.Ref), IdleSec: 300}, bnow-5000)
	for _, k := range []conntrack.Key{absent, same, other} {
		a.eng.rg[0].Push(&dataplane.SyncRecord{Key: k, Backend: web0a.Ref, Now: a.clk.now() - 100})
	}
	eventually(t, "3 records merged", func() bool { return b.eng.tbl.mergeCount() >= 3 })

	if e, ok := b.eng.tbl.get(onB(absent)); !ok || e.Backend != uint32(web0b.Ref) || !e.Peer || e.LastUse != bnow-100 {
		t.Errorf("absent: %+v %v", e, ok)
	}
	if e, _ := b.eng.tbl.get(onB(same)); e.Peer || e.LastUse != bnow-100 {
		t.Errorf("same backend: %+v (want its last use raised)", e)
	}
	if e, _ := b.eng.tbl.get(onB(other)); e.Backend != uint32(web1b.Ref) || e.LastUse != bnow-5000 {
		t.Errorf("other backend: %+v (want it kept)", e)
	}
	m := &b.s.m
	if m.stored.Load() != 1 || m.refreshed.Load() != 1 || m.refused[reasonConflict].Load() != 1 || m.received.Load() != 3 {
		t.Errorf("stored %d refreshed %d conflict %d received %d", m.stored.Load(), m.refreshed.Load(),
			m.refused[reasonConflict].Load(), m.received.Load())
	}
	st := b.s.Status()
	if p := st.Peers[0]; p.Address != a.s.addr() || p.RecordsIn != 3 || p.LastHeard == 0 {
		t.Errorf("status %+v", p)
	}

	// The metrics as a registry gathers them.
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(b.s.Collector()); err != nil {
		t.Fatal(err)
	}
	if n, err := testutil.GatherAndCount(reg, "xlb_flowsync_records_stored_total", "xlb_flowsync_refused_total",
		"xlb_flowsync_lag_seconds", "xlb_flowsync_peers_up"); err != nil || n != 13 {
		t.Errorf("gathered %d series: %v", n, err)
	}
	if v := gathered(t, reg, "xlb_flowsync_peers_up"); v != 1 {
		t.Errorf("peers up %v", v)
	}
	if v := gathered(t, reg, "xlb_flowsync_records_received_total"); v != 3 {
		t.Errorf("records received %v", v)
	}
}

// gathered is the value of an unlabelled gauge or counter.
func gathered(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			m := mf.GetMetric()[0]
			if m.GetCounter() != nil {
				return m.GetCounter().GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	t.Fatalf("no %s", name)
	return 0
}

// TestSync_PeerDown: a peer that does not answer changes nothing: the
// records are sent (and lost), nothing is stored, nothing fails.
func TestSync_PeerDown(t *testing.T) {
	snap := testSnapshot(1, 2, 0, 1, 300)
	a := newNode(t, snap, 1024, keyA)
	dead := newNode(t, snap, 1024, keyA)
	deadAddr := dead.s.addr()
	dead.s.Close()
	c := testConfig(keyA)
	c.Peers = []netip.AddrPort{deadAddr}
	c.PullTimeout = 3 * time.Second
	a.s.Reconfigure(c)
	b := backendOf(t, snap, svcWeb, webIPs[0])
	a.eng.tbl.put(key5("192.0.2.9", "203.0.113.10", 9, 80, 1), conntrack.Value{Backend: uint32(b.Ref), IdleSec: 300}, a.clk.now())
	a.run(t)
	for i := range 10 {
		a.eng.rg[0].Push(&dataplane.SyncRecord{Key: key5("192.0.2.1", "203.0.113.10", uint16(i), 443, 1), Backend: b.Ref, Now: a.clk.now()})
	}
	eventually(t, "records sent", func() bool { return a.s.m.sentRing.Load() == 10 })
	res := a.s.Pull(t.Context())
	if res.Err == nil || res.Records != 0 || res.Peer != "" {
		t.Errorf("pull from a dead peer: %+v", res)
	}
	if a.eng.tbl.len() != 1 || a.eng.tbl.mergeCount() != 0 {
		t.Errorf("the table changed: %d entries, %d merges", a.eng.tbl.len(), a.eng.tbl.mergeCount())
	}
	if a.s.Status().Peers[0].Up {
		t.Error("a dead peer is up")
	}
}

// TestSync_Reconfigure: a datagram from an address that is not a peer is
// refused until a reload adds it; a reload to another key is used for
// what is sent next.
func TestSync_Reconfigure(t *testing.T) {
	snap := testSnapshot(1, 2, 0, 1, 300)
	a := newNode(t, snap, 1024, keyA)
	b := newNode(t, snap, 1024, keyA)
	a.peerWith(b)
	a.run(t)
	b.run(t)
	eventually(t, "b refuses a: not a peer", func() bool { return b.s.m.refused[reasonPeer].Load() > 0 })
	b.peerWith(a)
	eventually(t, "b hears a", func() bool { return b.s.Status().Peers[0].Up })
	// a moves to key B only; b, holding A only, refuses it as key.
	ca := testConfig(keyB)
	ca.Peers = []netip.AddrPort{b.s.addr()}
	a.s.Reconfigure(ca)
	eventually(t, "b refuses key B", func() bool { return b.s.m.refused[reasonKey].Load() > 0 })
	cb := testConfig(keyA, keyB)
	cb.Peers = []netip.AddrPort{a.s.addr()}
	b.s.Reconfigure(cb)
	before := b.s.m.datagramsRecv.Load()
	eventually(t, "b hears key B", func() bool { return b.s.m.datagramsRecv.Load() > before })
	// A configuration without a key is ignored.
	b.s.Reconfigure(testConfig())
	if len(b.s.state.Load().keys.keys) != 2 {
		t.Error("a keyless reload was applied")
	}
}

func TestNew_Errors(t *testing.T) {
	if _, err := New(Options{Config: testConfig(keyA)}); err == nil {
		t.Error("no engine")
	}
	eng := &fakeEngine{tbl: newTestTable(t, 1024)}
	if _, err := newSyncer(Options{}, eng); err == nil {
		t.Error("no configuration")
	}
	if _, err := newSyncer(Options{Config: testConfig()}, eng); err == nil {
		t.Error("no key")
	}
	n := newNode(t, testSnapshot(1, 2, 0, 1, 300), 1024, keyA)
	c := testConfig(keyA)
	c.Listen = n.s.addr()
	if _, err := newSyncer(Options{Config: c}, eng); err == nil {
		t.Error("a port in use was bound again")
	}
}

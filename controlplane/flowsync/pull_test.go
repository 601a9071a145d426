package flowsync

import (
	"bytes"
	"net"
	"net/netip"
	"os"
	"strconv"
	"testing"
	"time"

	"xlb/conntrack"
	"xlb/dataplane"
)

// fillFlows puts n flows in tb: established own ones, a tenth from
// peers, and half-open ones besides (never pulled); it returns how many
// a pull should carry: n, less any established entry a later put
// displaced (both its buckets full: rare at half load, but the hash seed
// is random).
func fillFlows(t testing.TB, tb testTable, snap *dataplane.Snapshot, now int64, n int) int {
	web := backendOf(t, snap, svcWeb, webIPs[0])
	dns := backendOf(t, snap, svcDNS, dnsIPs[0])
	for i := range n {
		src := netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})
		k := conntrack.Key{Src: dataplane.Addr16(src), Dst: dataplane.Addr16(netip.MustParseAddr("203.0.113.10")),
			SrcPort: uint16(i), DstPort: 443, Proto: 6, Kind: conntrack.Kind5T, Service: 1}
		v := conntrack.Value{Backend: uint32(web.Ref), IdleSec: 300, Peer: i%10 == 0}
		if i%7 == 0 {
			k.Service, k.DstPort, v.Backend = 2, 53, uint32(dns.Ref)
		}
		tb.put(k, v, now-int64(i%1000))
	}
	for i := range n / 10 {
		k := key5("198.51.100.1", "203.0.113.10", uint16(i), 80, 1)
		tb.put(k, conntrack.Value{Backend: uint32(web.Ref), IdleSec: 300, HalfOpen: true}, now)
	}
	st := tb.Stats()
	return n - int(st.Evictions-st.EvictionsHalfOpen)
}

func TestPull_Table(t *testing.T) {
	sa := testSnapshot(1, 2, 0, 1, 300)
	sb := testSnapshot(7, 3, 5, 2, 300)
	const n = 20_000
	a := newNode(t, sa, 2*n, keyA)
	b := newNode(t, sb, 2*n, keyA)
	want := fillFlows(t, a.eng.tbl, sa, a.clk.now(), n)
	a.peerWith(b)
	b.peerWith(a)
	a.run(t)
	res := b.s.Pull(t.Context())
	if res.Err != nil || res.Peer != a.s.addr().String() || res.Records != want || res.Stored != want {
		t.Fatalf("pull: %+v, want %d records", res, want)
	}
	// A stored record may displace an older peer entry where both its
	// buckets are full: each such eviction is one entry fewer.
	if got, ev := b.eng.tbl.len(), b.eng.tbl.Stats().Evictions; got+int(ev) != want {
		t.Errorf("%d entries after the pull and %d evicted, want %d in all", got, ev, want)
	}
	// Stored under b's own IDs, as peer entries, with their last use.
	ref := backendOf(t, sb, svcWeb, webIPs[0]).Ref
	k := conntrack.Key{Src: dataplane.Addr16(netip.AddrFrom4([4]byte{10, 0, 0, 5})), Dst: dataplane.Addr16(netip.MustParseAddr("203.0.113.10")),
		SrcPort: 5, DstPort: 443, Proto: 6, Kind: conntrack.Kind5T, Service: 7}
	if e, ok := b.eng.tbl.get(k); !ok || e.Backend != uint32(ref) || !e.Peer || e.LastUse != b.clk.now()-5 {
		t.Errorf("pulled entry %+v %v", e, ok)
	}
	eventually(t, "a counted the pull", func() bool { return a.s.m.pullsServed.Load() == 1 })
	if a.s.m.pullRecords.Load() != uint64(want) || b.s.m.pullRecordsIn.Load() != uint64(want) {
		t.Errorf("pull records out %d in %d", a.s.m.pullRecords.Load(), b.s.m.pullRecordsIn.Load())
	}
}

// TestPull_TriesPeersInTurn: a dead peer, then one without our key, then
// one that answers.
func TestPull_TriesPeersInTurn(t *testing.T) {
	snap := testSnapshot(1, 2, 0, 1, 300)
	dead := newNode(t, snap, 1024, keyA)
	deadAddr := dead.s.addr()
	dead.s.Close()
	wrong := newNode(t, snap, 1024, keyC)
	good := newNode(t, snap, 1024, keyA)
	me := newNode(t, snap, 1024, keyA)
	fillFlows(t, wrong.eng.tbl, snap, wrong.clk.now(), 100)
	want := fillFlows(t, good.eng.tbl, snap, good.clk.now(), 300)
	for _, p := range []*node{wrong, good} {
		p.peerWith(me)
		p.run(t)
	}
	c := testConfig(keyA)
	c.Peers = []netip.AddrPort{deadAddr, wrong.s.addr(), good.s.addr()}
	me.s.Reconfigure(c)
	res := me.s.Pull(t.Context())
	if res.Err != nil || res.Peer != good.s.addr().String() || res.Records != want {
		t.Fatalf("pull: %+v", res)
	}
	eventually(t, "the peer without the key refused", func() bool { return wrong.s.m.refused[reasonKey].Load() == 1 })
	if wrong.s.m.pullsServed.Load() != 0 {
		t.Error("served a pull to a puller without its key")
	}
}

// TestPull_Refusals: a pull whose request does not authenticate, or that
// does not come from a peer, gets nothing; none answers: Err says why.
func TestPull_Refusals(t *testing.T) {
	snap := testSnapshot(1, 2, 0, 1, 300)
	a := newNode(t, snap, 1024, keyA)
	fillFlows(t, a.eng.tbl, snap, a.clk.now(), 100)
	b := newNode(t, snap, 1024, keyB)
	a.peerWith(b)
	b.peerWith(a)
	a.run(t)
	res := b.s.Pull(t.Context())
	if res.Err == nil || res.Records != 0 || b.eng.tbl.len() != 0 {
		t.Errorf("pull with the wrong key: %+v", res)
	}
	eventually(t, "refused: key", func() bool { return a.s.m.refused[reasonKey].Load() == 1 })

	// Not a peer (127.0.0.2 is loopback too).
	c := testConfig(keyA)
	c.Listen = netip.MustParseAddrPort("127.0.0.2:0")
	eng := &fakeEngine{tbl: newTestTable(t, 1024)}
	eng.snap.Store(snap)
	stranger, err := newSyncer(Options{Config: c}, eng)
	if err != nil {
		t.Skipf("no 127.0.0.2 here: %v", err)
	}
	defer stranger.Close()
	c.Peers = []netip.AddrPort{a.s.addr()}
	stranger.Reconfigure(c)
	if res := stranger.Pull(t.Context()); res.Err == nil || res.Records != 0 {
		t.Errorf("pull from a stranger: %+v", res)
	}
	eventually(t, "refused: peer", func() bool { return a.s.m.refused[reasonPeer].Load() >= 1 })

	if res := (&Syncer{}).withState(t).Pull(t.Context()); res.Err != errNoPeers {
		t.Errorf("no peers: %+v", res)
	}
}

// withState gives a bare Syncer a peerless state (for Pull's checks).
func (s *Syncer) withState(t *testing.T) *Syncer {
	kr, _ := newKeyring([][32]byte{keyA}, 1)
	s.state.Store(&state{keys: kr, pullTO: time.Second})
	return s
}

// TestPull_BoundToNonce: a response frame opens only under the nonce of
// the request it answers.
func TestPull_BoundToNonce(t *testing.T) {
	kr, _ := newKeyring([][32]byte{keyA}, 3)
	e := newEncoder(pullFrameLimit)
	r := sampleRecords()[0]
	e.add(&r)
	n1, n2 := bytes.Repeat([]byte{1}, nonceLen), bytes.Repeat([]byte{2}, nonceLen)
	h := header{kind: kindPullRecords, keyID: kr.sealID(), sender: 3, seq: 1, wall: 1}
	msg := append([]byte(nil), e.seal(kr.seal, &h, n1)...)
	var sc scratch
	if _, ok := sc.open(kr.seal, &h, append([]byte(nil), msg...), n2); ok {
		t.Error("a frame of one pull opened in another")
	}
	if _, ok := sc.open(kr.seal, &h, msg, n1); !ok {
		t.Error("a frame did not open in its own pull")
	}
}

// TestPull_Frames: frame lengths out of bounds are refused, not read.
func TestPull_Frames(t *testing.T) {
	buf := make([]byte, 100)
	for _, l := range []uint32{0, headerLen + tagLen - 1, 101, 1 << 31} {
		var b bytes.Buffer
		b.Write([]byte{byte(l >> 24), byte(l >> 16), byte(l >> 8), byte(l)})
		b.Write(make([]byte, 200))
		if _, err := readFrame(&b, buf); err != errFrameLen {
			t.Errorf("length %d: %v", l, err)
		}
	}
	// A puller that sends garbage is dropped, and the server serves on.
	snap := testSnapshot(1, 2, 0, 1, 300)
	a := newNode(t, snap, 1024, keyA)
	b := newNode(t, snap, 1024, keyA)
	a.peerWith(b)
	b.peerWith(a)
	a.run(t)
	for _, junk := range [][]byte{{0, 0, 0, 60}, append([]byte{0, 0, 0, 68}, make([]byte, 68)...), {0xff, 0xff, 0xff, 0xff}} {
		c, err := net.Dial("tcp", a.s.addr().String())
		if err != nil {
			t.Fatal(err)
		}
		c.Write(junk)
		c.(*net.TCPConn).CloseWrite()
		c.Read(make([]byte, 1)) // until the server closes
		c.Close()
	}
	if res := b.s.Pull(t.Context()); res.Err != nil {
		t.Errorf("after garbage: %+v", res)
	}
}

// BenchmarkPull1M pulls a table of XLB_PULL_FLOWS flows (default 1M)
// between two Syncers over loopback and reports the time.
func BenchmarkPull1M(b *testing.B) {
	n := 1_000_000
	if v, err := strconv.Atoi(os.Getenv("XLB_PULL_FLOWS")); err == nil && v > 0 {
		n = v
	}
	sa := testSnapshot(1, 2, 0, 1, 300)
	sb := testSnapshot(7, 3, 5, 2, 300)
	a := newNode(b, sa, n+n/5, keyA)
	fillFlows(b, a.eng.tbl, sa, a.clk.now(), n)
	a.run(b)
	b.ResetTimer()
	for b.Loop() {
		b.StopTimer()
		p := newNode(b, sb, n+n/5, keyA)
		p.peerWith(a)
		a.peerWith(p)
		b.StartTimer()
		res := p.s.Pull(b.Context())
		if res.Err != nil || res.Records != n {
			b.Fatalf("%+v", res)
		}
		b.ReportMetric(res.Took.Seconds(), "s/pull")
		b.ReportMetric(float64(n)/res.Took.Seconds(), "flows/s")
		b.Logf("pulled %d flows in %v", n, res.Took)
	}
}

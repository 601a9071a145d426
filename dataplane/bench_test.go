package dataplane_test

// Whole-pipeline benchmarks: Decider.Poll over a MemFramePort (copy each
// frame into its buffer as a NIC would, parse, rule lookup, keys, conntrack,
// Maglev, rewrite, counters, completion), one core, batches of 64 frames.
//
// Every benchmark iteration is one batch (ns/op is per batch); ns/pkt and
// Mpps are the per-frame figures, cpu-ns/pkt the same from the thread's own
// CPU time (on a shared machine wall time also counts other processes'
// slices). The clock is read once per batch, as a production worker does.
// Fixtures are built on first use and shared by every benchmark and -count
// repetition of the process, so that `-benchtime=1x` stays fast:
//
//   - established-v4-1M / established-v6-1M: 1M flows are created by one SYN
//     each through the engine (conntrack of 2M entries, so ~50 % load);
//     then 64k ACK frames sampled from them (every 16th flow) are replayed
//     round-robin. 64k flows spread over the 128 MiB table are far from
//     cache-hot, but they are not all of the table either. The new% metric
//     shows how many ACKs missed (their entry evicted by an over-full
//     bucket, X3) and were re-created.
//   - syn-v4: 1M SYN frames of distinct 5-tuples, round-robin, into their own
//     2M table. The first pass inserts 1M new keys; later passes find their
//     key and overwrite it (CT1: a SYN is always new, selected by Maglev and
//     recorded — only the conntrack write lands on an existing slot). The
//     insert% metric shows the mix.
//   - udp-untracked: 64k UDP flows of a service with affinity NONE (T1: not
//     tracked), so no conntrack access at all.
//   - BenchmarkRewrite: the same 64k established IPv4 TCP flows sent to
//     L2_DSR, IPIP, GUE (IPv4 outer) and GUE (IPv6 outer, UDP checksum over
//     the whole packet) services.

import (
	"encoding/binary"
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"xlb/config"
	"xlb/conntrack"
	"xlb/controlplane"
	"xlb/controlplane/cptest"
	"xlb/controlplane/sim"
	"xlb/dataplane"
	"xlb/dataplane/craft"
	"xlb/dataplane/packet"
)

// The VIPs of testdata/bench.toml, the configuration of the benchmarks,
// the allocation tests and the fuzzer.
var (
	benchVIPWeb4  = netip.MustParseAddr("203.0.113.10") // web4 (TCP 80, 443), dns (UDP 53), l3
	benchVIPIPIP  = netip.MustParseAddr("203.0.113.20")
	benchVIPGUE4  = netip.MustParseAddr("203.0.113.30")
	benchVIPGUE6  = netip.MustParseAddr("203.0.113.40") // GUE with IPv6 backends
	benchVIPAllow = netip.MustParseAddr("203.0.113.50") // source_ip_ranges 100.64.0.0/10
	benchVIPWeb6  = netip.MustParseAddr("2001:db8:f::10")
	// notVIP is an address the balancer does not serve (FR1: the host's).
	benchNotVIP = netip.MustParseAddr("198.51.100.7")
)

// benchEngine builds the real control plane on testdata/bench.toml over a
// fresh engine with a conntrack table of capacity entries, backends healthy
// as in `xlb sim`.
func benchEngine(tb testing.TB, capacity int) (*dataplane.Engine, *controlplane.ControlPlane) {
	tb.Helper()
	ct, err := conntrack.New(capacity)
	if err != nil {
		tb.Fatal(err)
	}
	eng := dataplane.NewEngine(ct)
	cp, err := controlplane.New(cptest.Config(tb, cptest.Testdata(tb, "bench.toml")), eng, controlplane.Options{
		Local:          sim.SimLocal(),
		InitialHealthy: true,
		InitialWeight:  1000,
	}, benchClock())
	if err != nil {
		tb.Fatal(err)
	}
	return eng, cp
}

// benchServiceID returns the ID of the named service in the current snapshot.
func benchServiceID(tb testing.TB, eng *dataplane.Engine, name string) uint16 {
	tb.Helper()
	for _, s := range eng.Load().Services {
		if s != nil && s.Name == name {
			return s.ID
		}
	}
	tb.Fatalf("no service %q", name)
	return 0
}

var benchEpoch = time.Now()

// benchClock is the engine clock in ms, read once per batch like a worker does.
// It starts at 1 s so that no entry is ever "used at 0".
func benchClock() int64 { return 1000 + time.Since(benchEpoch).Milliseconds() }

// benchClient returns the source address and port of flow i: 262144 client
// addresses (four flows each) in 100.64.0.0/10 or 2001:db8:c::/64.
func benchClient(i int, v6 bool) (netip.Addr, uint16) {
	port := uint16(1024 + (i&3)*15000)
	h := uint32(i >> 2)
	if v6 {
		a := netip.MustParseAddr("2001:db8:c::").As16()
		binary.BigEndian.PutUint32(a[12:], h)
		return netip.AddrFrom16(a), port
	}
	return netip.AddrFrom4([4]byte{100, 64 | byte(h>>16)&0x3f, byte(h >> 8), byte(h)}), port
}

// benchTemplate is a crafted frame whose source address and port are patched per
// flow, with the IPv4 header and L4 checksums updated incrementally
// (RFC 1624), so that generating millions of real frames costs no gopacket
// serialization each.
type benchTemplate struct {
	frame           []byte
	srcOff, portOff int // offsets of the source address and port
	ipSumOff, l4Sum int // offsets of the checksums (ipSumOff -1: IPv6)
	udp             bool
	origSrc         [16]byte // the template's source address (origSrcLen bytes)
	origSrcLen      int
	origPort        uint16
}

func newBenchTemplate(tb testing.TB, p craft.Packet) *benchTemplate {
	tb.Helper()
	frame, err := craft.Build(&p)
	if err != nil {
		tb.Fatal(err)
	}
	var pp packet.Parsed
	if err := packet.Parse(frame, &pp); err != nil || !pp.HasPorts {
		tb.Fatalf("template %+v: %v", p, err)
	}
	t := &benchTemplate{frame: frame, portOff: pp.L4Off, ipSumOff: -1, udp: pp.Proto == packet.ProtoUDP}
	if pp.IPVersion == 4 {
		t.srcOff, t.origSrcLen, t.ipSumOff = pp.L3Off+12, 4, pp.L3Off+10
	} else {
		t.srcOff, t.origSrcLen = pp.L3Off+8, 16
	}
	t.l4Sum = pp.L4Off + 16
	if t.udp {
		t.l4Sum = pp.L4Off + 6
	}
	copy(t.origSrc[:], frame[t.srcOff:t.srcOff+t.origSrcLen])
	t.origPort = p.SrcPort
	return t
}

// put writes the template for source src:sport into dst (len(t.frame)
// bytes) and returns it.
func (t *benchTemplate) put(dst []byte, src netip.Addr, sport uint16) []byte {
	dst = dst[:len(t.frame)]
	copy(dst, t.frame)
	old := t.origSrc[:t.origSrcLen]
	var a []byte
	if t.origSrcLen == 4 {
		a4 := src.As4()
		a = a4[:]
	} else {
		a16 := src.As16()
		a = a16[:]
	}
	copy(dst[t.srcOff:], a)
	binary.BigEndian.PutUint16(dst[t.portOff:], sport)
	if t.ipSumOff >= 0 {
		c := binary.BigEndian.Uint16(dst[t.ipSumOff:])
		binary.BigEndian.PutUint16(dst[t.ipSumOff:], packet.ChecksumUpdate(c, old, a))
	}
	c := binary.BigEndian.Uint16(dst[t.l4Sum:])
	c = packet.ChecksumUpdate(c, old, a)
	c = packet.ChecksumUpdate16(c, t.origPort, sport)
	if t.udp && c == 0 {
		c = 0xffff // RFC 768: a computed 0 is sent as all ones
	}
	binary.BigEndian.PutUint16(dst[t.l4Sum:], c)
	return dst
}

// frames returns t patched for flows idx[0], idx[1], ... of family v6, in
// one backing array.
func (t *benchTemplate) frames(idx []int, v6 bool) [][]byte {
	n := len(t.frame)
	slab := make([]byte, n*len(idx))
	out := make([][]byte, len(idx))
	for j, i := range idx {
		a, port := benchClient(i, v6)
		out[j] = t.put(slab[j*n:(j+1)*n:(j+1)*n], a, port)
	}
	return out
}

func benchSpan(start, n, stride int) []int {
	idx := make([]int, n)
	for j := range idx {
		idx[j] = start + j*stride
	}
	return idx
}

const (
	benchBatch        = 64
	benchPrefill      = 1 << 20 // established flows in the 1M fixtures
	benchBigCapacity  = 2 << 20 // conntrack entries for them (~50 % load)
	benchSample       = 1 << 16 // ACK frames replayed out of the 1M
	benchRewriteFlows = 1 << 16
	benchHandshakes   = 1 << 18 // connections of the handshake fixture
	benchSyncRing     = 4096    // records of a decider's flow-sync ring
	// smallCapacity keeps the 64k flows of a rewrite case at 6 % load, so
	// that no bucket overflows and every replayed ACK hits: the cases then
	// differ by their rewrite only. (At 25 % load a dozen buckets hold more
	// than 8 flows; replaying those round-robin thrashes their LRU, X3.)
	benchSmallCapacity = 1 << 20
)

// benchFixture is an engine with traffic ready to replay.
type benchFixture struct {
	eng    *dataplane.Engine
	cp     *controlplane.ControlPlane
	dc     *dataplane.Decider
	frames [][]byte
	svc    uint16
	// evictions during the prefill (X3), for the log.
	evictions uint64
}

// benchEstablish sends one SYN for each flow idx through dc, in batches of 64,
// and fails unless every one was forwarded as a new connection.
func benchEstablish(tb testing.TB, dc *dataplane.Decider, syn *benchTemplate, idx []int, v6 bool) {
	tb.Helper()
	bufs := make([][]byte, benchBatch)
	for i := range bufs {
		bufs[i] = make([]byte, dataplane.Headroom+len(syn.frame)+dataplane.Headroom)
	}
	batch := make([]dataplane.Frame, benchBatch)
	for start := 0; start < len(idx); start += benchBatch {
		n := min(benchBatch, len(idx)-start)
		for j := range n {
			a, port := benchClient(idx[start+j], v6)
			syn.put(bufs[j][dataplane.Headroom:], a, port)
			batch[j] = dataplane.Frame{Buf: bufs[j], Off: dataplane.Headroom, Len: len(syn.frame)}
		}
		dc.Process(batch[:n], benchClock())
		for j := range n {
			if batch[j].Verdict != dataplane.VerdictForward {
				tb.Fatalf("SYN of flow %d: %v %v", idx[start+j], batch[j].Verdict, batch[j].Reason)
			}
		}
	}
}

// benchEstablishedFixture prefills 1M flows to vip:80 and keeps ACK frames of
// every 16th.
func benchEstablishedFixture(tb testing.TB, vip netip.Addr, svcName string) *benchFixture {
	tb.Helper()
	v6 := vip.Is6()
	src, _ := benchClient(0, v6)
	eng, cp := benchEngine(tb, benchBigCapacity)
	f := &benchFixture{eng: eng, cp: cp, dc: eng.NewDecider(), svc: benchServiceID(tb, eng, svcName)}
	syn := newBenchTemplate(tb, craft.Packet{Src: src, Dst: vip, Proto: packet.ProtoTCP, SrcPort: 1, DstPort: 80, Flags: "S"})
	benchEstablish(tb, f.dc, syn, benchSpan(0, benchPrefill, 1), v6)
	f.evictions = eng.Conntrack().Stats().Evictions
	ack := newBenchTemplate(tb, craft.Packet{Src: src, Dst: vip, Proto: packet.ProtoTCP, SrcPort: 1, DstPort: 80, Flags: "A"})
	f.frames = ack.frames(benchSpan(0, benchSample, benchPrefill/benchSample), v6)
	return f
}

// benchFixtures are built on first use and shared by every benchmark (and every
// -count repetition) of the process.
var (
	benchFixMu    sync.Mutex
	benchFixtures = map[string]*benchFixture{}
)

func benchShared(tb testing.TB, name string, build func(tb testing.TB) *benchFixture) *benchFixture {
	tb.Helper()
	benchFixMu.Lock()
	defer benchFixMu.Unlock()
	if f := benchFixtures[name]; f != nil {
		return f
	}
	start := time.Now()
	f := build(tb)
	tb.Logf("fixture %s built in %v", name, time.Since(start).Round(time.Millisecond))
	benchFixtures[name] = f
	return f
}

func benchFixEst4(tb testing.TB) *benchFixture {
	return benchShared(tb, "established-v4", func(tb testing.TB) *benchFixture { return benchEstablishedFixture(tb, benchVIPWeb4, "web4") })
}

func benchFixEst6(tb testing.TB) *benchFixture {
	return benchShared(tb, "established-v6", func(tb testing.TB) *benchFixture { return benchEstablishedFixture(tb, benchVIPWeb6, "web6") })
}

// fixSYN: 1M SYN frames of distinct 5-tuples, in their own table.
func benchFixSYN(tb testing.TB) *benchFixture {
	return benchShared(tb, "syn", func(tb testing.TB) *benchFixture {
		eng, cp := benchEngine(tb, benchBigCapacity)
		src, _ := benchClient(0, false)
		syn := newBenchTemplate(tb, craft.Packet{Src: src, Dst: benchVIPWeb4, Proto: packet.ProtoTCP, SrcPort: 1, DstPort: 80, Flags: "S"})
		return &benchFixture{eng: eng, cp: cp, dc: eng.NewDecider(), svc: benchServiceID(tb, eng, "web4"),
			frames: syn.frames(benchSpan(0, benchPrefill, 1), false)}
	})
}

// fixUDP: 64k UDP flows to a service with affinity NONE (never tracked).
func benchFixUDP(tb testing.TB) *benchFixture {
	return benchShared(tb, "udp", func(tb testing.TB) *benchFixture {
		eng, cp := benchEngine(tb, conntrack.MinCapacity) // UDP with affinity NONE is never tracked
		src, _ := benchClient(0, false)
		udp := newBenchTemplate(tb, craft.Packet{Src: src, Dst: benchVIPWeb4, Proto: packet.ProtoUDP, SrcPort: 1, DstPort: 53})
		return &benchFixture{eng: eng, cp: cp, dc: eng.NewDecider(), svc: benchServiceID(tb, eng, "dns"),
			frames: udp.frames(benchSpan(0, benchSample, 1), false)}
	})
}

// fixRewrite: 64k established flows on a rewrite VIP, each method in its
// own engine so that the cases do not share cache footprint.
func benchFixRewrite(tb testing.TB, name, svc string, vip netip.Addr) *benchFixture {
	return benchShared(tb, "rewrite-"+name, func(tb testing.TB) *benchFixture {
		eng, cp := benchEngine(tb, benchSmallCapacity)
		dc := eng.NewDecider()
		src, _ := benchClient(0, false)
		syn := newBenchTemplate(tb, craft.Packet{Src: src, Dst: vip, Proto: packet.ProtoTCP, SrcPort: 1, DstPort: 80, Flags: "S"})
		benchEstablish(tb, dc, syn, benchSpan(0, benchRewriteFlows, 1), false)
		ack := newBenchTemplate(tb, craft.Packet{Src: src, Dst: vip, Proto: packet.ProtoTCP, SrcPort: 1, DstPort: 80, Flags: "A"})
		return &benchFixture{eng: eng, cp: cp, dc: dc, svc: benchServiceID(tb, eng, svc),
			frames: ack.frames(benchSpan(0, benchRewriteFlows, 1), false)}
	})
}

var benchRewriteCases = []struct {
	name, svc string
	vip       netip.Addr
	method    config.ForwardingMethod
}{
	{"L2_DSR", "web4", benchVIPWeb4, config.ForwardL2DSR},
	{"IPIP", "ipip4", benchVIPIPIP, config.ForwardIPIP},
	{"GUE", "gue4", benchVIPGUE4, config.ForwardGUE},
	{"GUE-v6-outer", "gue6", benchVIPGUE6, config.ForwardGUE},
}

// benchRun replays f's frames through its decider, one batch per iteration,
// and reports per-packet figures. It fails unless every frame was forwarded,
// and reports new% (frames of new connections: selected by Maglev and
// recorded) and insert% (frames that stored a key new to the table).
func benchRun(b *testing.B, f *benchFixture) { benchRunOn(b, f, f.dc) }

// benchRunOn is benchRun with another decider of f's engine.
func benchRunOn(b *testing.B, f *benchFixture, dc *dataplane.Decider) {
	port := dataplane.NewMemFramePort(f.frames, benchBatch)
	batch := make([]dataplane.Frame, benchBatch)
	dc.Process(nil, benchClock()) // a fresh decider sizes its counters once
	new0 := benchNewConns(dc, f.svc)
	ins0 := f.eng.Conntrack().Stats().Inserts
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	b.ReportAllocs()
	b.ResetTimer()
	pkts := 0
	cpu0 := benchThreadCPU()
	for b.Loop() {
		pkts += dc.Poll(port, batch, benchClock())
	}
	cpu := benchThreadCPU() - cpu0
	el := b.Elapsed()
	if port.Forwarded != port.Received {
		b.Fatalf("forwarded %d of %d (passed %d, dropped %d)", port.Forwarded, port.Received, port.Passed, port.Dropped)
	}
	b.ReportMetric(float64(el.Nanoseconds())/float64(pkts), "ns/pkt")
	b.ReportMetric(float64(pkts)/el.Seconds()/1e6, "Mpps")
	if cpu > 0 {
		// The thread's own CPU time: on a shared machine, wall time also
		// counts the slices other processes got.
		b.ReportMetric(float64(cpu.Nanoseconds())/float64(pkts), "cpu-ns/pkt")
	}
	b.ReportMetric(100*float64(benchNewConns(dc, f.svc)-new0)/float64(pkts), "new%")
	// Of those, the ones that stored a key the table did not hold (the
	// rest overwrote their own entry in place).
	b.ReportMetric(100*float64(f.eng.Conntrack().Stats().Inserts-ins0)/float64(pkts), "insert%")
}

// benchNewConns is the decider's count of new connections of a service (0
// before its first batch).
func benchNewConns(dc *dataplane.Decider, svc uint16) uint64 {
	if sc := dc.Stats().Service(svc); sc != nil {
		return sc.NewConnections.Load()
	}
	return 0
}

// BenchmarkPipeline is the whole engine on one core for the main kinds of
// traffic; see the file comment for how each traffic set is built.
func BenchmarkPipeline(b *testing.B) {
	b.Run("established-v4-1M", func(b *testing.B) {
		f := benchFixEst4(b)
		b.Logf("prefill: %d flows, %d evicted (X3, over-full buckets)", benchPrefill, f.evictions)
		benchRun(b, f)
	})
	b.Run("established-v4-1M-hot1k", func(b *testing.B) {
		// 1024 of the same flows: the table lines stay in cache, so this is
		// the engine's own cost of an established packet, without the
		// memory latency of a 1M-flow table.
		f := *benchFixEst4(b)
		f.frames = f.frames[:1024]
		benchRun(b, &f)
	})
	b.Run("syn-v4", func(b *testing.B) { benchRun(b, benchFixSYN(b)) })
	b.Run("udp-untracked", func(b *testing.B) { benchRun(b, benchFixUDP(b)) })
	b.Run("established-v6-1M", func(b *testing.B) {
		f := benchFixEst6(b)
		b.Logf("prefill: %d flows, %d evicted (X3, over-full buckets)", benchPrefill, f.evictions)
		benchRun(b, f)
	})
}

// BenchmarkRewrite compares the forwarding methods on the same established
// IPv4 TCP traffic (64k flows each).
func BenchmarkRewrite(b *testing.B) {
	for _, m := range benchRewriteCases {
		b.Run(m.name, func(b *testing.B) {
			f := benchFixRewrite(b, m.name, m.svc, m.vip)
			if s := f.eng.Load().Service(f.svc); s.Method != m.method {
				b.Fatalf("service %s uses %v, want %v", s.Name, s.Method, m.method)
			}
			benchRun(b, f)
		})
	}
}

// TestBenchFramesAreReal checks the benchmark frame generator: a patched
// template is byte for byte the frame craft (gopacket) builds for the same
// flow, checksums included.
func TestBenchFramesAreReal(t *testing.T) {
	for _, tc := range []struct {
		dst   netip.Addr
		proto packet.Proto
		flags string
		dport uint16
	}{
		{benchVIPWeb4, packet.ProtoTCP, "S", 80},
		{benchVIPWeb4, packet.ProtoTCP, "A", 80},
		{benchVIPWeb4, packet.ProtoUDP, "", 53},
		{benchVIPWeb6, packet.ProtoTCP, "A", 80},
		{benchVIPWeb6, packet.ProtoUDP, "", 53},
	} {
		v6 := tc.dst.Is6()
		src, _ := benchClient(0, v6)
		tp := newBenchTemplate(t, craft.Packet{Src: src, Dst: tc.dst, Proto: tc.proto, SrcPort: 1, DstPort: tc.dport, Flags: tc.flags})
		for _, i := range []int{0, 1, 5, 4095, 65537, benchPrefill - 1, 3 << 20} {
			a, port := benchClient(i, v6)
			got := tp.put(make([]byte, len(tp.frame)), a, port)
			want, err := craft.Build(&craft.Packet{Src: a, Dst: tc.dst, Proto: tc.proto, SrcPort: port, DstPort: tc.dport, Flags: tc.flags})
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != string(want) {
				t.Errorf("%v proto %d flow %d (%v:%d): patched frame differs from craft's\n got %x\nwant %x", tc.dst, tc.proto, i, a, port, got, want)
			}
		}
	}
	// Distinct flows have distinct 5-tuples.
	seen := map[netip.AddrPort]int{}
	for i := range benchPrefill {
		a, port := benchClient(i, false)
		ap := netip.AddrPortFrom(a, port)
		if j, dup := seen[ap]; dup {
			t.Fatalf("flows %d and %d share %v", j, i, ap)
		}
		seen[ap] = i
	}
}

// fixHandshake: 256k connections, each a SYN followed by the ACK that
// confirms its entry (the frames of one connection adjacent, so in one
// batch), in their own table. Every replay makes each connection new
// again: its SYN rewrites the entry half-open (CT1), its ACK confirms it,
// which is the point where flow sync pushes a record.
func benchFixHandshake(tb testing.TB) *benchFixture {
	return benchShared(tb, "handshake", func(tb testing.TB) *benchFixture {
		eng, cp := benchEngine(tb, benchBigCapacity)
		src, _ := benchClient(0, false)
		idx := benchSpan(0, benchHandshakes, 1)
		syn := newBenchTemplate(tb, craft.Packet{Src: src, Dst: benchVIPWeb4, Proto: packet.ProtoTCP, SrcPort: 1, DstPort: 80, Flags: "S"})
		ack := newBenchTemplate(tb, craft.Packet{Src: src, Dst: benchVIPWeb4, Proto: packet.ProtoTCP, SrcPort: 1, DstPort: 80, Flags: "A"})
		syns, acks := syn.frames(idx, false), ack.frames(idx, false)
		frames := make([][]byte, 0, 2*len(idx))
		for i := range idx {
			frames = append(frames, syns[i], acks[i])
		}
		return &benchFixture{eng: eng, cp: cp, dc: eng.NewDecider(), svc: benchServiceID(tb, eng, "web4"), frames: frames}
	})
}

// benchSyncDeciders are the flow-sync deciders of the shared fixtures'
// engines, made on first use (under benchFixMu). The engine's deciders
// made after this one get rings too; the benchmarks make none.
var benchSyncDeciders = map[*benchFixture]*dataplane.Decider{}

func benchSyncDecider(f *benchFixture) *dataplane.Decider {
	benchFixMu.Lock()
	defer benchFixMu.Unlock()
	dc := benchSyncDeciders[f]
	if dc == nil {
		f.eng.EnableFlowSync(benchSyncRing)
		dc = f.eng.NewDecider()
		benchSyncDeciders[f] = dc
	}
	return dc
}

// benchRunSync is benchRun with flow sync off or on. Each replays its
// frames once before the clock starts, so that both find the table in
// the same state (a SYN's first pass inserts, later ones overwrite). With
// sync on a consumer goroutine drains the ring as the sync goroutine
// would (every 100 µs when it found the ring empty), so pushes find room;
// records/pkt and drops/pkt say how many were pushed and dropped.
func benchRunSync(b *testing.B, f *benchFixture, on bool) {
	dc := f.dc
	if on {
		dc = benchSyncDecider(f)
	}
	warm := dataplane.NewMemFramePort(f.frames, benchBatch)
	batch := make([]dataplane.Frame, benchBatch)
	for warm.Received < uint64(len(f.frames)) {
		dc.Poll(warm, batch, benchClock())
	}
	var ring *dataplane.SyncRing
	var stop atomic.Bool
	var consumed sync.WaitGroup
	if on {
		rings := f.eng.SyncRings()
		ring = rings[len(rings)-1]
		for _, r := range rings {
			drainRing(r) // what the warm-up and earlier runs left
		}
		consumed.Add(1)
		go func() {
			defer consumed.Done()
			buf := make([]dataplane.SyncRecord, 256)
			for !stop.Load() {
				if ring.Pop(buf) < len(buf) {
					time.Sleep(100 * time.Microsecond) // no allocation, unlike a timer channel
				}
			}
		}()
	}
	var p0, d0 uint64
	if ring != nil {
		p0, d0 = ring.Pushed(), ring.Drops()
	}
	benchRunOn(b, f, dc)
	if on {
		stop.Store(true)
		consumed.Wait()
		pkts := float64(b.N) * benchBatch
		b.ReportMetric(float64(ring.Pushed()-p0)/pkts, "records/pkt")
		b.ReportMetric(float64(ring.Drops()-d0)/pkts, "drops/pkt")
	}
}

func drainRing(r *dataplane.SyncRing) {
	buf := make([]dataplane.SyncRecord, 256)
	for r.Pop(buf) > 0 {
	}
}

// BenchmarkFlowSync compares flow sync off and on (a ring per decider,
// records pushed when an entry becomes established and this instance's):
// SYNs alone (half-open entries: nothing pushed, only the branch),
// handshakes (SYN then ACK: one record per connection, the cost per new
// flow), and established traffic of the 1M-flow table (hits: nothing
// pushed).
func BenchmarkFlowSync(b *testing.B) {
	for _, c := range []struct {
		name string
		fix  func(testing.TB) *benchFixture
	}{
		{"syn-v4", benchFixSYN},
		{"handshake-v4", benchFixHandshake},
		{"established-v4-1M", benchFixEst4},
	} {
		for _, on := range []bool{false, true} {
			name := c.name + "/sync=off"
			if on {
				name = c.name + "/sync=on"
			}
			b.Run(name, func(b *testing.B) { benchRunSync(b, c.fix(b), on) })
		}
	}
}

package dataplane_test

import (
	"encoding/binary"
	"strings"
	"testing"
	"time"

	"xlb/conntrack"
	"xlb/controlplane/cptest"
	"xlb/dataplane"
	"xlb/dataplane/craft"
)

// TestFlood_EstablishedSurviveSYNFloodAndBackendFailure: 300 established
// connections keep sending while a SYN flood of new 5-tuples, eight times the
// table's capacity, runs at 220 kpps of engine time; halfway through, one
// backend fails its health check. Every packet of every established
// connection is a hit on its own backend throughout (P1 needs the entry:
// an evicted one would be re-picked away from the failed backend, a reset),
// because a full table evicts half-open entries first (X3) and the flood's
// entries are half-open. The figures are logged.
func TestFlood_EstablishedSurviveSYNFloodAndBackendFailure(t *testing.T) {
	floodEngine(t, "S")
}

// TestFlood_EstablishedSurviveACKFloodAndBackendFailure: the same with a
// flood of ACKs, mid-flow packets of flows the table never saw (CT4: each
// misses and is selected and recorded). Their entries start on probation,
// like a SYN's, so they displace only each other.
func TestFlood_EstablishedSurviveACKFloodAndBackendFailure(t *testing.T) {
	floodEngine(t, "A")
}

func floodEngine(t *testing.T, flags string) {
	const (
		capacity    = 65536
		established = 300
		flood       = 8 * capacity
		perMs       = 220          // flood packets per millisecond of engine time: 220 kpps
		keepEvery   = 2 * capacity // idle between requests: twice a table of flood
	)
	web := specSvc{Name: "web", Protocol: "TCP", Primary: specAddrs("10.1.0.0", 8)}
	r := cptest.New(t, specFileCap(capacity, web.String(),
		specRule{Name: "web", VIP: specVIP4, Proto: "TCP", Ports: `ports = ["443"]`, Service: "web"}.String()))
	ct := r.Conntrack()

	conn := func(i int, flags string) craft.Packet {
		return cptest.TCP(specAddr("100.64.0.0", i/100+1).String(), specVIP4, uint16(30000+i%100), 443, flags)
	}
	r.Now = 1000
	backend := make([]string, established)
	for i := range established {
		backend[i] = specForward(t, r.Send(conn(i, "S")), "SYN")
		specForward(t, r.Send(conn(i, "A")), "ACK") // established: full timeout
	}
	victim := backend[0] // the backend that fails
	onVictim := 0
	for _, b := range backend {
		if b == victim {
			onVictim++
		}
	}

	// The flood: one SYN frame, its source address and port rewritten
	// for every packet (the engine does not check IPv4 or TCP checksums).
	base := cptest.TCP("198.18.0.1", specVIP4, 1, 443, flags)
	frame, err := craft.Build(&base)
	if err != nil {
		t.Fatal(err)
	}
	const srcOff, sportOff = 14 + 12, 14 + 20 // Ethernet, IPv4 without options
	brokenConn := make([]bool, established)
	broken, keepalives, floodFwd := 0, 0, 0
	start := time.Now()
	for n := range flood {
		binary.BigEndian.PutUint32(frame[srcOff:], 0xc6120000+uint32(n>>10)) // 198.18.x.y
		binary.BigEndian.PutUint16(frame[sportOff:], uint16(1024+n&1023))
		if r.SendFrame(frame).Verdict == dataplane.VerdictForward {
			floodFwd++
		}
		if n%perMs == perMs-1 {
			r.Now++
		}
		if n == flood/2 {
			r.Health(victim, false)
		}
		if n%keepEvery == 0 {
			for i := range established {
				keepalives++
				res := r.Send(conn(i, "A"))
				if (res.Track != dataplane.TrackHit || res.BackendName() != backend[i]) && !brokenConn[i] {
					brokenConn[i] = true
					broken++
					if broken <= 5 {
						t.Errorf("flood packet %d: connection %d (on %s): track %s backend %s", n, i, backend[i], res.Track, res.BackendName())
					}
				}
			}
		}
	}
	took := time.Since(start)
	st := ct.Stats()
	notRec := r.D.Stats().NotRecorded.Load()
	t.Logf("%s flood of %d new flows into a %d-entry table at %d kpps of engine time (%.0f kpps decided on this machine, keep-alives included), "+
		"backend %s (%d of the %d connections) failed halfway", flags, flood, ct.Capacity(), perMs, float64(flood)/took.Seconds()/1000,
		victim, onVictim, established)
	t.Logf("established connections broken: %d of %d (%d keep-alive packets); flood forwarded %d",
		broken, established, keepalives, floodFwd)
	t.Logf("evictions: %d half-open, %d established; spills %d, moves %d, reclaimed %d; not recorded %d; entries %d",
		st.EvictionsHalfOpen, st.Evictions-st.EvictionsHalfOpen, st.Spills, st.Moves, st.Reclaimed, notRec, ct.Len())
	if broken != 0 {
		t.Errorf("%d established connections broken, want 0", broken)
	}
	if floodFwd != flood {
		t.Errorf("%d of %d flood packets forwarded, want all (a full table evicts, never drops)", floodFwd, flood)
	}
	if st.Evictions < flood-capacity || st.Evictions != st.EvictionsHalfOpen {
		t.Errorf("evictions %d (%d half-open), want at least %d, all of them half-open", st.Evictions, st.EvictionsHalfOpen, flood-capacity)
	}
	if onVictim == 0 {
		t.Errorf("no connection on %s: the failure tests nothing", victim)
	}
}

// floodFile is a one-service configuration with extra [dataplane] lines.
func floodFile(dataplaneLines string) string {
	web := specSvc{Name: "web", Protocol: "TCP", Primary: specAddrs("10.1.0.0", 8)}
	text := specFile(web.String(),
		specRule{Name: "web", VIP: specVIP4, Proto: "TCP", Ports: `ports = ["443"]`, Service: "web"}.String())
	return strings.Replace(text, "conntrack_capacity = 65536", "conntrack_capacity = 65536\n"+dataplaneLines, 1)
}

// TestFlood_SYNOnlyEntryShortTimeoutThenPromoted: a SYN records a half-open
// entry with conntrack_syn_timeout_sec; a SYN alone is gone after it; the
// first packet that is neither a SYN nor a reset, within it, makes the
// entry established with the service's timeout (60 s by default), on the
// same backend.
func TestFlood_SYNOnlyEntryShortTimeoutThenPromoted(t *testing.T) {
	r := cptest.New(t, floodFile("conntrack_syn_timeout_sec = 3"))
	a := cptest.TCP("100.64.0.1", specVIP4, 40000, 443, "S")
	b := cptest.TCP("100.64.0.2", specVIP4, 40000, 443, "S")
	r.Now = 10000
	onA := specForward(t, r.Send(a), "SYN a")
	specForward(t, r.Send(b), "SYN b")
	for _, e := range specEntries(r) {
		if !e.HalfOpen || e.IdleSec != 3 {
			t.Fatalf("entry after a SYN: %+v, want half-open with idle 3", e)
		}
	}
	r.Now = 11000
	rst := b
	rst.Flags = "R"
	if res := r.Send(rst); res.Track != dataplane.TrackHit {
		t.Fatalf("RST on a half-open entry: track %s, want hit", res.Track)
	}
	r.Now = 12999
	ack := a
	ack.Flags = "A"
	if res := r.Send(ack); res.Track != dataplane.TrackHit || res.BackendName() != onA {
		t.Fatalf("ACK within the SYN timeout: track %s on %s, want a hit on %s", res.Track, res.BackendName(), onA)
	}
	r.Now = 12999 + 3000 // b's RST is 4999 ms old (it kept b half-open), a's entry 3000 ms idle
	es := specEntries(r)
	if len(es) != 1 {
		t.Fatalf("entries %v, want only the promoted one", es)
	}
	for _, e := range es {
		if e.HalfOpen || e.IdleSec != 60 {
			t.Errorf("promoted entry %+v, want established with idle 60", e)
		}
	}
	if res := r.Send(ack); res.Track != dataplane.TrackHit || res.BackendName() != onA {
		t.Errorf("established flow after 3 s idle: track %s on %s, want a hit on %s", res.Track, res.BackendName(), onA)
	}
}

// TestFlood_NewEntryRateLimit: over conntrack_new_entry_rate a new flow is
// still forwarded (by Maglev) but not recorded, and counted; a second later
// the bucket has refilled and the flow's next packet records it, on the
// backend its SYN went to.
func TestFlood_NewEntryRateLimit(t *testing.T) {
	r := cptest.New(t, floodFile("conntrack_new_entry_rate = 100"))
	r.Now = 10000
	syn := func(i int) craft.Packet {
		return cptest.TCP(specAddr("100.64.0.0", i+1).String(), specVIP4, 40000, 443, "S")
	}
	first := make([]string, 150)
	for i := range 150 {
		res := r.Send(syn(i))
		first[i] = specForward(t, res, "SYN")
		if res.NotRecorded != (i >= 100) {
			t.Fatalf("SYN %d in the same millisecond: not recorded %v, want %v", i, res.NotRecorded, i >= 100)
		}
	}
	if n, nr := r.Conntrack().Len(), r.D.Stats().NotRecorded.Load(); n != 100 || nr != 50 {
		t.Fatalf("%d entries, %d not recorded; want 100 and 50", n, nr)
	}
	r.Now += 1000
	ack := syn(120)
	ack.Flags = "A"
	res := r.Send(ack)
	if res.Track != dataplane.TrackNew || res.NotRecorded || res.BackendName() != first[120] {
		t.Fatalf("next packet a second later: track %s not recorded %v on %s, want new, recorded, on %s",
			res.Track, res.NotRecorded, res.BackendName(), first[120])
	}
	if n := r.Conntrack().Len(); n != 101 {
		t.Errorf("%d entries, want 101", n)
	}
}

// TestCT4_MidFlowMissStartsOnProbation: a TCP packet that is not a SYN and
// misses (a flow that began elsewhere, or a forged one) is forwarded and
// recorded on probation: half-open, with conntrack_syn_timeout_sec. Alone
// it is gone after that timeout; a second packet of the flow within it
// (not a SYN, not a reset) confirms it: established, the service's
// timeout, the same backend. A reset does not confirm. A UDP flow's first
// packet is on probation with the service's own timeout (M1 unchanged),
// its second confirms it.
func TestCT4_MidFlowMissStartsOnProbation(t *testing.T) {
	r := cptest.New(t, floodFile("conntrack_syn_timeout_sec = 3"))
	keys := map[string]conntrack.Key{}
	send := func(name string, p craft.Packet) *cptest.Result {
		res := r.Send(p)
		keys[name] = res.TrackKey
		return res
	}
	entry := func(name string) (conntrack.Entry, bool) {
		k := keys[name]
		return r.Conntrack().Lookup(&k, r.Now)
	}
	r.Now = 10000
	lone := cptest.TCP("100.64.0.1", specVIP4, 40000, 443, "A")
	specForward(t, send("lone", lone), "lone ACK")
	if e, ok := entry("lone"); !ok || !e.HalfOpen || e.IdleSec != 3 {
		t.Fatalf("entry after a lone mid-flow ACK: %+v (found %v), want half-open with idle 3", e, ok)
	}
	rst := cptest.TCP("100.64.0.2", specVIP4, 40000, 443, "A")
	specForward(t, send("rst", rst), "ACK before a reset")
	rst.Flags = "R"
	r.Now = 11000
	if res := r.Send(rst); res.Track != dataplane.TrackHit {
		t.Fatalf("reset on a probation entry: track %s, want hit", res.Track)
	}
	moved := cptest.TCP("100.64.0.3", specVIP4, 40000, 443, "PA")
	onMoved := specForward(t, send("moved", moved), "first packet of a moved flow")
	r.Now = 12999
	if res := r.Send(moved); res.Track != dataplane.TrackHit || res.BackendName() != onMoved {
		t.Fatalf("second packet within the timeout: track %s on %s, want a hit on %s", res.Track, res.BackendName(), onMoved)
	}
	if e, ok := entry("moved"); !ok || e.HalfOpen || e.IdleSec != 60 {
		t.Fatalf("confirmed entry %+v (found %v), want established with idle 60", e, ok)
	}
	r.Now = 13000 // the lone ACK's entry is 3 s idle
	if _, ok := entry("lone"); ok {
		t.Error("a lone mid-flow ACK's entry outlived conntrack_syn_timeout_sec")
	}
	r.Now = 14000 // the reset kept its entry on probation: 3 s since it
	if _, ok := entry("rst"); ok {
		t.Error("a reset confirmed a probation entry")
	}

	udp := cptest.UDP("100.64.0.4", specVIP4, 5000, 443)
	dns := specSvc{Name: "dns", Protocol: "UDP", Affinity: "CLIENT_IP_PORT_PROTO", Primary: specAddrs("10.1.0.0", 8)}
	r2 := cptest.New(t, specFile(dns.String(),
		specRule{Name: "dns", VIP: specVIP4, Proto: "UDP", Ports: `ports = ["443"]`, Service: "dns"}.String()))
	r2.Now = 10000
	res := r2.Send(udp)
	specForward(t, res, "UDP first")
	k := res.TrackKey
	if e, ok := r2.Conntrack().Lookup(&k, r2.Now); !ok || !e.HalfOpen || e.IdleSec != 60 {
		t.Fatalf("UDP entry after its first packet: %+v (found %v), want half-open with the service's idle 60", e, ok)
	}
	r2.Now = 69999
	if res := r2.Send(udp); res.Track != dataplane.TrackHit {
		t.Fatalf("UDP second packet 59.999 s later: track %s, want hit", res.Track)
	}
	if e, ok := r2.Conntrack().Lookup(&k, r2.Now); !ok || e.HalfOpen || e.IdleSec != 60 {
		t.Fatalf("UDP entry after its second packet: %+v (found %v), want established", e, ok)
	}
}

// TestX3_MidFlowFloodIntoEstablishedTable: a table full of established
// connections (1024 entries, offered four times as many connections) under an ACK flood of 64 times its capacity: the flood is
// forwarded, every frame, and its entries are refused (counted, by the
// table and on the decision) or take the few slots left free and displace
// each other, so no established entry is evicted and every connection
// still hits its own backend.
func TestX3_MidFlowFloodIntoEstablishedTable(t *testing.T) {
	web := specSvc{Name: "web", Protocol: "TCP", Primary: specAddrs("10.1.0.0", 8)}
	r := cptest.New(t, specFileCap(1024, web.String(),
		specRule{Name: "web", VIP: specVIP4, Proto: "TCP", Ports: `ports = ["443"]`, Service: "web"}.String()))
	ct := r.Conntrack()
	conn := func(i int, flags string) craft.Packet {
		return cptest.TCP(specAddr("100.64.0.0", i/100+1).String(), specVIP4, uint16(30000+i%100), 443, flags)
	}
	r.Now = 1000
	var conns []int
	backend := map[int]string{}
	// Four connections per slot: the table fills until most new ones
	// find their buckets full of established entries and are refused.
	for i := range 4 * ct.Capacity() {
		specForward(t, r.Send(conn(i, "S")), "SYN")
		res := r.Send(conn(i, "A"))
		if res.Track == dataplane.TrackHit {
			conns = append(conns, i)
			backend[i] = res.BackendName()
		}
	}
	if len(conns) < ct.Capacity()/2 || ct.Stats().Refused == 0 {
		t.Fatalf("only %d established entries in a table of %d, %d refused: not full", len(conns), ct.Capacity(), ct.Stats().Refused)
	}
	refusedBefore := ct.Stats().Refused
	const flood = 64 * 1024
	refused := 0
	for n := range flood {
		p := cptest.TCP(specAddr("198.18.0.0", n/1000+1).String(), specVIP4, uint16(1024+n%1000), 443, "A")
		res := r.Send(p)
		specForward(t, res, "flood ACK")
		if res.Refused {
			refused++
		}
	}
	st := ct.Stats()
	t.Logf("%d established connections in a table of %d; ACK flood of %d: %d refused, evictions %d (%d half-open)",
		len(conns), ct.Capacity(), flood, refused, st.Evictions, st.EvictionsHalfOpen)
	if uint64(refused) != st.Refused-refusedBefore || refused == 0 {
		t.Errorf("refused: %d decisions, %d by the table; want equal and not 0", refused, st.Refused-refusedBefore)
	}
	if st.Evictions != st.EvictionsHalfOpen {
		t.Errorf("%d established entries evicted, want 0", st.Evictions-st.EvictionsHalfOpen)
	}
	for _, i := range conns {
		if res := r.Send(conn(i, "A")); res.Track != dataplane.TrackHit || res.BackendName() != backend[i] {
			t.Errorf("connection %d: track %s on %s, want a hit on %s", i, res.Track, res.BackendName(), backend[i])
		}
	}
}

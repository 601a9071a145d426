package dataplane_test

import (
	"encoding/binary"
	"strings"
	"testing"
	"time"

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
	base := cptest.TCP("198.18.0.1", specVIP4, 1, 443, "S")
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
	t.Logf("SYN flood of %d new flows into a %d-entry table at %d kpps of engine time (%.0f kpps decided on this machine, keep-alives included), "+
		"backend %s (%d of the %d connections) failed halfway", flood, ct.Capacity(), perMs, float64(flood)/took.Seconds()/1000,
		victim, onVictim, established)
	t.Logf("established connections broken: %d of %d (%d keep-alive packets); flood forwarded %d",
		broken, established, keepalives, floodFwd)
	t.Logf("evictions: %d half-open, %d established; spills %d, moves %d, reclaimed %d; not recorded %d; entries %d",
		st.EvictionsHalfOpen, st.Evictions-st.EvictionsHalfOpen, st.Spills, st.Moves, st.Reclaimed, notRec, ct.Len())
	if broken != 0 {
		t.Errorf("%d established connections broken, want 0", broken)
	}
	if floodFwd != flood {
		t.Errorf("%d of %d flood SYNs forwarded, want all (a full table evicts, never drops)", floodFwd, flood)
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

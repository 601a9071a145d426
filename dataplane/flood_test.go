package dataplane_test

import (
	"encoding/binary"
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

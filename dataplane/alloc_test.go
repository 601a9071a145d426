package dataplane_test

import (
	"strings"

	"net/netip"
	"testing"
	"xlb/controlplane"
	"xlb/controlplane/cptest"
	"xlb/controlplane/sim"

	"xlb/conntrack"
	"xlb/dataplane"
	"xlb/dataplane/craft"
	"xlb/dataplane/packet"
)

// TestProcessDoesNotAllocate: Decider.Process allocates nothing per frame on
// any path — every kind of traffic, forwarded, dropped or passed. Each case
// first checks (with Decide) that its frame takes the path it names, so the
// allocation count is measured where it claims to be. Each case runs
// with flow sync off and on (the decider pushes to a ring).
func TestProcessDoesNotAllocate(t *testing.T) {
	for _, sync := range []bool{false, true} {
		name := "flowsync-off"
		if sync {
			name = "flowsync-on"
		}
		t.Run(name, func(t *testing.T) { processDoesNotAllocate(t, sync) })
	}
}

func processDoesNotAllocate(t *testing.T, sync bool) {
	eng, _ := benchEngine(t, conntrack.MinCapacity)
	if sync {
		eng.EnableFlowSync(1024)
	}
	dc := eng.NewDecider()
	router4 := netip.MustParseAddr("192.0.2.99")
	router6 := netip.MustParseAddr("2001:db8:e::99")
	c4, c6 := netip.MustParseAddr("100.64.0.1"), netip.MustParseAddr("2001:db8:c::1")
	tcp := func(src, dst netip.Addr, flags string) craft.Packet {
		return craft.Packet{Src: src, Dst: dst, Proto: packet.ProtoTCP, SrcPort: 40000, DstPort: 80, Flags: flags}
	}
	// The VIP's reply to the client, as an ICMP error quotes it.
	reply := func(vip, client netip.Addr) *craft.Packet {
		return &craft.Packet{Src: vip, Dst: client, Proto: packet.ProtoTCP, SrcPort: 80, DstPort: 40000, Flags: "A"}
	}
	build := func(p craft.Packet) []byte {
		t.Helper()
		f, err := craft.Build(&p)
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	// Flows that the established cases, the encapsulation cases and the
	// ICMP errors find in the table.
	for _, vip := range []netip.Addr{benchVIPWeb4, benchVIPIPIP, benchVIPGUE4, benchVIPGUE6} {
		allocDecide(t, dc, build(tcp(c4, vip, "S")))
	}
	allocDecide(t, dc, build(tcp(c6, benchVIPWeb6, "S")))

	synFrame := build(tcp(c4, benchVIPWeb4, "S"))
	arp := make([]byte, 42) // broadcast who-has, EtherType 0x0806
	copy(arp, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02, 0, 0, 0, 0, 1, 0x08, 0x06, 0, 1, 0x08, 0, 6, 4, 0, 1})
	for _, tc := range []struct {
		name    string
		frame   []byte
		verdict dataplane.Verdict
		reason  dataplane.Reason
		track   dataplane.Track
		steered bool
	}{
		{"established TCP", build(tcp(c4, benchVIPWeb4, "A")), dataplane.VerdictForward, 0, dataplane.TrackHit, false},
		{"SYN", synFrame, dataplane.VerdictForward, 0, dataplane.TrackNew, false},
		{"untracked UDP", build(craft.Packet{Src: c4, Dst: benchVIPWeb4, Proto: packet.ProtoUDP, SrcPort: 5353, DstPort: 53}),
			dataplane.VerdictForward, 0, dataplane.TrackUntracked, false},
		{"IPv6 established TCP", build(tcp(c6, benchVIPWeb6, "A")), dataplane.VerdictForward, 0, dataplane.TrackHit, false},
		{"ICMP error steering", build(craft.Packet{Src: router4, Dst: benchVIPWeb4, Proto: packet.ProtoICMP, ICMPType: 3, ICMPCode: 4,
			Inner: reply(benchVIPWeb4, c4)}), dataplane.VerdictForward, 0, dataplane.TrackHit, true},
		{"ICMPv6 packet too big steering", build(craft.Packet{Src: router6, Dst: benchVIPWeb6, Proto: packet.ProtoICMPv6, ICMPType: 2,
			Inner: reply(benchVIPWeb6, c6)}), dataplane.VerdictForward, 0, dataplane.TrackHit, true},
		{"IPIP encapsulation", build(tcp(c4, benchVIPIPIP, "A")), dataplane.VerdictForward, 0, dataplane.TrackHit, false},
		{"GUE encapsulation", build(tcp(c4, benchVIPGUE4, "A")), dataplane.VerdictForward, 0, dataplane.TrackHit, false},
		{"GUE encapsulation, IPv6 outer", build(tcp(c4, benchVIPGUE6, "A")), dataplane.VerdictForward, 0, dataplane.TrackHit, false},
		{"L3_DEFAULT ESP", build(craft.Packet{Src: c4, Dst: benchVIPWeb4, Proto: packet.ProtoESP}),
			dataplane.VerdictForward, 0, dataplane.TrackNew, false},
		{"malformed VIP frame", synFrame[:len(synFrame)-30], dataplane.VerdictDrop, dataplane.ReasonMalformed, 0, false},
		{"no rule", build(craft.Packet{Src: c4, Dst: benchVIPIPIP, Proto: packet.ProtoTCP, SrcPort: 40000, DstPort: 81}),
			dataplane.VerdictDrop, dataplane.ReasonNoRule, 0, false},
		{"source not allowed", build(tcp(netip.MustParseAddr("198.18.0.1"), benchVIPAllow, "S")),
			dataplane.VerdictDrop, dataplane.ReasonSourceNotAllowed, 0, false},
		{"martian source", build(tcp(netip.MustParseAddr("127.0.0.1"), benchVIPWeb4, "A")),
			dataplane.VerdictDrop, dataplane.ReasonMartianSource, 0, false},
		{"source is a VIP", build(tcp(benchVIPIPIP, benchVIPWeb4, "A")),
			dataplane.VerdictDrop, dataplane.ReasonSourceIsVIP, 0, false},
		{"not our MAC", func() []byte { f := build(tcp(c4, benchVIPWeb4, "A")); f[0] = 0xff; return f }(),
			dataplane.VerdictDrop, dataplane.ReasonNotOurMAC, 0, false},
		{"non-VIP pass", build(tcp(c4, benchNotVIP, "S")), dataplane.VerdictPass, 0, 0, false},
		{"ARP pass", arp, dataplane.VerdictPass, 0, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := allocDecide(t, dc, tc.frame)
			if d.Verdict != tc.verdict || d.Reason != tc.reason {
				t.Fatalf("decision %v %v, want %v %v", d.Verdict, d.Reason, tc.verdict, tc.reason)
			}
			if tc.verdict == dataplane.VerdictForward && (d.Track != tc.track || d.ICMPSteered != tc.steered) {
				t.Fatalf("track %v steered %v, want %v %v", d.Track, d.ICMPSteered, tc.track, tc.steered)
			}
			processAllocs(t, dc, tc.frame, benchClock(), tc.verdict, tc.reason)
		})
	}
}

// allocDecide runs one frame through dc.Decide, as a NIC would hand it over.
func allocDecide(tb testing.TB, dc *dataplane.Decider, frame []byte) dataplane.Decision {
	tb.Helper()
	buf := make([]byte, dataplane.Headroom+len(frame)+dataplane.Headroom)
	copy(buf[dataplane.Headroom:], frame)
	f := dataplane.Frame{Buf: buf, Off: dataplane.Headroom, Len: len(frame)}
	return dc.Decide(&f, benchClock())
}

// TestProcessDoesNotAllocate_FloodAndDrainPaths: the flood and drain
// paths allocate nothing per frame either: a new flow over the new-entry rate
// (forwarded, not recorded) and a new flow to a rule a reload removed
// while it drains (dropped as vip-draining).
func TestProcessDoesNotAllocate_FloodAndDrainPaths(t *testing.T) {
	// ipip4 drains a minute; the reload below removes its rule.
	text := strings.Replace(cptest.Testdata(t, "bench.toml"), "forwarding_method = \"IPIP\"\n",
		"forwarding_method = \"IPIP\"\nconnection_draining_timeout_sec = 60\n", 1)
	ct, err := conntrack.New(conntrack.MinCapacity)
	if err != nil {
		t.Fatal(err)
	}
	eng := dataplane.NewEngine(ct)
	eng.SetFloodLimits(dataplane.FloodLimits{NewPerSec: 1})
	cp, err := controlplane.New(cptest.Config(t, text), eng, controlplane.Options{
		Local: sim.SimLocal(), InitialHealthy: true, InitialWeight: 1000,
	}, benchClock())
	if err != nil {
		t.Fatal(err)
	}
	rule := text[strings.Index(text, "[[forwarding_rule]]\nname = \"ipip-v4\""):]
	rule = rule[:strings.Index(rule[1:], "[[forwarding_rule]]")+1]
	if _, err := cp.Apply(cptest.Config(t, strings.Replace(text, rule, "", 1)), benchClock()); err != nil {
		t.Fatal(err)
	}
	dc := eng.NewDecider()
	// One clock reading for every frame: no token comes back meanwhile.
	now := benchClock()
	decide := func(frame []byte) dataplane.Decision {
		buf := make([]byte, dataplane.Headroom+len(frame)+dataplane.Headroom)
		copy(buf[dataplane.Headroom:], frame)
		f := dataplane.Frame{Buf: buf, Off: dataplane.Headroom, Len: len(frame)}
		return dc.Decide(&f, now)
	}
	syn := func(src string, vip netip.Addr) []byte {
		f, err := craft.Build(&craft.Packet{Src: netip.MustParseAddr(src), Dst: vip, Proto: packet.ProtoTCP,
			SrcPort: 40000, DstPort: 80, Flags: "S"})
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	// The decider's one token of burst goes to a first new flow.
	if d := decide(syn("100.64.9.1", benchVIPWeb4)); d.Track != dataplane.TrackNew || d.NotRecorded {
		t.Fatalf("first new flow: track %v not recorded %v, want recorded", d.Track, d.NotRecorded)
	}
	for _, tc := range []struct {
		name        string
		frame       []byte
		verdict     dataplane.Verdict
		reason      dataplane.Reason
		notRecorded bool
	}{
		{"new flow over the new-entry rate", syn("100.64.9.2", benchVIPWeb4), dataplane.VerdictForward, 0, true},
		{"new flow to a draining rule", syn("100.64.9.3", benchVIPIPIP), dataplane.VerdictDrop, dataplane.ReasonVIPDraining, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if d := decide(tc.frame); d.Verdict != tc.verdict || d.Reason != tc.reason || d.NotRecorded != tc.notRecorded {
				t.Fatalf("decision %v %v not recorded %v, want %v %v %v", d.Verdict, d.Reason, d.NotRecorded,
					tc.verdict, tc.reason, tc.notRecorded)
			}
			processAllocs(t, dc, tc.frame, now, tc.verdict, tc.reason)
		})
	}
}

// processAllocs runs frame through dc.Process again and again, as a worker
// would (the rewrite works in place: each run starts from the received
// frame), and fails t unless the verdict is verdict/reason and no run
// allocates.
func processAllocs(t *testing.T, dc *dataplane.Decider, frame []byte, now int64, verdict dataplane.Verdict, reason dataplane.Reason) {
	t.Helper()
	buf := make([]byte, dataplane.Headroom+len(frame)+dataplane.Headroom)
	batch := make([]dataplane.Frame, 1)
	allocs := testing.AllocsPerRun(200, func() {
		copy(buf[dataplane.Headroom:], frame)
		batch[0] = dataplane.Frame{Buf: buf, Off: dataplane.Headroom, Len: len(frame)}
		dc.Process(batch, now)
	})
	if batch[0].Verdict != verdict || batch[0].Reason != reason {
		t.Fatalf("Process: %v %v, want %v %v", batch[0].Verdict, batch[0].Reason, verdict, reason)
	}
	if allocs != 0 {
		t.Errorf("%v allocations per Process", allocs)
	}
}

// TestProcessDoesNotAllocate_FlowSyncPushes: a batch that pushes a record
// (a connection's SYN, then the ACK that confirms its entry) allocates
// nothing, whether the ring has room (a consumer pops as the sync
// goroutine would) or is full (the record is dropped and counted).
func TestProcessDoesNotAllocate_FlowSyncPushes(t *testing.T) {
	eng, _ := benchEngine(t, conntrack.MinCapacity)
	eng.EnableFlowSync(64)
	dc := eng.NewDecider()
	ring := eng.SyncRings()[0]
	c4 := netip.MustParseAddr("100.64.0.1")
	var frames [2][]byte
	for i, flags := range []string{"S", "A"} {
		f, err := craft.Build(&craft.Packet{Src: c4, Dst: benchVIPWeb4, Proto: packet.ProtoTCP, SrcPort: 40000, DstPort: 80, Flags: flags})
		if err != nil {
			t.Fatal(err)
		}
		frames[i] = f
	}
	var bufs [2][]byte
	for i := range bufs {
		bufs[i] = make([]byte, dataplane.Headroom+len(frames[i])+dataplane.Headroom)
	}
	batch := make([]dataplane.Frame, 2)
	popped := make([]dataplane.SyncRecord, 64)
	now := benchClock()
	run := func() {
		for i := range batch {
			copy(bufs[i][dataplane.Headroom:], frames[i])
			batch[i] = dataplane.Frame{Buf: bufs[i], Off: dataplane.Headroom, Len: len(frames[i])}
		}
		dc.Process(batch, now)
	}
	const runs = 200
	for _, tc := range []struct {
		name    string
		consume bool
	}{{"ring with room", true}, {"full ring", false}} {
		t.Run(tc.name, func(t *testing.T) {
			p0, d0 := ring.Pushed(), ring.Drops()
			allocs := testing.AllocsPerRun(runs, func() {
				run()
				if tc.consume {
					ring.Pop(popped)
				}
			})
			if batch[0].Verdict != dataplane.VerdictForward || batch[1].Verdict != dataplane.VerdictForward {
				t.Fatalf("verdicts %v %v, want forward", batch[0].Verdict, batch[1].Verdict)
			}
			// AllocsPerRun runs once more than asked (a warm-up).
			pushed, dropped := ring.Pushed()-p0, ring.Drops()-d0
			if pushed+dropped != runs+1 || (tc.consume && dropped != 0) || (!tc.consume && dropped == 0) {
				t.Fatalf("%d records pushed and %d dropped in %d runs", pushed, dropped, runs+1)
			}
			if allocs != 0 {
				t.Errorf("%v allocations per Process", allocs)
			}
		})
	}
}

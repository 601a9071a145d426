package controlplane_test

// Proofs of SPEC §5.2 (choosing one backend, S1–S6), driven with real frames
// through cptest.Rig.

import (
	"fmt"
	"net/netip"
	"slices"
	"testing"

	"xlb/conntrack"
	"xlb/controlplane/cptest"
	"xlb/dataplane"
	"xlb/dataplane/craft"
	"xlb/dataplane/packet"
	"xlb/maglev"
)

// udpFlows are n untracked datagrams (affinity NONE: UDP is not tracked,
// CT3), so every one of them is a fresh selection (step 2).
func udpFlows(seed uint64, n int) []craft.Packet {
	ps := clients(seed, n)
	for i := range ps {
		ps[i] = udpOf(ps[i])
	}
	return ps
}

func TestS1_MaglevLookupOfSelectionHash(t *testing.T) {
	for _, affinity := range []string{"NONE", "CLIENT_IP_PROTO", "CLIENT_IP"} {
		t.Run(affinity, func(t *testing.T) {
			r := svc{affinity: affinity, groups: primaries("b1", "b2", "b3", "b4", "b5")}.rig(t)
			r.Health("b4", false)
			s := service(r, "web")
			for _, p := range clients(1, 2000) {
				res := r.Send(p)
				src, dst := dataplane.Addr16(p.Src), dataplane.Addr16(p.Dst)
				// The selection hash of §2 for this affinity...
				var h uint64
				switch affinity {
				case "NONE":
					h = dataplane.FlowHash(&src, &dst, p.SrcPort, p.DstPort, packet.ProtoTCP, uint8(conntrack.Kind5T))
				case "CLIENT_IP_PROTO":
					h = dataplane.FlowHash(&src, &dst, 0, 0, packet.ProtoTCP, uint8(conntrack.Kind3T))
				case "CLIENT_IP":
					h = dataplane.FlowHash(&src, &dst, 0, 0, 0, uint8(conntrack.Kind2T))
				}
				if res.SelHash != h {
					t.Fatalf("%v: selection hash %#x, want %#x", p, res.SelHash, h)
				}
				// ...looked up in the Maglev table of the eligible set.
				want := s.Eligible[maglev.Lookup(s.Table, h)]
				if res.Backend == nil || res.Backend.Ref != want {
					t.Fatalf("%v: backend %s, want the table's %s", p, res.BackendName(), r.CP.Snapshot().Backend(want).Name)
				}
				if res.BackendName() == "b4" {
					t.Fatalf("%v: sent to unhealthy b4", p)
				}
			}
		})
	}
}

func TestS2_SharesOfNewConnections(t *testing.T) {
	const n = 20000
	for _, tc := range []struct {
		name     string
		weighted bool
		weights  []uint32 // per backend b1, b2...; nil: unweighted
		backends int
	}{
		{"unweighted 2", false, nil, 2},
		{"unweighted 3", false, nil, 3},
		{"unweighted 5", false, nil, 5},
		{"weights 1 and 4", true, []uint32{1, 4}, 2},
		// (b1 with weight 0 is not even eligible, E2/E6: its share is 0.)
		{"weights 0, 2 and 6", true, []uint32{0, 2, 6}, 3},
		{"weights 1000 each", true, []uint32{1000, 1000, 1000, 1000}, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var names []string
			for i := 1; i <= tc.backends; i++ {
				names = append(names, fmt.Sprintf("b%d", i))
			}
			r := svc{weighted: tc.weighted, groups: primaries(names...)}.rig(t)
			var sum uint32
			for i, w := range tc.weights {
				r.Weight(names[i], w)
				sum += w
			}
			got := sendAll(r, clients(uint64(tc.backends), n))
			for i, name := range names {
				want := 1 / float64(tc.backends)
				if tc.weights != nil {
					want = float64(tc.weights[i]) / float64(sum)
				}
				near(t, name, got.share(name), want, 0.015)
				t.Logf("%s: %.2f %% of %d new connections (%.2f %% of the table), expected %.2f %%",
					name, 100*got.share(name), n, 100*tableShare(r, "web", name), 100*want)
			}
		})
	}
}

func TestS3_SameHashSameBackendWhileStable(t *testing.T) {
	for _, weighted := range []bool{false, true} {
		t.Run(fmt.Sprintf("weighted=%v", weighted), func(t *testing.T) {
			r := svc{weighted: weighted, groups: primaries("b1", "b2", "b3", "b4")}.rig(t)
			apply(r, map[string]state{"b1": up(100), "b2": up(200), "b3": up(300), "b4": down(400)})
			flows := udpFlows(3, 5000)
			first := route(r, flows)
			// Events that change nothing (a weight reported again, health
			// confirmed, a republish) and time passing keep the mapping.
			r.At(30)
			r.Weight("b2", 200)
			r.Health("b1", true)
			r.CP.Publish(r.Now)
			for i, b := range route(r, flows) {
				if b != first[i] || b == "" || b == "b4" {
					t.Fatalf("flow %d: %q then %q", i, first[i], b)
				}
			}
		})
	}
	t.Run("one hash, many packets", func(t *testing.T) {
		// With affinity CLIENT_IP every packet of a client has the same
		// selection hash (2T), whatever its protocol and ports: one backend.
		r := svc{affinity: "CLIENT_IP", groups: primaries("b1", "b2", "b3", "b4")}.rig(t)
		for i, c := range clients(4, 300) {
			src := c.Src.String()
			ps := []craft.Packet{c, cptest.TCP(src, vip, c.SrcPort+1, 443, "S"), udpOf(c),
				cptest.Proto(src, vip, packet.ProtoICMP), cptest.Proto(src, vip, packet.ProtoGRE)}
			first := r.Send(ps[0])
			for _, p := range ps[1:] {
				res := r.Send(p)
				if res.SelHash != first.SelHash || res.BackendName() != first.BackendName() || res.BackendName() == "" {
					t.Fatalf("client %d, %s: hash %#x to %q; first packet hash %#x to %q",
						i, p.Proto.String(), res.SelHash, res.BackendName(), first.SelHash, first.BackendName())
				}
			}
		}
	})
}

// moved counts the flows that were not on backend gone before and are on
// another backend after; it returns that count and the number of such flows.
func moved(before, after []string, gone string) (n, of int) {
	for i := range before {
		if before[i] == gone {
			continue
		}
		of++
		if after[i] != before[i] {
			n++
		}
	}
	return n, of
}

func TestS4_MinimalDisruption(t *testing.T) {
	var names []string
	for i := 1; i <= 10; i++ {
		names = append(names, fmt.Sprintf("b%d", i))
	}
	r := svc{weighted: true, groups: primaries(names...)}.rig(t)
	flows := udpFlows(5, 20000)
	before := route(r, flows)

	check := func(what, changed string, limit float64) []string {
		t.Helper()
		after := route(r, flows)
		n, of := moved(before, after, changed)
		frac := float64(n) / float64(of)
		t.Logf("S4 %s: %d of %d flows of the other backends moved (%.3f %%)", what, n, of, 100*frac)
		if frac > limit {
			t.Errorf("%s: %.3f %% of the other backends' flows moved, want <= %.1f %%", what, 100*frac, 100*limit)
		}
		return after
	}
	// Removing b7 from the eligible set: every flow of b7 moves (it is not
	// eligible); the others' flows nearly all stay.
	r.Health("b7", false)
	after := check("remove b7 of 10", "b7", 0.01)
	for i := range flows {
		if after[i] == "b7" {
			t.Fatalf("flow %d still on unhealthy b7", i)
		}
	}
	// Adding it back restores the very same table (S3/S5): nothing moves.
	r.Health("b7", true)
	if n, _ := moved(before, route(r, flows), ""); n != 0 {
		t.Errorf("b7 back: %d flows differ from the start", n)
	}
	// Adding a new backend: only flows that go to it should move.
	r.Health("b3", false)
	before = route(r, flows)
	r.Health("b3", true)
	after = route(r, flows)
	stolen, wrong := 0, 0
	for i := range flows {
		if after[i] != before[i] {
			if after[i] == "b3" {
				stolen++
			} else {
				wrong++
			}
		}
	}
	t.Logf("S4 add b3 to 9: %d flows moved to b3, %d of %d moved between the others (%.3f %%)",
		stolen, wrong, len(flows), 100*float64(wrong)/float64(len(flows)))
	if float64(wrong)/float64(len(flows)) > 0.01 {
		t.Errorf("adding b3: %d flows moved between other backends", wrong)
	}
	// Re-weighting one backend.
	before = after
	r.Weight("b5", 500)
	check("re-weight b5 1000 -> 500", "b5", 0.01)
}

// s5A and s5B list the same backends in a different order and grouping.
var (
	s5A = svc{weighted: true, groups: []group{
		{name: "a", backends: []string{"b1", "b2", "b3"}},
		{name: "b", backends: []string{"b4", "b5", "b6"}},
	}}
	s5B = svc{weighted: true, groups: []group{
		{name: "x", backends: []string{"b6", "b4"}},
		{name: "y", backends: []string{"b5", "b3", "b2", "b1"}},
	}}
)

func TestS5_IdenticalChoicesAcrossInstances(t *testing.T) {
	a := s5A.rig(t)
	// Instance b starts with one more backend, listed first, which a reload
	// then removes: its slots and refs differ from a's; only the
	// configuration (as a set) and the state agree.
	extra := s5B
	extra.groups = append([]group{{name: "w", backends: []string{"n9"}}}, s5B.groups...)
	b := extra.rig(t)
	b.Reload(s5B.text(t))
	states := map[string]state{"b1": up(100), "b2": up(250), "b3": down(900), "b4": up(0), "b5": up(1000), "b6": up(640)}
	apply(a, states)
	// b receives the same reports in another order.
	for _, n := range []string{"b6", "b5", "b4", "b3", "b2", "b1"} {
		b.Weight(n, states[n].w)
		b.Health(n, states[n].up)
	}
	if backendNamed(a, "b1").Ref == backendNamed(b, "b1").Ref {
		t.Fatal("premise: b1 should sit in different slots on the two instances")
	}
	if ea, eb := eligible(a, "web"), eligible(b, "web"); !slices.Equal(ea, eb) {
		t.Fatalf("eligible sets differ: %v and %v", ea, eb)
	}
	// Bit-identical tables, slot by slot, by backend identity.
	sa, sb := service(a, "web"), service(b, "web")
	snapA, snapB := a.CP.Snapshot(), b.CP.Snapshot()
	for i := range sa.Table {
		na, nb := snapA.Backend(sa.Eligible[sa.Table[i]]).Name, snapB.Backend(sb.Eligible[sb.Table[i]]).Name
		if na != nb {
			t.Fatalf("table slot %d: %s and %s", i, na, nb)
		}
	}
	flows := clients(55, 10000)
	ra, rb := route(a, flows), route(b, flows)
	for i := range flows {
		if ra[i] != rb[i] || ra[i] == "" {
			t.Fatalf("flow %d (%v:%d): %q and %q", i, flows[i].Src, flows[i].SrcPort, ra[i], rb[i])
		}
	}
	t.Logf("S5: %d flows, identical backends on both instances", len(flows))

	// The fingerprint an operator compares across a fleet agrees too, and
	// tells the instances apart as soon as their health views differ.
	fa, fb := snapA.Fingerprint(sa), snapB.Fingerprint(sb)
	if fa != fb || len(fa) != 16 {
		t.Fatalf("fingerprints %q and %q, want the same 16 hex digits", fa, fb)
	}
	if sa.Fingerprint != fa || sb.Fingerprint != fb {
		t.Errorf("published fingerprints %q and %q, computed %q and %q", sa.Fingerprint, sb.Fingerprint, fa, fb)
	}
	b.Health("b2", false)
	if pub := service(b, "web").Fingerprint; pub != b.CP.Snapshot().Fingerprint(service(b, "web")) {
		t.Errorf("b2 down: published fingerprint %s is not the table's", pub)
	}
	if fb2 := b.CP.Snapshot().Fingerprint(service(b, "web")); fb2 == fa {
		t.Errorf("b2 down on one instance only: fingerprints still equal (%s)", fa)
	}
	b.Weight("b6", 641)
	b.Health("b2", true)
	if fb3 := b.CP.Snapshot().Fingerprint(service(b, "web")); fb3 == fa {
		t.Errorf("b6 weighted 641 on one instance only: fingerprints still equal (%s)", fa)
	}
	b.Weight("b6", 640)
	if fb4 := b.CP.Snapshot().Fingerprint(service(b, "web")); fb4 != fa {
		t.Errorf("views agree again: fingerprints %s and %s", fa, fb4)
	}
}

func TestS6_EmptySetDroppedAndCountedPerService(t *testing.T) {
	web := svc{name: "web", drop: true, groups: []group{
		{name: "pool", backends: []string{"p1", "p2"}},
		{name: "spare", failover: true, backends: []string{"f1"}},
	}}
	api := svc{name: "api", vip: "203.0.113.20", groups: primaries("b1", "b2")}
	r := cptest.New(t, configText(t, web, api))
	for _, n := range []string{"p1", "p2", "f1"} {
		r.Health(n, false)
	}
	webID, apiID := service(r, "web").ID, service(r, "api").ID

	got := sendAll(r, clients(6, 500))
	if got.drops[dataplane.ReasonNoEligibleBackend] != 500 {
		t.Fatalf("web: %v forwarded, drops %v; want 500 no-eligible-backend drops", got.by, got.drops)
	}
	apiPackets := clients(7, 300)
	for i := range apiPackets {
		apiPackets[i].Dst = netip.MustParseAddr("203.0.113.20")
	}
	if a := sendAll(r, apiPackets); len(a.drops) != 0 {
		t.Fatalf("api: drops %v", a.drops)
	}
	stats := r.D.Stats()
	if n := stats.Service(webID).Drops[dataplane.ReasonNoEligibleBackend].Load(); n != 500 {
		t.Errorf("web no-eligible-backend drops: %d, want 500", n)
	}
	if n := stats.Service(apiID).Drops[dataplane.ReasonNoEligibleBackend].Load(); n != 0 {
		t.Errorf("api no-eligible-backend drops: %d, want 0", n)
	}
	if n := stats.Service(apiID).Forward.Load(); n != 300 {
		t.Errorf("api forwards: %d, want 300", n)
	}
	if n := stats.Drops[dataplane.ReasonNoEligibleBackend].Load(); n != 500 {
		t.Errorf("worker no-eligible-backend drops: %d, want 500", n)
	}

	// Draining every backend of api (M5) empties its set too.
	for _, n := range []string{"b1", "b2"} {
		if _, err := r.CP.Drain(n, r.Now); err != nil {
			t.Fatal(err)
		}
	}
	if a := sendAll(r, apiPackets[:100]); a.drops[dataplane.ReasonNoEligibleBackend] != 100 {
		t.Errorf("api drained: %v forwarded, drops %v", a.by, a.drops)
	}
	if n := stats.Service(apiID).Drops[dataplane.ReasonNoEligibleBackend].Load(); n != 100 {
		t.Errorf("api no-eligible-backend drops after draining: %d, want 100", n)
	}
}

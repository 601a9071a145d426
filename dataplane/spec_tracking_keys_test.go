package dataplane_test

// Engine-level proofs of SPEC §3 (T1–T4), §4 (CT1–CT4), §5.3 (R1) and X3.

import (
	"fmt"
	"net/netip"
	"testing"

	"xlb/conntrack"
	"xlb/controlplane/cptest"
	"xlb/dataplane"
	"xlb/dataplane/craft"
	"xlb/dataplane/packet"
)

var specModes = []string{"PER_CONNECTION", "PER_SESSION"}

// specClass names a packet class of the T2 table.
type specClass struct {
	name  string
	proto packet.Proto
	frag  craft.Frag
}

var specClasses = []specClass{
	{"tcp", packet.ProtoTCP, craft.FragNone},
	{"tcp first fragment", packet.ProtoTCP, craft.FragFirst},
	{"tcp later fragment", packet.ProtoTCP, craft.FragMiddle},
	{"udp", packet.ProtoUDP, craft.FragNone},
	{"udp first fragment", packet.ProtoUDP, craft.FragFirst},
	{"udp later fragment", packet.ProtoUDP, craft.FragLast},
	{"esp", packet.ProtoESP, craft.FragNone},
	{"esp fragment", packet.ProtoESP, craft.FragMiddle},
	{"gre", packet.ProtoGRE, craft.FragNone},
	{"icmp", packet.ProtoICMP, craft.FragNone},
	{"icmpv6", packet.ProtoICMPv6, craft.FragNone},
}

// specT2 is SPEC T2's table, cell by cell, keyed by affinity and mode, then
// by "tcp", "tcp-frag", "udp", "udp-frag", "esp", "gre". A class that a cell
// does not list is not tracked (T1). Fragmented TCP is keyed like fragmented
// UDP [ext].
var specT2 = map[[2]string]map[string]conntrack.Kind{
	{"NONE", "PER_CONNECTION"}: {"tcp": conntrack.Kind5T, "tcp-frag": conntrack.Kind3T},
	{"NONE", "PER_SESSION"}:    {"tcp": conntrack.Kind5T, "tcp-frag": conntrack.Kind3T},
	{"CLIENT_IP_PORT_PROTO", "PER_CONNECTION"}: {"tcp": conntrack.Kind5T, "udp": conntrack.Kind5T,
		"tcp-frag": conntrack.Kind3T, "udp-frag": conntrack.Kind3T, "esp": conntrack.Kind3T, "gre": conntrack.Kind3T},
	{"CLIENT_IP_PORT_PROTO", "PER_SESSION"}: {"tcp": conntrack.Kind5T, "udp": conntrack.Kind5T,
		"tcp-frag": conntrack.Kind3T, "udp-frag": conntrack.Kind3T, "esp": conntrack.Kind3T, "gre": conntrack.Kind3T},
	{"CLIENT_IP_PROTO", "PER_CONNECTION"}: {"tcp": conntrack.Kind5T, "udp": conntrack.Kind5T,
		"tcp-frag": conntrack.Kind3T, "udp-frag": conntrack.Kind3T, "esp": conntrack.Kind3T, "gre": conntrack.Kind3T},
	{"CLIENT_IP_PROTO", "PER_SESSION"}: {"tcp": conntrack.Kind3T, "udp": conntrack.Kind3T,
		"tcp-frag": conntrack.Kind3T, "udp-frag": conntrack.Kind3T, "esp": conntrack.Kind3T, "gre": conntrack.Kind3T},
	{"CLIENT_IP", "PER_CONNECTION"}: {"tcp": conntrack.Kind5T, "udp": conntrack.Kind5T,
		"tcp-frag": conntrack.Kind3T, "udp-frag": conntrack.Kind3T, "esp": conntrack.Kind3T, "gre": conntrack.Kind3T},
	{"CLIENT_IP", "PER_SESSION"}: {"tcp": conntrack.Kind2T, "udp": conntrack.Kind2T,
		"tcp-frag": conntrack.Kind2T, "udp-frag": conntrack.Kind2T, "esp": conntrack.Kind2T, "gre": conntrack.Kind2T},
}

// specT2Kind looks a packet class up in specT2.
func specT2Kind(affinity, mode string, c specClass) (conntrack.Kind, bool) {
	col := c.proto.String()
	if c.frag != craft.FragNone && (c.proto == packet.ProtoTCP || c.proto == packet.ProtoUDP) {
		col += "-frag"
	}
	k, ok := specT2[[2]string{affinity, mode}][col]
	return k, ok
}

// specClassPacket is a packet of class c from client to the VIP of its family.
func specClassPacket(c specClass, client int, sport uint16) craft.Packet {
	src, dst := specAddr("198.18.0.0", client), netip.MustParseAddr(specVIP4)
	if c.proto == packet.ProtoICMPv6 {
		src, dst = specAddr("2001:db8:c::", client), netip.MustParseAddr(specVIP6)
	}
	return specPacket(src, dst, c.proto, sport, 443, c.frag)
}

// specWantKey is the exact key T2 gives a packet: the kind's fields and
// nothing else, scoped by the service.
func specWantKey(kind conntrack.Kind, p craft.Packet, service uint16) conntrack.Key {
	k := conntrack.Key{Src: dataplane.Addr16(p.Src), Dst: dataplane.Addr16(p.Dst), Kind: kind, Service: service}
	if kind != conntrack.Kind2T {
		k.Proto = uint8(p.Proto)
	}
	if kind == conntrack.Kind5T {
		k.SrcPort, k.DstPort = p.SrcPort, p.DstPort
	}
	return k
}

// specEntries returns every live entry of the rig's table.
func specEntries(r *cptest.Rig) map[conntrack.Key]conntrack.Entry {
	m := map[conntrack.Key]conntrack.Entry{}
	r.Conntrack().Range(r.Now, func(k conntrack.Key, e conntrack.Entry) bool {
		m[k] = e
		return true
	})
	return m
}

// ---------------------------------------------------------------- T1

func TestT1_TrackableProtocols(t *testing.T) {
	// T1 in its own words.
	trackable := func(affinity string, proto packet.Proto) bool {
		switch proto {
		case packet.ProtoTCP:
			return true
		case packet.ProtoUDP, packet.ProtoESP, packet.ProtoGRE:
			return affinity != "NONE"
		}
		return false
	}
	for _, aff := range specAffinities {
		for _, mode := range specModes {
			t.Run(aff+"/"+mode, func(t *testing.T) {
				r := specL3Rig(t, aff, mode, 4)
				for i, c := range specClasses {
					if c.frag != craft.FragNone {
						continue
					}
					before := r.Conntrack().Len()
					res := r.Send(specClassPacket(c, i+1, 40000))
					specForward(t, res, c.name)
					want := trackable(aff, c.proto)
					if res.Trackable != want {
						t.Errorf("%s: Trackable %v, want %v", c.name, res.Trackable, want)
					}
					wantTrack, wantLen := dataplane.TrackUntracked, before
					if want {
						wantTrack, wantLen = dataplane.TrackNew, before+1
					}
					if res.Track != wantTrack {
						t.Errorf("%s: track %s, want %s", c.name, res.Track, wantTrack)
					}
					if n := r.Conntrack().Len(); n != wantLen {
						t.Errorf("%s: %d entries after the packet, want %d", c.name, n, wantLen)
					}
				}
			})
		}
	}
}

// ---------------------------------------------------------------- T2

func TestT2_TrackingKeyTable(t *testing.T) {
	for _, aff := range specAffinities {
		for _, mode := range specModes {
			t.Run(aff+"/"+mode, func(t *testing.T) {
				r := specL3Rig(t, aff, mode, 4)
				svc := specService(t, r, "l3")
				for i, c := range specClasses {
					p := specClassPacket(c, i+1, uint16(40000+i))
					res := r.Send(p)
					specForward(t, res, c.name)
					kind, tracked := specT2Kind(aff, mode, c)
					if res.Trackable != tracked {
						t.Fatalf("%s: Trackable %v, want %v", c.name, res.Trackable, tracked)
					}
					if !tracked {
						if res.Track != dataplane.TrackUntracked {
							t.Errorf("%s: track %s, want untracked", c.name, res.Track)
						}
						continue
					}
					want := specWantKey(kind, p, svc.ID)
					if res.TrackKey != want {
						t.Errorf("%s: key %v, want %v", c.name, res.TrackKey, want)
					}
					// And that is the key stored (R1).
					e, ok := r.Conntrack().Lookup(&want, r.Now)
					if !ok || e.Backend != uint32(res.Backend.Ref) {
						t.Errorf("%s: no entry under %v for backend %s (found %v)", c.name, want, res.Backend.Name, ok)
					}
				}
			})
		}
	}
}

// ---------------------------------------------------------------- T3

// TestT3_KeysAreExact: in a table of the smallest capacity (128 buckets of
// 8), flows that share a bucket, or differ in one field only, never share an
// entry. Each flow's entry is checked to hold the backend its own first
// packet chose, after the eligible set has changed so that a lookup that
// returned the wrong entry would show.
func TestT3_KeysAreExact(t *testing.T) {
	cfg := func(n int) string {
		return specFileCap(1024, specSvc{Name: "l3", Protocol: "UNSPECIFIED", Affinity: "CLIENT_IP_PORT_PROTO",
			Method: "IPIP", Primary: specAddrs("10.1.0.0", n)}.String(),
			specRule{Name: "l3", VIP: specVIP4, Proto: "L3_DEFAULT", Service: "l3"}.String(),
			specRule{Name: "l3-6", VIP: specVIP6, Proto: "L3_DEFAULT", Service: "l3"}.String())
	}
	r := cptest.New(t, cfg(8))
	if c := r.Conntrack().Capacity(); c != 1024 {
		t.Fatalf("capacity %d, want the configured 1024", c)
	}
	// Families of flows that differ in exactly one field of the 5-tuple
	// (or in the protocol, or are 3T vs 5T of the same client).
	var flows []craft.Packet
	v4, v6 := netip.MustParseAddr(specVIP4), netip.MustParseAddr(specVIP6)
	for c := range 8 {
		src := specAddr("198.18.0.0", c+1)
		base := specPacket(src, v4, packet.ProtoTCP, 40000, 443, craft.FragNone)
		flows = append(flows, base)
		for i := range 4 {
			p := base
			p.SrcPort = uint16(40001 + i) // sport only
			flows = append(flows, p)
			p = base
			p.DstPort = uint16(444 + i) // dport only
			flows = append(flows, p)
			p = base
			p.SrcPort, p.DstPort = base.DstPort+uint16(i), base.SrcPort // ports swapped-ish
			flows = append(flows, p)
		}
		udp := base
		udp.Proto = packet.ProtoUDP // protocol only
		flows = append(flows, udp)
		flows = append(flows, specPacket(src, v4, packet.ProtoESP, 0, 0, craft.FragNone))         // 3T of the same client
		flows = append(flows, specPacket(src, v4, packet.ProtoUDP, 40000, 443, craft.FragMiddle)) // 3T UDP
		flows = append(flows, specPacket(specAddr("2001:db8:c::", c+1), v6, packet.ProtoTCP, 40000, 443, craft.FragNone))
	}
	chosen := make([]string, len(flows))
	keys := map[conntrack.Key]int{}
	for i, p := range flows {
		if p.Proto == packet.ProtoTCP {
			p.Flags = "S"
		}
		res := r.Send(p)
		chosen[i] = specForward(t, res, "first packet")
		if res.Track != dataplane.TrackNew {
			t.Fatalf("flow %d (%v): first packet track %s, want new: it found another flow's entry", i, res.TrackKey, res.Track)
		}
		if j, dup := keys[res.TrackKey]; dup {
			t.Fatalf("flows %d and %d have the same key %v", j, i, res.TrackKey)
		}
		keys[res.TrackKey] = i
	}
	// 136 flows in 128 buckets: an over-full bucket is possible (rarely) and
	// would evict, which is X3, not a shared entry; it is allowed for below.
	st := r.Conntrack().Stats()
	if n := r.Conntrack().Len(); uint64(n)+st.Evictions != uint64(len(flows)) {
		t.Fatalf("%d entries and %d evictions for %d flows, want one entry each", n, st.Evictions, len(flows))
	}
	// A new eligible set moves about half of the hashes: a lookup that mixed
	// up two flows would now show another flow's backend.
	r.Reload(cfg(16))
	differs, misses := 0, 0
	for i, p := range flows {
		if p.Proto == packet.ProtoTCP {
			p.Flags = "A"
		}
		res := r.Send(p)
		got := specForward(t, res, "later packet")
		switch {
		case res.Track == dataplane.TrackNew:
			misses++ // its entry was evicted (counted above)
		case res.Track != dataplane.TrackHit || got != chosen[i]:
			t.Errorf("flow %d (%v): track %s backend %s, want hit on %s", i, res.TrackKey, res.Track, got, chosen[i])
		}
		if chosen[i] != chosen[0] {
			differs++
		}
	}
	if ev := r.Conntrack().Stats().Evictions; uint64(misses) > ev {
		t.Errorf("%d flows lost their entry but only %d were evicted", misses, ev)
	}
	if differs == 0 {
		t.Fatal("every flow chose the same backend: a shared entry would go unnoticed")
	}
}

// ---------------------------------------------------------------- T4

// TestT4_TablePerService: the same client and the same tuple reach two
// services; each keeps its own entry, and neither sees the other's.
func TestT4_TablePerService(t *testing.T) {
	cases := []struct {
		name      string
		aff, mode string
		protoA    string // rule protocols
		portsA    string
		protoB    string
		portsB    string
		pa, pb    func(sport uint16) craft.Packet
	}{
		{
			// 2T keys: TCP and UDP of one client share (src, dst).
			name: "CLIENT_IP session, TCP vs UDP", aff: "CLIENT_IP", mode: "PER_SESSION",
			protoA: "TCP", portsA: `ports = ["443"]`, protoB: "UDP", portsB: `ports = ["443"]`,
			pa: func(s uint16) craft.Packet { return cptest.TCP(specClient4, specVIP4, s, 443, "S") },
			pb: func(s uint16) craft.Packet { return cptest.UDP(specClient4, specVIP4, s, 443) },
		},
		{
			// 3T keys: two TCP rules on one VIP share (src, dst, TCP).
			name: "CLIENT_IP_PROTO session, two TCP port rules", aff: "CLIENT_IP_PROTO", mode: "PER_SESSION",
			protoA: "TCP", portsA: `ports = ["80"]`, protoB: "TCP", portsB: `ports = ["443"]`,
			pa: func(s uint16) craft.Packet { return cptest.TCP(specClient4, specVIP4, s, 80, "S") },
			pb: func(s uint16) craft.Packet { return cptest.TCP(specClient4, specVIP4, s, 443, "S") },
		},
		{
			// 3T keys of UDP fragments: two UDP services with all ports are
			// impossible on one VIP (FR7), so one UDP rule per port range
			// and fragments that carry the port (first fragments).
			name: "CLIENT_IP_PORT_PROTO, first fragments of two UDP rules", aff: "CLIENT_IP_PORT_PROTO", mode: "PER_CONNECTION",
			protoA: "UDP", portsA: `ports = ["53"]`, protoB: "UDP", portsB: `ports = ["5353"]`,
			pa: func(s uint16) craft.Packet {
				p := cptest.UDP(specClient4, specVIP4, s, 53)
				p.Frag = craft.FragFirst
				return p
			},
			pb: func(s uint16) craft.Packet {
				p := cptest.UDP(specClient4, specVIP4, s, 5353)
				p.Frag = craft.FragFirst
				return p
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a := specSvc{Name: "a", Protocol: tc.protoA, Affinity: tc.aff, Mode: tc.mode, Primary: specAddrs("10.1.0.0", 4)}
			b := specSvc{Name: "b", Protocol: tc.protoB, Affinity: tc.aff, Mode: tc.mode, Primary: specAddrs("10.2.0.0", 4)}
			r := cptest.New(t, specFile(a.String(), b.String(),
				specRule{Name: "a", VIP: specVIP4, Proto: tc.protoA, Ports: tc.portsA, Service: "a"}.String(),
				specRule{Name: "b", VIP: specVIP4, Proto: tc.protoB, Ports: tc.portsB, Service: "b"}.String()))
			ra := r.Send(tc.pa(40000))
			specForward(t, ra, "service a")
			rb := r.Send(tc.pb(40000))
			specForward(t, rb, "service b")
			if ra.Service.Name != "a" || rb.Service.Name != "b" {
				t.Fatalf("services %s and %s, want a and b", ra.Service.Name, rb.Service.Name)
			}
			// Same tuple: the keys differ only by the service.
			ka, kb := ra.TrackKey, rb.TrackKey
			ka.Service, kb.Service = 0, 0
			if ka != kb {
				t.Fatalf("keys %v and %v differ in more than the service; the case tests nothing", ra.TrackKey, rb.TrackKey)
			}
			if rb.Track != dataplane.TrackNew || rb.Backend.Service != rb.Service.ID {
				t.Fatalf("service b's first packet: track %s backend %s (of service %d): it used service a's entry",
					rb.Track, rb.BackendName(), rb.Backend.Service)
			}
			if n := r.Conntrack().Len(); n != 2 {
				t.Fatalf("%d entries, want one per service", n)
			}
			// Both keep going to their own backends: every later packet
			// (other source ports too, which these keys leave out) hits.
			for i := range 5 {
				pa, pb := tc.pa(uint16(40000+i)), tc.pb(uint16(40000+i))
				pa.Flags, pb.Flags = "A", "A"
				if res := r.Send(pa); res.Track != dataplane.TrackHit || res.BackendName() != ra.BackendName() {
					t.Errorf("service a: track %s backend %s, want hit on %s", res.Track, res.BackendName(), ra.BackendName())
				}
				if res := r.Send(pb); res.Track != dataplane.TrackHit || res.BackendName() != rb.BackendName() {
					t.Errorf("service b: track %s backend %s, want hit on %s", res.Track, res.BackendName(), rb.BackendName())
				}
			}
		})
	}
}

// ---------------------------------------------------------------- helpers for §4

// specGrowRig is a rig whose TCP service (affinity, mode) can be reloaded
// from 4 to 8 backends: the first four stay, so established entries stay
// valid, while about half of all hashes move to the new ones (S4).
type specGrowRig struct {
	*cptest.Rig
	text func(n int) string
}

func newSpecGrowRig(tb testing.TB, affinity, mode string) *specGrowRig {
	tb.Helper()
	text := func(n int) string {
		return specFile(specSvc{Name: "web", Protocol: "TCP", Affinity: affinity, Mode: mode, Primary: specAddrs("10.1.0.0", n)}.String(),
			specRule{Name: "web", VIP: specVIP4, Proto: "TCP", Ports: `ports = ["80", "443"]`, Service: "web"}.String())
	}
	return &specGrowRig{Rig: cptest.New(tb, text(4)), text: text}
}

func (g *specGrowRig) grow() { g.Reload(g.text(8)) }

// pick is the backend the current set's table gives a TCP packet of the
// service's affinity (§2, S1).
func (g *specGrowRig) pick(tb testing.TB, affinity string, src string, sport, dport uint16) string {
	tb.Helper()
	kind := specA1Kind(affinity, packet.ProtoTCP, craft.FragNone)
	return specPick(tb, g.Rig, "web", specHash(kind, netip.MustParseAddr(src), netip.MustParseAddr(specVIP4), sport, dport, packet.ProtoTCP)).Name
}

const specClients = 40

func specClientN(i int) string { return specAddr("198.18.0.0", i+1).String() }

// ---------------------------------------------------------------- CT1

// TestCT1_SynPerConnectionIsAlwaysNew: with PER_CONNECTION a SYN is selected
// afresh and overwrites the entry of its 5-tuple, whatever the affinity.
func TestCT1_SynPerConnectionIsAlwaysNew(t *testing.T) {
	for _, aff := range specAffinities {
		t.Run(aff, func(t *testing.T) {
			g := newSpecGrowRig(t, aff, "PER_CONNECTION")
			first := make([]string, specClients)
			for i := range first {
				res := g.Send(cptest.TCP(specClientN(i), specVIP4, 40000, 443, "S"))
				first[i] = specForward(t, res, "SYN")
				if res.Track != dataplane.TrackNew {
					t.Fatalf("first SYN: track %s, want new", res.Track)
				}
			}
			g.grow()
			moved := 0
			for i := range first {
				src := specClientN(i)
				// Not a SYN: the entry holds (CT4).
				if got := specForward(t, g.Send(cptest.TCP(src, specVIP4, 40000, 443, "A")), "ACK"); got != first[i] {
					t.Fatalf("client %s: ACK went to %s, entry says %s", src, got, first[i])
				}
				// A SYN of the same 5-tuple: new, selected on the new set...
				lenBefore, upd := g.Conntrack().Len(), g.Conntrack().Stats().Updates
				res := g.Send(cptest.TCP(src, specVIP4, 40000, 443, "S"))
				got := specForward(t, res, "second SYN")
				want := g.pick(t, aff, src, 40000, 443)
				if res.Track != dataplane.TrackNew || got != want {
					t.Fatalf("client %s: second SYN track %s backend %s, want new on %s (the hash's choice)", src, res.Track, got, want)
				}
				if got != first[i] {
					moved++
				}
				// ...overwriting the entry in place.
				if n := g.Conntrack().Len(); n != lenBefore || g.Conntrack().Stats().Updates != upd+1 {
					t.Fatalf("client %s: the SYN did not overwrite its entry (entries %d -> %d)", src, lenBefore, n)
				}
				if ack := specForward(t, g.Send(cptest.TCP(src, specVIP4, 40000, 443, "A")), "ACK"); ack != got {
					t.Fatalf("client %s: ACK after the new SYN went to %s, want %s", src, ack, got)
				}
			}
			if moved == 0 {
				t.Fatal("no client's hash moved with the new backends: the test proves nothing")
			}
		})
	}
}

// ---------------------------------------------------------------- CT2

func TestCT2_SynPerSession(t *testing.T) {
	// NONE and CLIENT_IP_PORT_PROTO: a SYN is a new connection.
	for _, aff := range []string{"NONE", "CLIENT_IP_PORT_PROTO"} {
		t.Run(aff+"/new", func(t *testing.T) {
			g := newSpecGrowRig(t, aff, "PER_SESSION")
			first := make([]string, specClients)
			for i := range first {
				first[i] = specForward(t, g.Send(cptest.TCP(specClientN(i), specVIP4, 40000, 443, "S")), "SYN")
			}
			g.grow()
			moved := 0
			for i := range first {
				src := specClientN(i)
				res := g.Send(cptest.TCP(src, specVIP4, 40000, 443, "S"))
				got := specForward(t, res, "second SYN")
				if want := g.pick(t, aff, src, 40000, 443); res.Track != dataplane.TrackNew || got != want {
					t.Fatalf("client %s: SYN track %s backend %s, want new on %s", src, res.Track, got, want)
				}
				if got != first[i] {
					moved++
				}
			}
			if moved == 0 {
				t.Fatal("no hash moved: the test proves nothing")
			}
		})
	}
	// CLIENT_IP_PROTO and CLIENT_IP: a SYN joins its session's backend.
	for _, aff := range []string{"CLIENT_IP_PROTO", "CLIENT_IP"} {
		t.Run(aff+"/joins-session", func(t *testing.T) {
			g := newSpecGrowRig(t, aff, "PER_SESSION")
			first := make([]string, specClients)
			for i := range first {
				res := g.Send(cptest.TCP(specClientN(i), specVIP4, 40000, 443, "S"))
				first[i] = specForward(t, res, "session's first SYN")
				if res.Track != dataplane.TrackNew {
					t.Fatalf("first SYN: track %s, want new", res.Track)
				}
			}
			g.grow()
			moved := 0
			for i := range first {
				src := specClientN(i)
				hashNow := g.pick(t, aff, src, 50000, 80)
				if hashNow != first[i] {
					moved++
				}
				// New connections (other ports, and the same ports again):
				// each SYN is looked up and joins the session.
				for k, sp := range []uint16{50000, 50001, 40000} {
					dport := []uint16{80, 443, 443}[k]
					res := g.Send(cptest.TCP(src, specVIP4, sp, dport, "S"))
					got := specForward(t, res, "later SYN")
					if res.Track != dataplane.TrackHit || got != first[i] {
						t.Fatalf("client %s: SYN %d→%d track %s backend %s, want hit on the session's %s (hash now says %s)",
							src, sp, dport, res.Track, got, first[i], hashNow)
					}
				}
			}
			if moved == 0 {
				t.Fatal("no client's hash moved: the test proves nothing")
			}
			if n := g.Conntrack().Len(); n != specClients {
				t.Errorf("%d entries, want one session per client", n)
			}
		})
	}
}

// ---------------------------------------------------------------- CT3

func TestCT3_UntrackedCreatesNothing(t *testing.T) {
	for _, aff := range specAffinities {
		for _, mode := range specModes {
			t.Run(aff+"/"+mode, func(t *testing.T) {
				r := specL3Rig(t, aff, mode, 8)
				untracked := 0
				for i, c := range specClasses {
					if _, tracked := specT2Kind(aff, mode, c); tracked {
						continue
					}
					untracked++
					for k := range 20 {
						before, st := r.Conntrack().Len(), r.Conntrack().Stats()
						res := r.Send(specClassPacket(c, i*100+k+1, uint16(40000+k)))
						specForward(t, res, c.name)
						if res.Track != dataplane.TrackUntracked || res.Trackable {
							t.Fatalf("%s: track %s trackable %v, want untracked", c.name, res.Track, res.Trackable)
						}
						after := r.Conntrack().Stats()
						if n := r.Conntrack().Len(); n != before || after.Inserts != st.Inserts || after.Updates != st.Updates {
							t.Fatalf("%s: the table changed (entries %d -> %d, %+v -> %+v)", c.name, before, n, st, after)
						}
					}
				}
				if untracked == 0 {
					t.Fatal("no untracked class for this combination")
				}
				if n := r.Conntrack().Len(); n != 0 {
					t.Errorf("%d entries after untracked traffic only", n)
				}
			})
		}
	}
}

// ---------------------------------------------------------------- CT4

// TestCT4_HitGoesToRecordedBackend: packets of a tracked connection keep the
// backend recorded for it after the eligible set changes; untracked traffic
// follows the new set.
func TestCT4_HitGoesToRecordedBackend(t *testing.T) {
	text := func(n int) string {
		return specFile(
			specSvc{Name: "tcp", Protocol: "TCP", Primary: specAddrs("10.1.0.0", n)}.String(),
			specSvc{Name: "udp", Protocol: "UDP", Affinity: "CLIENT_IP_PORT_PROTO", Primary: specAddrs("10.2.0.0", n)}.String(),
			specSvc{Name: "udpnone", Protocol: "UDP", Primary: specAddrs("10.3.0.0", n)}.String(),
			specRule{Name: "tcp", VIP: specVIP4, Proto: "TCP", Ports: `ports = ["443"]`, Service: "tcp"}.String(),
			specRule{Name: "udp", VIP: specVIP4, Proto: "UDP", Ports: `ports = ["4500"]`, Service: "udp"}.String(),
			specRule{Name: "udpnone", VIP: specVIP4, Proto: "UDP", Ports: `ports = ["53"]`, Service: "udpnone"}.String())
	}
	r := cptest.New(t, text(4))
	type flow struct {
		p       craft.Packet
		tracked bool
		svc     string
		first   string
	}
	var flows []*flow
	for i := range specClients {
		src := specClientN(i)
		flows = append(flows,
			&flow{p: cptest.TCP(src, specVIP4, 40000, 443, "A"), tracked: true, svc: "tcp"},
			&flow{p: cptest.UDP(src, specVIP4, 40000, 4500), tracked: true, svc: "udp"},
			&flow{p: cptest.UDP(src, specVIP4, 40000, 53), tracked: false, svc: "udpnone"})
	}
	for _, f := range flows {
		// The first packet of a flow (a mid-stream ACK for TCP) misses and
		// is selected and recorded, on probation; the second confirms
		// the entry (established, the service's timeout).
		res := r.Send(f.p)
		f.first = specForward(t, res, f.svc)
		if f.tracked {
			if res = r.Send(f.p); res.Track != dataplane.TrackHit {
				t.Fatalf("%s %s: second packet track %s, want a hit", f.svc, f.p.Src, res.Track)
			}
		}
	}
	r.At(10).Reload(text(8))
	moved := map[string]int{}
	for _, f := range flows {
		res := r.Send(f.p)
		got := specForward(t, res, f.svc)
		// All three services hash unfragmented TCP/UDP on 5T (NONE and
		// CLIENT_IP_PORT_PROTO).
		kind := specA1Kind("NONE", f.p.Proto, craft.FragNone)
		now := specPick(t, r, f.svc, specHash(kind, f.p.Src, f.p.Dst, f.p.SrcPort, f.p.DstPort, f.p.Proto)).Name
		if now != f.first {
			moved[f.svc]++
		}
		if f.tracked {
			if res.Track != dataplane.TrackHit || got != f.first {
				t.Errorf("%s %s: track %s backend %s, want hit on the recorded %s (the hash now says %s)",
					f.svc, f.p.Src, res.Track, got, f.first, now)
			}
		} else if res.Track != dataplane.TrackUntracked || got != now {
			t.Errorf("%s %s: track %s backend %s, want untracked on the new set's %s", f.svc, f.p.Src, res.Track, got, now)
		}
	}
	for _, s := range []string{"tcp", "udp", "udpnone"} {
		if moved[s] == 0 {
			t.Errorf("service %s: no hash moved with the new backends; the test proves nothing", s)
		}
	}
}

// ---------------------------------------------------------------- R1

// TestR1_EntryRecordedAfterSelection: a new connection's entry is created
// under the T2 key, for the backend that selection chose, with the side of
// the eligible set; untracked and dropped packets record nothing.
func TestR1_EntryRecordedAfterSelection(t *testing.T) {
	svc := specSvc{Name: "l3", Protocol: "UNSPECIFIED", Affinity: "CLIENT_IP", Mode: "PER_SESSION", Method: "IPIP",
		Primary: specAddrs("10.1.0.0", 4), Failover: specAddrs("10.9.0.0", 2),
		Extra: []string{"  [backend_service.failover_policy]", "  drop_traffic_if_unhealthy = true"}}
	r := cptest.New(t, specFile(svc.String(),
		specRule{Name: "l3", VIP: specVIP4, Proto: "L3_DEFAULT", Service: "l3"}.String()))
	id := specService(t, r, "l3").ID

	check := func(p craft.Packet, side dataplane.Side) {
		t.Helper()
		before := specEntries(r)
		res := r.Send(p)
		got := specForward(t, res, "new")
		if res.Track != dataplane.TrackNew || res.Side != side {
			t.Fatalf("%v: track %s side %s, want new on side %s", p.Src, res.Track, res.Side, side)
		}
		// The backend is selection's (§5.2).
		h := specHash(conntrack.Kind2T, p.Src, p.Dst, 0, 0, 0)
		if want := specPick(t, r, "l3", h).Name; got != want {
			t.Fatalf("%v: backend %s, want the selected %s", p.Src, got, want)
		}
		after := specEntries(r)
		if len(after) != len(before)+1 {
			t.Fatalf("%d entries -> %d, want one more", len(before), len(after))
		}
		key := specWantKey(conntrack.Kind2T, p, id)
		e, ok := after[key]
		if !ok {
			t.Fatalf("no entry under %v; entries %v", key, after)
		}
		// A new flow's entry starts on probation (half-open): TCP's with
		// the short SYN timeout, other protocols' with the service's.
		idle, half := uint32(60), true
		if p.Proto == packet.ProtoTCP {
			idle = dataplane.DefaultSYNIdleSec
		}
		if e.Backend != uint32(res.Backend.Ref) || dataplane.Side(e.Side) != side || e.LastUse != r.Now ||
			e.IdleSec != idle || e.HalfOpen != half {
			t.Fatalf("entry %+v, want backend %s (%#x) side %s last use %d idle %d half-open %v", e, got, uint32(res.Backend.Ref), side, r.Now, idle, half)
		}
	}
	check(cptest.TCP(specClient4, specVIP4, 40000, 443, "S"), dataplane.SidePrimary)
	// Untracked: nothing.
	before := r.Conntrack().Len()
	specForward(t, r.Send(cptest.Proto(specClient4, specVIP4, packet.ProtoICMP)), "icmp")
	if r.Conntrack().Len() != before {
		t.Fatal("an ICMP echo created an entry")
	}
	// Every primary down: the failover set, recorded as such.
	r.At(5)
	for _, ip := range specAddrs("10.1.0.0", 4) {
		r.Health(ip, false)
	}
	check(cptest.UDP("198.51.100.8", specVIP4, 5000, 53), dataplane.SideFailover)
	// No eligible backend (drop_traffic_if_unhealthy): dropped, nothing recorded.
	for _, ip := range specAddrs("10.9.0.0", 2) {
		r.Health(ip, false)
	}
	before = r.Conntrack().Len()
	specDrop(t, r.Send(cptest.TCP("198.51.100.9", specVIP4, 40000, 443, "S")), dataplane.ReasonNoEligibleBackend, "all down")
	if r.Conntrack().Len() != before {
		t.Fatal("a dropped packet created an entry")
	}
}

// ---------------------------------------------------------------- X3

// TestX3_BoundedTableEvicts: a table of capacity 1024 under 10k distinct
// flows stays within its capacity, evicts (counted, by the worker and by the
// table alike), keeps the most recent flows, and forwards every packet.
func TestX3_BoundedTableEvicts(t *testing.T) {
	web := specSvc{Name: "web", Protocol: "TCP", Primary: specAddrs("10.1.0.0", 8)}
	r := cptest.New(t, specFileCap(1024, web.String(),
		specRule{Name: "web", VIP: specVIP4, Proto: "TCP", Ports: `ports = ["443"]`, Service: "web"}.String()))
	ct := r.Conntrack()
	if ct.Capacity() != 1024 {
		t.Fatalf("capacity %d, want the configured 1024", ct.Capacity())
	}
	const flows = 10000
	flow := func(i int) craft.Packet {
		return cptest.TCP(specAddr("198.18.0.0", i/50+1).String(), specVIP4, uint16(20000+i%50), 443, "S")
	}
	evicted := 0
	for i := range flows {
		r.Now = int64(1000 + i) // 1 ms apart: LRU order is the arrival order
		res := r.Send(flow(i))
		specForward(t, res, fmt.Sprintf("flow %d", i))
		if res.Track != dataplane.TrackNew {
			t.Fatalf("flow %d: track %s, want new", i, res.Track)
		}
		if res.Evicted {
			evicted++
		}
		if n := ct.Len(); n > ct.Capacity() {
			t.Fatalf("after %d flows: %d entries > capacity %d", i+1, n, ct.Capacity())
		}
	}
	st := ct.Stats()
	if st.Evictions < flows-1024 {
		t.Errorf("%d evictions for %d flows into 1024 slots, want at least %d", st.Evictions, flows, flows-1024)
	}
	if w := r.D.Stats().Evictions.Load(); w != st.Evictions || uint64(evicted) != st.Evictions {
		t.Errorf("evictions: worker %d, decisions %d, table %d; want all equal", w, evicted, st.Evictions)
	}
	if d := r.D.Stats().Drops[dataplane.ReasonTableFull].Load(); d != 0 {
		t.Errorf("%d table-full drops; a full table evicts", d)
	}
	if got := r.D.Stats().Forward.Load(); got != flows {
		t.Errorf("%d forwarded, want %d", got, flows)
	}
	// The most recent flows survive (least recently used go first).
	for i := flows - 100; i < flows; i++ {
		p := flow(i)
		p.Flags = "A"
		if res := r.Send(p); res.Track != dataplane.TrackHit {
			t.Errorf("recent flow %d: track %s, want hit", i, res.Track)
		}
	}
	// An evicted flow's next packet is forwarded all the same (a new entry,
	// on the backend the hash gives: the set did not change).
	for i := range 100 {
		p := flow(i)
		p.Flags = "A"
		res := r.Send(p)
		got := specForward(t, res, "evicted flow")
		want := specPick(t, r, "web", specHash(conntrack.Kind5T, p.Src, p.Dst, p.SrcPort, p.DstPort, p.Proto)).Name
		if res.Track != dataplane.TrackNew || got != want {
			t.Errorf("old flow %d: track %s backend %s, want new on %s", i, res.Track, got, want)
		}
	}
	if n := ct.Len(); n > ct.Capacity() {
		t.Errorf("%d entries > capacity", n)
	}
}

// TestX3_NoEvictionFarBelowCapacity: a table evicts only when a bucket is
// full, so 64 flows in a fresh 1024-entry table must all stay, whatever the
// table's random seed and however alike the flows are (one client, one field
// varying). A weak key hash puts such families into a few buckets for some
// seeds, and a connection would lose its entry in an empty table.
func TestX3_NoEvictionFarBelowCapacity(t *testing.T) {
	src, dst := dataplane.Addr16(netip.MustParseAddr(specClient4)), dataplane.Addr16(netip.MustParseAddr(specVIP4))
	families := map[string]func(i int) conntrack.Key{
		"sport": func(i int) conntrack.Key {
			return conntrack.Key{Src: src, Dst: dst, SrcPort: uint16(40000 + i), DstPort: 443, Proto: uint8(packet.ProtoTCP), Kind: conntrack.Kind5T}
		},
		"dport": func(i int) conntrack.Key {
			return conntrack.Key{Src: src, Dst: dst, SrcPort: 40000, DstPort: uint16(1 + i), Proto: uint8(packet.ProtoTCP), Kind: conntrack.Kind5T}
		},
		"service": func(i int) conntrack.Key {
			return conntrack.Key{Src: src, Dst: dst, Kind: conntrack.Kind2T, Service: uint16(i)}
		},
	}
	for name, key := range families {
		t.Run(name, func(t *testing.T) {
			bad := 0
			for range 400 {
				ct, err := conntrack.New(1024)
				if err != nil {
					t.Fatal(err)
				}
				for i := range 64 {
					k := key(i)
					ct.Upsert(&k, conntrack.Value{Backend: uint32(i), IdleSec: 60}, 0)
				}
				if ct.Stats().Evictions != 0 {
					bad++
				}
			}
			// By chance (64 keys, 128 buckets of 8) a table evicts with
			// probability below 1e-6.
			if bad > 0 {
				t.Errorf("%d of 400 fresh tables evicted live entries while holding 64 of 1024", bad)
			}
		})
	}
}

package explain_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/netip"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"xlb/controlplane/cptest"
	"xlb/controlplane/explain"
	"xlb/dataplane"
	"xlb/dataplane/craft"
	"xlb/dataplane/packet"
)

// svcOpts shapes the one backend service of svcConfig.
type svcOpts struct {
	affinity string // "" = NONE
	mode     string // "" = PER_CONNECTION
	weighted bool
	failover bool // add a failover group (f1, f2) to the primaries p1..p4
	ratio    float64
	drop     bool // drop_traffic_if_unhealthy
}

// svcConfig is an L3_DEFAULT service (every protocol, all ports) on an IPv4
// and an IPv6 VIP, with four primaries and optionally two failover backends.
func svcConfig(o svcOpts) string {
	if o.affinity == "" {
		o.affinity = "NONE"
	}
	if o.mode == "" {
		o.mode = "PER_CONNECTION"
	}
	locality := "MAGLEV"
	if o.weighted {
		locality = "WEIGHTED_MAGLEV"
	}
	var b strings.Builder
	fmt.Fprintf(&b, `
[[health_check]]
name = "hc"
type = "HTTP"
port = 8080

[[backend_service]]
name = "svc"
protocol = "UNSPECIFIED"
session_affinity = %q
locality_lb_policy = %q
forwarding_method = "IPIP"
health_checks = ["hc"]

  [backend_service.connection_tracking_policy]
  tracking_mode = %q

  [backend_service.failover_policy]
  failover_ratio = %v
  drop_traffic_if_unhealthy = %t

  [[backend_service.backend]]
  group = "prim"
  endpoints = [
    { name = "p1", ip = "10.0.0.1" },
    { name = "p2", ip = "10.0.0.2" },
    { name = "p3", ip = "10.0.0.3" },
    { name = "p4", ip = "10.0.0.4" },
  ]
`, o.affinity, locality, o.mode, o.ratio, o.drop)
	if o.failover {
		b.WriteString(`
  [[backend_service.backend]]
  group = "spare"
  failover = true
  endpoints = [ { name = "f1", ip = "10.0.1.1" }, { name = "f2", ip = "10.0.1.2" } ]
`)
	}
	b.WriteString(`
[[forwarding_rule]]
name = "all-v4"
ip_address = "203.0.113.10"
ip_protocol = "L3_DEFAULT"
all_ports = true
backend_service = "svc"

[[forwarding_rule]]
name = "all-v6"
ip_address = "2001:db8:1::10"
ip_protocol = "L3_DEFAULT"
all_ports = true
backend_service = "svc"
`)
	return b.String()
}

const (
	client = "198.51.100.7"
	vip    = "203.0.113.10"
)

// state is the health and weight state a test assumes.
type state struct {
	unhealthy []string
	weights   map[string]uint32
}

// explainAndSend explains p under text and state, and decides the same
// packet in a fresh cptest rig in the same state: both start from an empty
// tracking table, so they must agree on everything.
func explainAndSend(tb testing.TB, text string, st state, p craft.Packet) (*explain.Report, *cptest.Result, *cptest.Rig) {
	tb.Helper()
	rep, err := explain.Explain(cptest.Config(tb, text), &explain.Request{Packet: p, Unhealthy: st.unhealthy, Weights: st.weights})
	if err != nil {
		tb.Fatalf("Explain: %v", err)
	}
	rig := cptest.New(tb, text)
	for _, n := range st.unhealthy {
		rig.Health(n, false)
	}
	for n, w := range st.weights {
		rig.Weight(n, w)
	}
	return rep, rig.Send(p), rig
}

// requireAgrees checks that a report says what the engine did with the same
// packet (X4: the explanation is of the real decision, not a second model).
func requireAgrees(tb testing.TB, rep *explain.Report, res *cptest.Result, snap *dataplane.Snapshot) {
	tb.Helper()
	if rep.Verdict != res.Verdict.String() {
		tb.Fatalf("verdict: explain %q, engine %q", rep.Verdict, res.Verdict)
	}
	wantReason := ""
	if res.Verdict == dataplane.VerdictDrop {
		wantReason = res.Reason.String()
	}
	if rep.Reason != wantReason {
		tb.Errorf("reason: explain %q, engine %q", rep.Reason, wantReason)
	}
	if rep.Backend != res.BackendName() {
		tb.Errorf("backend: explain %q, engine %q", rep.Backend, res.BackendName())
	}
	if rep.ICMPSteered != res.ICMPSteered {
		tb.Errorf("icmp_steered: explain %v, engine %v", rep.ICMPSteered, res.ICMPSteered)
	}
	if res.Rule == nil {
		if rep.Rule != "" || rep.Service != "" || rep.SelectionKey != "" {
			tb.Errorf("no rule matched, but the report names rule %q, service %q, key %q", rep.Rule, rep.Service, rep.SelectionKey)
		}
		return
	}
	if rep.Rule != res.Rule.Name || rep.Service != res.Service.Name {
		tb.Errorf("rule/service: explain %q/%q, engine %q/%q", rep.Rule, rep.Service, res.Rule.Name, res.Service.Name)
	}
	if res.Reason == dataplane.ReasonSourceNotAllowed || res.Reason == dataplane.ReasonSourceIsBackend {
		return // FR6 and FR8's backend check stop before the keys
	}
	if h := parseHash(tb, rep.SelectionHash); h != res.SelHash {
		tb.Errorf("selection hash: explain %#x, engine %#x", h, res.SelHash)
	}
	if !strings.HasPrefix(rep.SelectionKey, res.SelKind.String()+" (") {
		tb.Errorf("selection key %q, engine used %s", rep.SelectionKey, res.SelKind)
	}
	if rep.Trackable != res.Trackable {
		tb.Errorf("trackable: explain %v, engine %v", rep.Trackable, res.Trackable)
	}
	if res.Trackable && !strings.HasPrefix(rep.TrackingKey, res.TrackKey.Kind.String()+" (") {
		tb.Errorf("tracking key %q, engine used %s", rep.TrackingKey, res.TrackKey.Kind)
	}
	if !res.Trackable && rep.TrackingKey != "" {
		tb.Errorf("untrackable packet with tracking key %q", rep.TrackingKey)
	}
	if rep.Track != res.Track.String() {
		tb.Errorf("track: explain %q, engine %q", rep.Track, res.Track)
	}
	if res.Verdict == dataplane.VerdictForward && rep.Side != res.Side.String() {
		tb.Errorf("side: explain %q, engine %q", rep.Side, res.Side)
	}
	var elig []string
	for _, ref := range res.Service.Eligible {
		elig = append(elig, snap.Backend(ref).Name)
	}
	if !slices.Equal(rep.Eligible, elig) {
		tb.Errorf("eligible: explain %v, engine %v", rep.Eligible, elig)
	}
	for _, m := range rep.Members {
		if m.Eligible != slices.Contains(elig, m.Name) {
			tb.Errorf("member %s marked eligible=%v; eligible set %v", m.Name, m.Eligible, elig)
		}
	}
	// S1: the slot is the selection hash modulo the table size, and the
	// table entry there names the backend. A draining rule selects nothing.
	table := res.Service.Table
	if len(table) == 0 || res.Draining {
		if rep.MaglevSlot != nil {
			tb.Errorf("maglev slot %d reported without a table", *rep.MaglevSlot)
		}
		return
	}
	if rep.MaglevSlot == nil {
		tb.Fatalf("no maglev slot reported; table has %d slots", len(table))
	}
	slot := *rep.MaglevSlot
	if rep.MaglevSize != len(table) || uint64(slot) != res.SelHash%uint64(len(table)) || slot != res.TableSlot {
		tb.Errorf("maglev slot %d of %d; want hash %% size = %d of %d", slot, rep.MaglevSize, res.SelHash%uint64(len(table)), len(table))
	}
	if res.Verdict == dataplane.VerdictForward {
		if at := snap.Backend(res.Service.Eligible[table[slot]]).Name; at != rep.Backend {
			tb.Errorf("table slot %d holds %s, report says %s", slot, at, rep.Backend)
		}
	}
}

func parseHash(tb testing.TB, s string) uint64 {
	tb.Helper()
	h, err := strconv.ParseUint(s, 0, 64)
	if err != nil {
		tb.Fatalf("selection_hash %q: %v", s, err)
	}
	return h
}

func frag(p craft.Packet, f craft.Frag) craft.Packet {
	p.Frag = f
	return p
}

// icmpError is an ICMP "fragmentation needed" (or ICMPv6 "packet too big")
// from src to the VIP quoting the reply the backend sent: VIP:vport -> src:sport.
func icmpError(src, dst string, proto packet.Proto, vport, sport uint16) craft.Packet {
	inner := craft.Packet{Src: netip.MustParseAddr(dst), Dst: netip.MustParseAddr(src), Proto: proto, SrcPort: vport, DstPort: sport}
	p := craft.Packet{Src: netip.MustParseAddr(src), Dst: netip.MustParseAddr(dst), Proto: packet.ProtoICMP, ICMPType: 3, ICMPCode: 4, Inner: &inner}
	if inner.Dst.Is6() {
		p.Proto, p.ICMPType, p.ICMPCode = packet.ProtoICMPv6, 2, 0
	}
	return p
}

// TestX4_ExplainAgreesWithEngine explains packets of every protocol and
// fragment position under every affinity and tracking mode, and checks each
// report against the engine's own decision for the same packet: rule, keys
// (A1, T2), trackability (T1), step 1, eligible set, Maglev slot, backend.
func TestX4_ExplainAgreesWithEngine(t *testing.T) {
	packets := []struct {
		name string
		p    craft.Packet
	}{
		{"tcp-syn", cptest.TCP(client, vip, 40000, 80, "S")},
		{"tcp-ack", cptest.TCP(client, vip, 40000, 80, "A")},
		{"tcp-first-fragment", frag(cptest.TCP(client, vip, 40000, 80, "A"), craft.FragFirst)},
		{"udp", cptest.UDP(client, vip, 5000, 53)},
		{"udp-first-fragment", frag(cptest.UDP(client, vip, 5000, 53), craft.FragFirst)},
		{"udp-middle-fragment", frag(cptest.UDP(client, vip, 5000, 53), craft.FragMiddle)},
		{"udp-last-fragment", frag(cptest.UDP(client, vip, 5000, 53), craft.FragLast)},
		{"esp", cptest.Proto(client, vip, packet.ProtoESP)},
		{"gre", cptest.Proto(client, vip, packet.ProtoGRE)},
		{"icmp-echo", cptest.Proto(client, vip, packet.ProtoICMP)},
		{"icmp-error", icmpError(client, vip, packet.ProtoTCP, 80, 40000)},
		{"ipv6-tcp-syn", cptest.TCP("2001:db8::7", "2001:db8:1::10", 40000, 443, "S")},
		{"ipv6-udp", cptest.UDP("2001:db8::7", "2001:db8:1::10", 5000, 53)},
		{"ipv6-icmpv6-error", icmpError("2001:db8::7", "2001:db8:1::10", packet.ProtoTCP, 443, 40000)},
		{"not-a-vip", cptest.TCP(client, "192.0.2.99", 40000, 22, "S")},
	}
	for _, aff := range []string{"NONE", "CLIENT_IP_PORT_PROTO", "CLIENT_IP_PROTO", "CLIENT_IP"} {
		for _, mode := range []string{"PER_CONNECTION", "PER_SESSION"} {
			text := svcConfig(svcOpts{affinity: aff, mode: mode})
			for _, pk := range packets {
				t.Run(aff+"/"+mode+"/"+pk.name, func(t *testing.T) {
					rep, res, rig := explainAndSend(t, text, state{}, pk.p)
					requireAgrees(t, rep, res, rig.CP.Snapshot())
				})
			}
		}
	}
}

// TestX4_ExplainStep1NamesTheCTRule checks that step 1 is explained by the
// rule of SPEC §4 that applies.
func TestX4_ExplainStep1NamesTheCTRule(t *testing.T) {
	syn := cptest.TCP(client, vip, 40000, 80, "S")
	tests := []struct {
		name     string
		affinity string
		mode     string
		p        craft.Packet
		want     string // prefix of Step1
		track    string
	}{
		{"CT1 SYN per-connection", "CLIENT_IP", "PER_CONNECTION", syn, "CT1:", "new"},
		{"CT2 SYN per-session 5-tuple affinity", "NONE", "PER_SESSION", syn, "CT2:", "new"},
		{"CT2 SYN per-session CLIENT_IP_PORT_PROTO", "CLIENT_IP_PORT_PROTO", "PER_SESSION", syn, "CT2:", "new"},
		// CT2: with a 2- or 3-tuple affinity a SYN is looked up (CT4).
		{"CT2 SYN per-session CLIENT_IP is looked up", "CLIENT_IP", "PER_SESSION", syn, "CT2:", "new"},
		{"CT3 UDP with affinity NONE", "NONE", "PER_CONNECTION", cptest.UDP(client, vip, 5000, 53), "CT3:", "untracked"},
		{"CT3 ICMP echo", "CLIENT_IP", "PER_CONNECTION", cptest.Proto(client, vip, packet.ProtoICMP), "CT3:", "untracked"},
		{"CT3 ESP with affinity NONE", "NONE", "PER_SESSION", cptest.Proto(client, vip, packet.ProtoESP), "CT3:", "untracked"},
		{"CT4 ACK", "NONE", "PER_CONNECTION", cptest.TCP(client, vip, 40000, 80, "A"), "CT4:", "new"},
		{"CT4 UDP CLIENT_IP_PROTO", "CLIENT_IP_PROTO", "PER_CONNECTION", cptest.UDP(client, vip, 5000, 53), "CT4:", "new"},
		{"CT4 GRE CLIENT_IP", "CLIENT_IP", "PER_SESSION", cptest.Proto(client, vip, packet.ProtoGRE), "CT4:", "new"},
		{"X1 ICMP error", "NONE", "PER_CONNECTION", icmpError(client, vip, packet.ProtoTCP, 80, 40000), "X1:", "untracked"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			text := svcConfig(svcOpts{affinity: tc.affinity, mode: tc.mode})
			rep, res, rig := explainAndSend(t, text, state{}, tc.p)
			requireAgrees(t, rep, res, rig.CP.Snapshot())
			if !strings.HasPrefix(rep.Step1, tc.want) {
				t.Errorf("step1 = %q, want %s...", rep.Step1, tc.want)
			}
			if rep.Track != tc.track {
				t.Errorf("track = %q, want %q", rep.Track, tc.track)
			}
		})
	}
}

// TestX4_ExplainEligibleSetFollowsERules assumes health and weight states
// through Request.Unhealthy and Request.Weights and checks the eligible set,
// its side (E5) and the E-rule step named as the reason, for E1-E4 and S6.
func TestX4_ExplainEligibleSetFollowsERules(t *testing.T) {
	all := []string{"p1", "p2", "p3", "p4"}
	spares := []string{"f1", "f2"}
	allDown := []string{"p1", "p2", "p3", "p4", "f1", "f2"}
	zero := func(names ...string) map[string]uint32 {
		m := map[string]uint32{}
		for _, n := range names {
			m[n] = 0
		}
		return m
	}
	plain := svcOpts{}
	weighted := svcOpts{weighted: true}
	fo := svcOpts{failover: true, ratio: 0.5}
	foDrop := svcOpts{failover: true, ratio: 0.5, drop: true}
	foWeighted := svcOpts{failover: true, ratio: 0.5, weighted: true}
	foWeightedDrop := svcOpts{failover: true, ratio: 0.5, weighted: true, drop: true}
	tests := []struct {
		name string
		opts svcOpts
		st   state
		why  string   // prefix of EligibleWhy
		side string   // E5
		want []string // nil: empty set, the packet is dropped (S6)
	}{
		{"E1 all healthy", plain, state{}, "E1: healthy", "primary", all},
		{"E1 healthy only", plain, state{unhealthy: []string{"p1"}}, "E1: healthy", "primary", []string{"p2", "p3", "p4"}},
		{"E1 none healthy: all", plain, state{unhealthy: all}, "E1: no backend healthy", "primary", all},
		{"E2.1 healthy weight>0", weighted, state{weights: zero("p1")}, "E2: healthy, weight > 0", "primary", []string{"p2", "p3", "p4"}},
		{"E2.2 unhealthy weight>0", weighted, state{unhealthy: []string{"p2", "p3", "p4"}, weights: zero("p1")},
			"E2: no healthy backend with weight > 0; unhealthy, weight > 0", "primary", []string{"p2", "p3", "p4"}},
		{"E2.3 healthy weight 0", weighted, state{unhealthy: []string{"p1"}, weights: zero(all...)},
			"E2: no backend with weight > 0; healthy, weight 0", "primary", []string{"p2", "p3", "p4"}},
		{"E2.4 unhealthy weight 0", weighted, state{unhealthy: all, weights: zero(all...)},
			"E2: no backend with weight > 0 and none healthy", "primary", all},
		{"E3.3 ratio 0", svcOpts{failover: true}, state{unhealthy: []string{"p1", "p2", "p3"}}, "E3.3", "primary", []string{"p4"}},
		{"E3.4 ratio met", fo, state{unhealthy: []string{"p1", "p2"}}, "E3.4", "primary", []string{"p3", "p4"}},
		{"E3.5 ratio not met: failover", fo, state{unhealthy: []string{"p1", "p2", "p3"}}, "E3.5", "failover", spares},
		{"E3.1 no healthy primary", fo, state{unhealthy: all}, "E3.1", "failover", spares},
		{"E3.2 no healthy failover", fo, state{unhealthy: spares}, "E3.2", "primary", all},
		{"E3 none healthy: primaries", fo, state{unhealthy: allDown}, "E3: no healthy backend, all primaries", "primary", all},
		// An empty set has no members, so no side (E5) is reported.
		{"E3 none healthy, drop_traffic_if_unhealthy: S6", foDrop, state{unhealthy: allDown}, "E3: no healthy backend and drop_traffic_if_unhealthy", "", nil},
		{"E4.4 P+ ratio met", foWeighted, state{unhealthy: []string{"p2"}, weights: zero("p1")}, "E4.4", "primary", []string{"p3", "p4"}},
		{"E4.5 P+ ratio not met", foWeighted, state{unhealthy: []string{"p3"}, weights: zero("p1", "p2")}, "E4.5", "failover", spares},
		{"E4.2 F+ empty", foWeighted, state{unhealthy: []string{"f2"}, weights: zero("f1")}, "E4.2", "primary", all},
		{"E4.1 P+ empty", foWeighted, state{weights: zero(all...)}, "E4.1", "failover", spares},
		{"E4 fallback unhealthy primaries weight>0", foWeighted, state{unhealthy: allDown},
			"E4: no healthy backend with weight > 0; unhealthy primaries, weight > 0", "primary", all},
		{"E4 fallback unhealthy failover weight>0", foWeighted, state{unhealthy: allDown, weights: zero(all...)},
			"E4: no healthy backend with weight > 0; unhealthy failover backends, weight > 0", "failover", spares},
		{"E4 fallback healthy primaries weight 0", foWeighted, state{weights: zero(allDown...)},
			"E4: no healthy backend with weight > 0; healthy primaries, weight 0", "primary", all},
		{"E4 none healthy, drop_traffic_if_unhealthy: S6", foWeightedDrop, state{unhealthy: allDown}, "E4: no healthy backend and drop_traffic_if_unhealthy", "", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rep, res, rig := explainAndSend(t, svcConfig(tc.opts), tc.st, cptest.TCP(client, vip, 40000, 80, "S"))
			requireAgrees(t, rep, res, rig.CP.Snapshot())
			if !strings.HasPrefix(rep.EligibleWhy, tc.why) {
				t.Errorf("eligible_why = %q, want %s...", rep.EligibleWhy, tc.why)
			}
			if rep.Side != tc.side {
				t.Errorf("side = %q, want %q", rep.Side, tc.side)
			}
			if !slices.Equal(rep.Eligible, tc.want) {
				t.Errorf("eligible = %v, want %v", rep.Eligible, tc.want)
			}
			// The members list shows the assumed state.
			for _, m := range rep.Members {
				if m.Healthy == slices.Contains(tc.st.unhealthy, m.Name) {
					t.Errorf("member %s healthy=%v, assumed unhealthy: %v", m.Name, m.Healthy, tc.st.unhealthy)
				}
			}
			if tc.want == nil {
				if rep.Verdict != "drop" || rep.Reason != dataplane.ReasonNoEligibleBackend.String() || !strings.HasPrefix(rep.Why, "S6") {
					t.Errorf("empty set: verdict %q reason %q why %q, want an S6 drop", rep.Verdict, rep.Reason, rep.Why)
				}
				if rep.MaglevSlot != nil || rep.Backend != "" {
					t.Errorf("empty set, yet maglev slot %v and backend %q", rep.MaglevSlot, rep.Backend)
				}
				var buf bytes.Buffer
				rep.WriteText(&buf)
				if got := textFields(t, buf.String())["eligible set"]; got != "empty" {
					t.Errorf("text eligible set = %q, want empty", got)
				}
				return
			}
			if rep.Verdict != "forward" || !slices.Contains(tc.want, rep.Backend) {
				t.Errorf("verdict %q backend %q, want forward to one of %v", rep.Verdict, rep.Backend, tc.want)
			}
		})
	}
}

// TestX4_ExplainWithoutRule covers the reports that stop before a service:
// FR1 (not a VIP: the host's), FR4 (no matching rule), FR6 (source not
// allowed).
func TestX4_ExplainWithoutRule(t *testing.T) {
	tests := []struct {
		name    string
		p       craft.Packet
		verdict string
		reason  string
		why     string
		rule    string
	}{
		{"FR1 not a VIP", cptest.TCP(client, "192.0.2.99", 40000, 22, "S"), "pass", "", "FR1", ""},
		{"FR4 port not in the rule", cptest.TCP(client, vip, 40000, 8080, "S"), "drop", "no-rule", "FR4", ""},
		{"FR4 protocol without a rule", cptest.UDP(client, vip, 5000, 53), "drop", "no-rule", "FR4", ""},
		{"FR6 source outside source_ip_ranges", cptest.TCP(client, "203.0.113.11", 40000, 22, "S"), "drop", "source-not-allowed", "FR6", "admin"},
		{"FR6 source inside source_ip_ranges", cptest.TCP("192.0.2.7", "203.0.113.11", 40000, 22, "S"), "forward", "", "forward to", "admin"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rep, res, rig := explainAndSend(t, cptest.Testdata(t, "web.toml"), state{}, tc.p)
			requireAgrees(t, rep, res, rig.CP.Snapshot())
			if rep.Verdict != tc.verdict || rep.Reason != tc.reason || rep.Rule != tc.rule {
				t.Errorf("verdict %q reason %q rule %q, want %q %q %q", rep.Verdict, rep.Reason, rep.Rule, tc.verdict, tc.reason, tc.rule)
			}
			if !strings.HasPrefix(rep.Why, tc.why) {
				t.Errorf("why = %q, want %s...", rep.Why, tc.why)
			}
			if tc.verdict != "forward" && (rep.SelectionKey != "" || rep.MaglevSlot != nil || rep.Backend != "") {
				t.Errorf("a %s report goes on to selection: key %q slot %v backend %q", tc.why, rep.SelectionKey, rep.MaglevSlot, rep.Backend)
			}
		})
	}
}

// TestX4_ExplainICMPErrorSteeredByQuote (X1): an ICMP error quoting the
// backend's reply is explained with the selection key and hash of the
// client's flow, and lands where that flow's SYN goes; it is never recorded.
func TestX4_ExplainICMPErrorSteeredByQuote(t *testing.T) {
	for _, tc := range []struct{ name, src, dst string }{
		{"ipv4 fragmentation needed", client, vip},
		{"ipv6 packet too big", "2001:db8::7", "2001:db8:1::10"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			text := svcConfig(svcOpts{})
			icmp, res, rig := explainAndSend(t, text, state{}, icmpError(tc.src, tc.dst, packet.ProtoTCP, 443, 40000))
			requireAgrees(t, icmp, res, rig.CP.Snapshot())
			syn, _, _ := explainAndSend(t, text, state{}, cptest.TCP(tc.src, tc.dst, 40000, 443, "S"))
			if !icmp.ICMPSteered || !strings.HasPrefix(icmp.Step1, "X1:") || icmp.Track != "untracked" {
				t.Errorf("steered %v step1 %q track %q, want X1, untracked", icmp.ICMPSteered, icmp.Step1, icmp.Track)
			}
			if icmp.SelectionKey != syn.SelectionKey || icmp.SelectionHash != syn.SelectionHash {
				t.Errorf("ICMP selection %s %s, client flow %s %s", icmp.SelectionKey, icmp.SelectionHash, syn.SelectionKey, syn.SelectionHash)
			}
			if icmp.Backend == "" || icmp.Backend != syn.Backend {
				t.Errorf("ICMP error goes to %q, the flow's SYN to %q", icmp.Backend, syn.Backend)
			}
			if !strings.Contains(icmp.Packet, "quoting [tcp") {
				t.Errorf("packet %q does not describe the quote", icmp.Packet)
			}
		})
	}
}

// TestX4_ReportOutputs checks both renderings of one report: JSON decodes
// back into the same Report, and the text names every step.
func TestX4_ReportOutputs(t *testing.T) {
	rep, _, _ := explainAndSend(t, svcConfig(svcOpts{failover: true, ratio: 0.5}),
		state{unhealthy: []string{"p1", "p2", "p3"}}, cptest.TCP(client, vip, 40000, 80, "S"))

	var buf bytes.Buffer
	if err := rep.WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(&buf)
	dec.DisallowUnknownFields()
	var back explain.Report
	if err := dec.Decode(&back); err != nil {
		t.Fatalf("decode: %v", err)
	}
	if !reflect.DeepEqual(&back, rep) {
		t.Errorf("JSON round trip differs:\n got %+v\nwant %+v", back, *rep)
	}

	buf.Reset()
	rep.WriteText(&buf)
	text := buf.String()
	fields := textFields(t, text)
	want := map[string]string{
		"rule":           rep.Rule + "  " + rep.RuleDetail,
		"selection key":  rep.SelectionKey,
		"selection hash": rep.SelectionHash,
		"tracking key":   rep.TrackingKey,
		"step 1":         rep.Step1,
		"eligible set":   "failover side: f1, f2",
		"maglev":         fmt.Sprintf("slot %d of %d -> %s", *rep.MaglevSlot, rep.MaglevSize, rep.Backend),
		"verdict":        "forward",
		"because":        rep.EligibleWhy,
	}
	for k, v := range want {
		if fields[k] != v {
			t.Errorf("text line %q = %q, want %q\n%s", k, fields[k], v, text)
		}
	}
	var marked []string
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, "  * ") {
			marked = append(marked, strings.Fields(line)[1])
		}
	}
	if !slices.Equal(marked, rep.Eligible) {
		t.Errorf("members marked eligible %v, eligible set %v", marked, rep.Eligible)
	}
}

// textFields reads the "key  value" lines of WriteText ("%-14s %s"; the
// "because" line is indented, member lines are skipped) and checks that no
// line ends in a blank.
func textFields(tb testing.TB, text string) map[string]string {
	tb.Helper()
	fields := map[string]string{}
	for _, line := range strings.Split(strings.TrimSuffix(text, "\n"), "\n") {
		if strings.HasSuffix(line, " ") {
			tb.Errorf("trailing blank in %q", line)
		}
		if len(line) > 15 && (line[0] != ' ' || strings.HasPrefix(line, "  because")) {
			fields[strings.TrimSpace(line[:14])] = line[15:]
		}
	}
	return fields
}

// drainConfig is testdata/web.toml's service with
// connection_draining_timeout_sec drainSec and the named ones of its rules
// and of a third, "dns" (TCP 53), on the VIP of rule "web".
func drainConfig(tb testing.TB, drainSec int, rules ...string) string {
	tb.Helper()
	const dns = `
[[forwarding_rule]]
name = "dns"
ip_address = "203.0.113.10"
ip_protocol = "TCP"
ports = ["53"]
backend_service = "web"
`
	head, tail, _ := strings.Cut(cptest.Testdata(tb, "web.toml")+dns, "\n[[forwarding_rule]]")
	head = strings.Replace(head, `health_checks = ["hc"]`, fmt.Sprintf("health_checks = [\"hc\"]\nconnection_draining_timeout_sec = %d", drainSec), 1)
	var b strings.Builder
	b.WriteString(head)
	for _, r := range strings.Split("\n[[forwarding_rule]]"+tail, "\n[[forwarding_rule]]")[1:] {
		for _, name := range rules {
			if strings.Contains(r, fmt.Sprintf("name = %q", name)) {
				b.WriteString("\n[[forwarding_rule]]" + r)
			}
		}
	}
	return b.String()
}

// TestX4M5_ExplainDrainingRule: explained as just after a reload from a
// previous configuration, a packet that only a rule the reload removed
// matches is reported as draining (M5): a new flow drops vip-draining, as
// the engine does, and a flow tracked before the reload goes on to the
// backend it has (the rig's, tracked across the same reload). With a
// timeout of 0 the report names the rule the reload removed without a
// drain: FR1 when its VIP went with it, FR4 when the VIP stays.
func TestX4M5_ExplainDrainingRule(t *testing.T) {
	for _, tc := range []struct {
		name, removed string
		p             craft.Packet
		// Without a drain: the verdict, its reason and the FR rule.
		verdict, reason, fr string
	}{
		{"VIP removed", "admin", cptest.TCP("192.0.2.7", "203.0.113.11", 40000, 22, "S"), "pass", "", "FR1:"},
		{"one rule of the VIP removed", "web", cptest.TCP(client, vip, 40000, 443, "S"), "drop", "no-rule", "FR4:"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			all := []string{"web", "admin", "dns"}
			kept := slices.DeleteFunc(slices.Clone(all), func(r string) bool { return r == tc.removed })
			before, after := drainConfig(t, 30, all...), drainConfig(t, 30, kept...)
			rep, err := explain.Explain(cptest.Config(t, after), &explain.Request{Packet: tc.p, Previous: cptest.Config(t, before)})
			if err != nil {
				t.Fatal(err)
			}
			// The engine across the same reload: a flow started before it
			// and a new one after it.
			rig := cptest.New(t, before)
			old := rig.Send(tc.p)
			rig.Reload(after)
			ack := tc.p
			ack.Flags = "A"
			tracked := rig.Send(ack)
			syn := tc.p
			syn.SrcPort++
			fresh := rig.Send(syn)
			if old.Verdict != dataplane.VerdictForward || tracked.Track != dataplane.TrackHit || tracked.BackendName() != old.BackendName() {
				t.Fatalf("rig: before the reload %v to %q; tracked flow after it %v %v to %q", old.Verdict, old.BackendName(), tracked.Track, tracked.Verdict, tracked.BackendName())
			}
			if !fresh.Draining || fresh.Reason != dataplane.ReasonVIPDraining {
				t.Fatalf("rig: new flow after the reload %v %v (draining %v), want drop vip-draining", fresh.Verdict, fresh.Reason, fresh.Draining)
			}
			// The same packet as the report's, in a rig reloaded alike.
			same := cptest.New(t, before)
			same.Reload(after)
			requireAgrees(t, rep, same.Send(tc.p), same.CP.Snapshot())

			if rep.Verdict != "drop" || rep.Reason != "vip-draining" || rep.Rule != tc.removed {
				t.Errorf("verdict %q reason %q rule %q, want drop vip-draining %s", rep.Verdict, rep.Reason, rep.Rule, tc.removed)
			}
			if !strings.Contains(rep.Draining, "removed by the reload") || !strings.Contains(rep.Draining, "30s") {
				t.Errorf("draining = %q, want the removal and its 30s", rep.Draining)
			}
			if rep.TrackedBackend != old.BackendName() {
				t.Errorf("tracked_backend = %q, the rig's tracked flow goes to %q", rep.TrackedBackend, old.BackendName())
			}
			if !strings.HasPrefix(rep.Why, "M5:") || !strings.Contains(rep.Why, "vip-draining") || !strings.Contains(rep.Why, "still forwarded") {
				t.Errorf("why = %q, want M5, vip-draining and the tracked flow forwarded", rep.Why)
			}
			if strings.Contains(rep.Step1, "R1 records it") || !strings.Contains(rep.Step1, "drains") {
				t.Errorf("step1 = %q: a draining rule records nothing", rep.Step1)
			}
			var buf bytes.Buffer
			rep.WriteText(&buf)
			f := textFields(t, buf.String())
			if f["draining"] != rep.Draining || f["verdict"] != "drop vip-draining" || !strings.HasPrefix(f["tracked flow"], "forward to "+old.BackendName()) {
				t.Errorf("text:\n%s", buf.String())
			}

			// Without Previous the file alone says nothing of a drain.
			plain, err := explain.Explain(cptest.Config(t, after), &explain.Request{Packet: tc.p})
			if err != nil {
				t.Fatal(err)
			}
			if plain.Verdict != tc.verdict || plain.Reason != tc.reason || plain.Draining != "" || plain.TrackedBackend != "" {
				t.Errorf("without Previous: %q %q draining %q tracked %q, want %s %q", plain.Verdict, plain.Reason, plain.Draining, plain.TrackedBackend, tc.verdict, tc.reason)
			}

			// Timeout 0: the rule goes at once, and the report says so.
			rep0, err := explain.Explain(cptest.Config(t, drainConfig(t, 0, kept...)),
				&explain.Request{Packet: tc.p, Previous: cptest.Config(t, drainConfig(t, 0, all...))})
			if err != nil {
				t.Fatal(err)
			}
			if rep0.Verdict != tc.verdict || rep0.Reason != tc.reason || rep0.Draining != "" || !strings.HasPrefix(rep0.Why, tc.fr) ||
				!strings.Contains(rep0.Why, "rule "+tc.removed) || !strings.Contains(rep0.Why, "no drain") {
				t.Errorf("timeout 0: %q %q draining %q why %q, want %s %q, %s naming the removed rule without a drain", rep0.Verdict, rep0.Reason, rep0.Draining, rep0.Why, tc.verdict, tc.reason, tc.fr)
			}
		})
	}
}

// TestX4_ExplainSourceDropsNameFR8: a frame dropped for its source says
// so, with FR8, instead of the FR4 "no rule" a rule-less drop once fell
// back to (a new user's demo explained a source-is-self drop as FR4).
func TestX4_ExplainSourceDropsNameFR8(t *testing.T) {
	for _, tc := range []struct {
		name, src, reason string
	}{
		{"martian", "127.0.0.1", "martian-source"},
		{"a VIP", "203.0.113.11", "source-is-vip"},
		{"a backend of the service", "10.1.0.1", "source-is-backend"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep, res, rig := explainAndSend(t, cptest.Testdata(t, "web.toml"), state{}, cptest.TCP(tc.src, vip, 40000, 80, "S"))
			requireAgrees(t, rep, res, rig.CP.Snapshot())
			if rep.Verdict != "drop" || rep.Reason != tc.reason {
				t.Fatalf("verdict %q reason %q, want drop %q", rep.Verdict, rep.Reason, tc.reason)
			}
			if !strings.HasPrefix(rep.Why, "FR8: ") {
				t.Errorf("why = %q, want FR8: ...", rep.Why)
			}
		})
	}
}

package controlplane_test

// Shared helpers of the SPEC rule tests of this package (spec_*_test.go):
// a small builder for configuration texts, deterministic client generators
// and share measurement over real frames sent through cptest.Rig.

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"testing"

	"xlb/controlplane/cptest"
	"xlb/dataplane"
	"xlb/dataplane/craft"
	"xlb/dataplane/packet"
)

// vip is the address of the single L3_DEFAULT forwarding rule of every
// configuration built by svc.text: all protocols and ports reach the service.
const vip = "203.0.113.10"

// group is one backend group of a test service.
type group struct {
	name     string
	failover bool
	backends []string // backend names; addresses come from addrOf
}

// svc describes one backend service; zero values leave the schema's
// defaults in place (the field is not written at all).
type svc struct {
	name        string // default "web"
	affinity    string
	mode        string
	persistence string
	weighted    bool
	ratio       string // failover_ratio as written; "" omits it
	drop        bool   // drop_traffic_if_unhealthy
	noDrain     bool   // disable_connection_drain_on_failover
	drainingSec int
	idleSec     int
	groups      []group
	vip         string // default vip
}

// addrOf gives every backend name a fixed address, whatever the order it is
// listed in (S5 compares configurations that list backends differently):
// "b3" -> 10.0.1.3, "p2" -> 10.0.2.2, "f1" -> 10.0.3.1, "n7" -> 10.0.4.7.
func addrOf(tb testing.TB, name string) string {
	tb.Helper()
	prefix := map[byte]int{'b': 1, 'p': 2, 'f': 3, 'n': 4}
	third, ok := prefix[name[0]]
	n, err := strconv.Atoi(name[1:])
	if !ok || err != nil || n < 1 || n > 254 {
		tb.Fatalf("backend name %q: want b|p|f|n followed by 1..254", name)
	}
	return fmt.Sprintf("10.0.%d.%d", third, n)
}

// serviceText is the [[backend_service]] table and its rule.
func (s svc) serviceText(tb testing.TB) string {
	tb.Helper()
	name := s.name
	if name == "" {
		name = "web"
	}
	v := s.vip
	if v == "" {
		v = vip
	}
	var b strings.Builder
	fmt.Fprintf(&b, "[[backend_service]]\nname = %q\nprotocol = \"UNSPECIFIED\"\nhealth_checks = [\"hc\"]\n", name)
	if s.affinity != "" {
		fmt.Fprintf(&b, "session_affinity = %q\n", s.affinity)
	}
	if s.weighted {
		b.WriteString("locality_lb_policy = \"WEIGHTED_MAGLEV\"\n")
	}
	if s.drainingSec > 0 {
		fmt.Fprintf(&b, "connection_draining_timeout_sec = %d\n", s.drainingSec)
	}
	if s.mode != "" || s.persistence != "" || s.idleSec > 0 {
		b.WriteString("  [backend_service.connection_tracking_policy]\n")
		if s.mode != "" {
			fmt.Fprintf(&b, "  tracking_mode = %q\n", s.mode)
		}
		if s.persistence != "" {
			fmt.Fprintf(&b, "  connection_persistence_on_unhealthy_backends = %q\n", s.persistence)
		}
		if s.idleSec > 0 {
			fmt.Fprintf(&b, "  idle_timeout_sec = %d\n", s.idleSec)
		}
	}
	if s.ratio != "" || s.drop || s.noDrain {
		b.WriteString("  [backend_service.failover_policy]\n")
		if s.ratio != "" {
			fmt.Fprintf(&b, "  failover_ratio = %s\n", s.ratio)
		}
		if s.drop {
			b.WriteString("  drop_traffic_if_unhealthy = true\n")
		}
		if s.noDrain {
			b.WriteString("  disable_connection_drain_on_failover = true\n")
		}
	}
	for _, g := range s.groups {
		fmt.Fprintf(&b, "  [[backend_service.backend]]\n  group = %q\n", g.name)
		if g.failover {
			b.WriteString("  failover = true\n")
		}
		b.WriteString("  endpoints = [\n")
		for _, n := range g.backends {
			fmt.Fprintf(&b, "    { name = %q, ip = %q },\n", n, addrOf(tb, n))
		}
		b.WriteString("  ]\n")
	}
	fmt.Fprintf(&b, "[[forwarding_rule]]\nname = \"%s-l3\"\nip_address = %q\nip_protocol = \"L3_DEFAULT\"\nall_ports = true\nbackend_service = %q\n", name, v, name)
	return b.String()
}

// configText joins services into one file with an HTTP health check (which
// WEIGHTED_MAGLEV needs, W1) and a small conntrack table (rigs are many).
// These tests stand for a connection by its SYN alone, so a SYN's entry
// keeps the service's idle timeout (conntrack_syn_timeout_sec at its
// largest, capped by the service's); the short timeout of a SYN alone is
// dataplane's TestFlood_SYNOnlyEntryShortTimeoutThenPromoted.
func configText(tb testing.TB, services ...svc) string {
	tb.Helper()
	parts := []string{
		"[dataplane]\nconntrack_capacity = 65536\nconntrack_syn_timeout_sec = 3600\n",
		"[[health_check]]\nname = \"hc\"\ntype = \"HTTP\"\n",
	}
	for _, s := range services {
		parts = append(parts, s.serviceText(tb))
	}
	return strings.Join(parts, "\n")
}

// text is configText of one service.
func (s svc) text(tb testing.TB) string {
	tb.Helper()
	return configText(tb, s)
}

// rig starts a rig on the service's configuration.
func (s svc) rig(tb testing.TB) *cptest.Rig {
	tb.Helper()
	return cptest.New(tb, s.text(tb))
}

// primaries is one primary group "pool" of the named backends.
func primaries(names ...string) []group {
	return []group{{name: "pool", backends: names}}
}

// clients returns n distinct TCP SYNs to vip:80 from pseudo-random clients
// (a fixed seed: every run sends the same frames).
func clients(seed uint64, n int) []craft.Packet {
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	seen := map[[6]byte]bool{}
	out := make([]craft.Packet, 0, n)
	for len(out) < n {
		a := rng.Uint32()
		sport := uint16(1024 + rng.IntN(64511))
		k := [6]byte{byte(a >> 24), byte(a >> 16), byte(a >> 8), byte(a), byte(sport >> 8), byte(sport)}
		if seen[k] || byte(a>>24) == 0 || byte(a>>24) == 127 || byte(a>>24) >= 224 { // no martian source (FR8)
			continue
		}
		seen[k] = true
		src := netip.AddrFrom4([4]byte{k[0], k[1], k[2], k[3]})
		out = append(out, craft.Packet{Src: src, Dst: netip.MustParseAddr(vip), Proto: packet.ProtoTCP,
			SrcPort: sport, DstPort: 80, Flags: "S"})
	}
	return out
}

// with returns a copy of the TCP packet p with other flags ("A", "F", "R"...).
func with(p craft.Packet, flags string) craft.Packet {
	p.Flags = flags
	return p
}

// udpOf turns a client's SYN into a UDP datagram of the same addresses and
// ports.
func udpOf(p craft.Packet) craft.Packet {
	p.Proto, p.Flags = packet.ProtoUDP, ""
	return p
}

// tally is what a batch of packets did.
type tally struct {
	n       int
	by      map[string]int // forwarded, per backend name
	sides   map[dataplane.Side]int
	drops   map[dataplane.Reason]int
	tracks  map[dataplane.Track]int
	invalid map[string]int
}

func (t tally) share(name string) float64 { return float64(t.by[name]) / float64(t.n) }

// names are the backends reached, sorted.
func (t tally) names() []string {
	var out []string
	for n := range t.by {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// sendAll sends every packet at the rig's clock and tallies the decisions.
func sendAll(r *cptest.Rig, ps []craft.Packet) tally {
	r.TB.Helper()
	t := tally{n: len(ps), by: map[string]int{}, sides: map[dataplane.Side]int{},
		drops: map[dataplane.Reason]int{}, tracks: map[dataplane.Track]int{}, invalid: map[string]int{}}
	for _, p := range ps {
		res := r.Send(p)
		switch res.Verdict {
		case dataplane.VerdictForward:
			t.by[res.BackendName()]++
			t.sides[res.Side]++
			t.tracks[res.Track]++
			if res.Invalid != "" {
				t.invalid[res.Invalid]++
			}
		case dataplane.VerdictDrop:
			t.drops[res.Reason]++
		default:
			r.TB.Fatalf("%v: verdict %v, want forward or drop", p, res.Verdict)
		}
	}
	return t
}

// route sends each packet and returns the backend name it went to ("" for a
// drop), in order.
func route(r *cptest.Rig, ps []craft.Packet) []string {
	r.TB.Helper()
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = r.Send(p).BackendName()
	}
	return out
}

// service returns the named service of the rig's current snapshot.
func service(r *cptest.Rig, name string) *dataplane.Service {
	r.TB.Helper()
	for _, s := range r.CP.Snapshot().Services {
		if s != nil && s.Name == name {
			return s
		}
	}
	r.TB.Fatalf("no service %q in the snapshot", name)
	return nil
}

// eligible is the eligible set of the service, as sorted backend names.
func eligible(r *cptest.Rig, name string) []string {
	r.TB.Helper()
	snap := r.CP.Snapshot()
	var out []string
	for _, ref := range service(r, name).Eligible {
		out = append(out, snap.Backend(ref).Name)
	}
	slices.Sort(out)
	return out
}

// backendNamed returns the current (or draining) backend of that name.
func backendNamed(r *cptest.Rig, name string) *dataplane.Backend {
	r.TB.Helper()
	bs := r.CP.Snapshot().BackendByName(name)
	if len(bs) != 1 {
		r.TB.Fatalf("backend %q: %d in the snapshot, want 1", name, len(bs))
	}
	return bs[0]
}

// findClient returns the first client (by seed order) whose SYN goes to
// backend want now. The SYN is sent, so the connection is tracked.
func findClient(r *cptest.Rig, seed uint64, want string) craft.Packet {
	r.TB.Helper()
	for _, p := range clients(seed, 2000) {
		if r.Send(p).BackendName() == want {
			return p
		}
	}
	r.TB.Fatalf("no client of 2000 was sent to %s", want)
	return craft.Packet{}
}

// near fails unless got is within tol of want.
func near(tb testing.TB, what string, got, want, tol float64) {
	tb.Helper()
	if got < want-tol || got > want+tol {
		tb.Errorf("%s: share %.4f, want %.4f ± %.4f", what, got, want, tol)
	}
}

// tableShare is the fraction of the service's Maglev table owned by backend
// name (the share of all possible hashes, S2).
func tableShare(r *cptest.Rig, svcName, name string) float64 {
	r.TB.Helper()
	s := service(r, svcName)
	snap := r.CP.Snapshot()
	n := 0
	for _, i := range s.Table {
		if snap.Backend(s.Eligible[i]).Name == name {
			n++
		}
	}
	return float64(n) / float64(len(s.Table))
}

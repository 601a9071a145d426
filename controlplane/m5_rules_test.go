package controlplane_test

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"xlb/controlplane/cptest"
	"xlb/dataplane"
	"xlb/dataplane/craft"
)

// otherVIP is the VIP of the second service of the removed-rule tests.
const otherVIP = "203.0.113.20"

// vipsAt is ControlPlane.VIPs at the rig's clock, as text.
func vipsAt(r *cptest.Rig) ([]string, int64) {
	vs, end := r.CP.VIPs(r.Now)
	var out []string
	for _, v := range vs {
		out = append(out, v.String())
	}
	slices.Sort(out)
	return out, end
}

// TestM5_RemovedRuleDrains: a reload that removes a forwarding rule — the
// rule's service removed with it, or the service moved to another VIP —
// keeps the rule draining for the service's connection_draining_timeout_sec:
// tracked flows keep their backend until the drain ends, new connections
// and untracked traffic are dropped as vip-draining, the VIP stays among
// the data plane's VIPs. When the drain ends the rule is gone: no-rule,
// and the VIP leaves the list.
func TestM5_RemovedRuleDrains(t *testing.T) {
	web := svc{drainingSec: 30, groups: primaries("b1", "b2", "b3")}
	api := svc{name: "api", vip: otherVIP, drainingSec: 30, groups: primaries("n1", "n2")}
	moved := web
	moved.vip = "203.0.113.30"
	for _, tc := range []struct {
		name, after string
		vips        []string // during the drain
	}{
		{"service removed", configText(t, api), []string{vip, otherVIP}},
		{"service moved to another VIP", configText(t, moved, api), []string{vip, otherVIP, "203.0.113.30"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := cptest.New(t, configText(t, web, api))
			conns, was := m5Conns(r, 21, 200)
			r.At(10)
			r.Reload(tc.after)

			r.At(39.9)
			if got, end := vipsAt(r); !slices.Equal(got, tc.vips) || end != 40_000 {
				t.Errorf("VIPs during the drain: %v (drain ends %d), want %v (40000)", got, end, tc.vips)
			}
			for i, c := range conns {
				expect(t, "tracked flow during the drain", r.Send(with(c, "A")), dataplane.TrackHit, was[i], "")
			}
			for _, p := range []craft.Packet{clients(22, 1)[0], udpOf(clients(23, 1)[0])} {
				if res := r.Send(p); res.Verdict != dataplane.VerdictDrop || res.Reason != dataplane.ReasonVIPDraining ||
					res.Service == nil || res.Service.Name != "web" {
					t.Errorf("new %v flow during the drain: %v %v (service %v), want drop vip-draining of web",
						p.Proto, res.Verdict, res.Reason, res.Service)
				}
			}
			if res := r.Send(cptest.TCP("198.51.100.7", otherVIP, 1234, 80, "S")); res.Verdict != dataplane.VerdictForward {
				t.Errorf("new connection to the other VIP: %v %v, want forward", res.Verdict, res.Reason)
			}

			r.At(40)
			for _, c := range conns[:10] {
				if res := r.Send(with(c, "A")); res.Verdict != dataplane.VerdictDrop || res.Reason != dataplane.ReasonNoRule {
					t.Fatalf("tracked flow after the drain: %v %v, want drop no-rule", res.Verdict, res.Reason)
				}
			}
			want := slices.DeleteFunc(slices.Clone(tc.vips), func(v string) bool { return v == vip })
			if got, end := vipsAt(r); !slices.Equal(got, want) || end != 0 {
				t.Errorf("VIPs after the drain: %v (drain ends %d), want %v (0)", got, end, want)
			}
		})
	}
}

// TestM5_RemovedRuleNeverShadows: a draining rule takes only what no
// current rule takes; a rule re-added by a reload ends its drain, and its
// flows go on as before (same service: same entries).
func TestM5_RemovedRuleNeverShadows(t *testing.T) {
	web := svc{drainingSec: 30, groups: primaries("b1", "b2", "b3")}
	moved := web
	moved.vip = "203.0.113.30"
	r := cptest.New(t, web.text(t))
	conns, was := m5Conns(r, 31, 100)

	r.At(10)
	r.Reload(moved.text(t))
	r.At(15)
	if res := r.Send(clients(32, 1)[0]); res.Reason != dataplane.ReasonVIPDraining {
		t.Fatalf("new connection after the removal: %v %v, want drop vip-draining", res.Verdict, res.Reason)
	}
	r.At(20)
	r.Reload(web.text(t)) // the rule is back
	if vr := r.CP.Snapshot().LookupVIP(ptr(dataplane.Addr16(netip.MustParseAddr(vip)))); vr == nil || len(vr.Draining) != 0 {
		t.Errorf("VIP %s after its rule came back: %+v, want no draining rule", vip, vr)
	}
	for i, c := range conns {
		expect(t, "tracked flow after the rule came back", r.Send(with(c, "A")), dataplane.TrackHit, was[i], "")
	}
	if res := r.Send(clients(33, 1)[0]); res.Verdict != dataplane.VerdictForward || res.Track != dataplane.TrackNew {
		t.Errorf("new connection after the rule came back: %v %v %v, want forward new", res.Verdict, res.Track, res.Reason)
	}
	// Long after the first drain would have ended, nothing changes.
	r.At(100)
	if res := r.Send(with(conns[0], "A")); res.Verdict != dataplane.VerdictForward {
		t.Errorf("tracked flow at 100 s: %v %v, want forward", res.Verdict, res.Reason)
	}

	// A current rule of the same VIP wins over a draining one: the VIP
	// stays, the TCP/8080 rule of api leaves while draining, and web's
	// L3_DEFAULT (current) takes its traffic.
	api := svc{name: "api", vip: otherVIP, drainingSec: 30, groups: primaries("n1", "n2")}
	extra := "\n[[forwarding_rule]]\nname = \"api-8080\"\nip_address = \"" + vip +
		"\"\nip_protocol = \"TCP\"\nports = [\"8080\"]\nbackend_service = \"api\"\n"
	tcpAPI := strings.NewReplacer(
		"name = \"api\"\nprotocol = \"UNSPECIFIED\"", "name = \"api\"\nprotocol = \"TCP\"",
		"ip_address = \""+otherVIP+"\"\nip_protocol = \"L3_DEFAULT\"\nall_ports = true", "ip_address = \""+otherVIP+"\"\nip_protocol = \"TCP\"\nports = [\"80\"]",
	).Replace(configText(t, web, api))
	r2 := cptest.New(t, tcpAPI+extra)
	syn := cptest.TCP("198.51.100.9", vip, 4321, 8080, "S")
	if res := r2.Send(syn); res.Verdict != dataplane.VerdictForward || res.Service.Name != "api" {
		t.Fatalf("8080 before: %v to %v, want forward to api", res.Verdict, res.Service)
	}
	r2.At(10)
	r2.Reload(tcpAPI)
	if res := r2.Send(with(syn, "A")); res.Verdict != dataplane.VerdictForward || res.Service.Name != "web" {
		t.Errorf("8080 while api-8080 drains: %v %v to %v, want forward by web's current rule", res.Verdict, res.Reason, res.Service)
	}
	if vr := r2.CP.Snapshot().LookupVIP(ptr(dataplane.Addr16(netip.MustParseAddr(vip)))); vr == nil || len(vr.Draining) != 1 {
		t.Errorf("VIP %s: %+v, want one draining rule", vip, vr)
	}
}

// TestM5_RemovedServiceComesBack: a service removed with its rule and
// brought back by a later reload, while the rule drains, ends the drain
// (one service of that name in the snapshot): the rule is current again,
// new connections are balanced, and nothing is left to drain.
func TestM5_RemovedServiceComesBack(t *testing.T) {
	web := svc{drainingSec: 30, groups: primaries("b1", "b2", "b3")}
	api := svc{name: "api", vip: otherVIP, drainingSec: 30, groups: primaries("n1", "n2")}
	r := cptest.New(t, configText(t, web, api))
	m5Conns(r, 51, 50)
	r.At(10)
	r.Reload(configText(t, api))
	r.At(12)
	if res := r.Send(clients(52, 1)[0]); res.Reason != dataplane.ReasonVIPDraining {
		t.Fatalf("new connection while web drains: %v %v, want drop vip-draining", res.Verdict, res.Reason)
	}
	r.Reload(configText(t, web, api))
	if got, end := vipsAt(r); !slices.Equal(got, []string{vip, otherVIP}) || end != 0 {
		t.Errorf("VIPs after web came back: %v (drain ends %d), want [%s %s] (0)", got, end, vip, otherVIP)
	}
	named := 0
	for _, s := range r.CP.Snapshot().Services {
		if s != nil && s.Name == "web" {
			named++
		}
	}
	if named != 1 {
		t.Errorf("%d services called web in the snapshot, want 1", named)
	}
	if res := r.Send(clients(53, 1)[0]); res.Verdict != dataplane.VerdictForward || res.Track != dataplane.TrackNew {
		t.Errorf("new connection after web came back: %v %v %v, want forward new", res.Verdict, res.Track, res.Reason)
	}
}

func ptr[T any](v T) *T { return &v }

// TestM5_RemovedRuleNoDrain: with connection_draining_timeout_sec 0 a
// removed rule is gone at once, as is its VIP (its frames are the host's,
// FR1, as they are once the XDP program no longer has it).
func TestM5_RemovedRuleNoDrain(t *testing.T) {
	web := svc{groups: primaries("b1", "b2")}
	api := svc{name: "api", vip: otherVIP, groups: primaries("n1")}
	r := cptest.New(t, configText(t, web, api))
	conns, _ := m5Conns(r, 41, 20)
	r.At(10)
	r.Reload(configText(t, api))
	if res := r.Send(with(conns[0], "A")); res.Verdict != dataplane.VerdictPass {
		t.Errorf("tracked flow: %v %v, want pass (not a VIP any more)", res.Verdict, res.Reason)
	}
	if got, end := vipsAt(r); !slices.Equal(got, []string{otherVIP}) || end != 0 {
		t.Errorf("VIPs: %v (drain ends %d), want [%s] (0)", got, end, otherVIP)
	}
}

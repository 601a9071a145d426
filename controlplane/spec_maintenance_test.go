package controlplane_test

// Proofs of SPEC §6 (maintaining tracking entries, M1–M5), §6.1
// (persistence on unhealthy backends, P1) and X2 (hitless, atomic reload),
// driven with real frames through cptest.Rig.

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"xlb/config"
	"xlb/controlplane/cptest"
	"xlb/controlplane/sim"
	"xlb/dataplane"
	"xlb/dataplane/craft"
	"xlb/dataplane/packet"
)

// expect asserts one decision: its track word, backend and (for replaced
// entries) why the old entry was invalid.
func expect(tb testing.TB, what string, res *cptest.Result, track dataplane.Track, backend, invalid string) {
	tb.Helper()
	if res.Verdict != dataplane.VerdictForward || res.Track != track || res.BackendName() != backend || res.Invalid != invalid {
		tb.Errorf("%s: %v %v to %q (invalid %q, reason %v), want forward %v to %q (invalid %q)",
			what, res.Verdict, res.Track, res.BackendName(), res.Invalid, res.Reason, track, backend, invalid)
	}
}

// other returns the decision's backend after checking it is not avoid.
func other(tb testing.TB, what string, res *cptest.Result, track dataplane.Track, avoid, invalid string) string {
	tb.Helper()
	if res.Verdict != dataplane.VerdictForward || res.Track != track || res.BackendName() == avoid || res.Invalid != invalid {
		tb.Errorf("%s: %v %v to %q (invalid %q), want forward %v to a backend other than %s (invalid %q)",
			what, res.Verdict, res.Track, res.BackendName(), res.Invalid, track, avoid, invalid)
	}
	return res.BackendName()
}

func TestM1_IdleTimeoutAtTheBoundary(t *testing.T) {
	for _, tc := range []struct {
		name   string
		idle   int   // idle_timeout_sec; 0 leaves the default
		idleMs int64 // expected timeout
	}{
		{"default 60 s", 0, 60_000},
		{"idle_timeout_sec 5", 5, 5_000},
		{"idle_timeout_sec 300", 300, 300_000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := svc{idleSec: tc.idle, groups: primaries("b1", "b2", "b3")}.rig(t)
			if got := int64(service(r, "web").IdleSec) * 1000; got != tc.idleMs {
				t.Fatalf("service idle timeout %d ms, want %d", got, tc.idleMs)
			}
			conn := findClient(r, 1, "b1")
			// b1 goes unhealthy: TCP persists (P1), so only the entry keeps
			// the connection on b1; a fresh selection would avoid it.
			r.Health("b1", false)
			last := r.Now
			for i := range 3 {
				// Each packet just inside the timeout refreshes the entry.
				r.Now = last + tc.idleMs - 1
				expect(t, fmt.Sprintf("packet %d at last+%d ms", i, tc.idleMs-1), r.Send(with(conn, "A")), dataplane.TrackHit, "b1", "")
				last = r.Now
			}
			// Exactly the timeout after the last packet: expired (lazily, at
			// this packet), so it is a new connection, selected afresh.
			r.Now = last + tc.idleMs
			other(t, "packet at last+timeout", r.Send(with(conn, "A")), dataplane.TrackNew, "b1", "")
		})
	}
	t.Run("UDP entry, CLIENT_IP_PORT_PROTO", func(t *testing.T) {
		r := svc{affinity: "CLIENT_IP_PORT_PROTO", persistence: "ALWAYS_PERSIST", idleSec: 10, groups: primaries("b1", "b2")}.rig(t)
		var dgram craft.Packet
		for _, c := range clients(2, 100) {
			if r.Send(udpOf(c)).BackendName() == "b1" {
				dgram = udpOf(c)
				break
			}
		}
		r.Health("b1", false) // ALWAYS_PERSIST keeps UDP on b1 while tracked
		r.Now += 9_999
		expect(t, "datagram at +9.999 s", r.Send(dgram), dataplane.TrackHit, "b1", "")
		r.Now += 10_000
		expect(t, "datagram at +10 s", r.Send(dgram), dataplane.TrackNew, "b2", "")
	})
}

// M2: a FIN or RST does not remove the entry; later packets still hit it,
// and only a later SYN starts over (CT1).
func TestM2_FinAndRstKeepTheEntry(t *testing.T) {
	r := svc{groups: primaries("b1", "b2", "b3")}.rig(t)
	conn := findClient(r, 2, "b2")
	// b2 unhealthy: a fresh selection would avoid it, so a hit on b2 shows
	// that the entry is still there (TCP persists, P1).
	r.Health("b2", false)
	for i, flags := range []string{"FA", "A", "R", "A", "RA", "PA"} {
		r.Now += 1000
		expect(t, fmt.Sprintf("#%d %s after close", i, flags), r.Send(with(conn, flags)), dataplane.TrackHit, "b2", "")
	}
	// A later SYN of the same 5-tuple is a new connection (CT1).
	r.Now += 1000
	next := other(t, "SYN after close", r.Send(conn), dataplane.TrackNew, "b2", "")
	expect(t, "ACK after the new SYN", r.Send(with(conn, "A")), dataplane.TrackHit, next, "")
}

func TestM3_UnhealthyBackendReplacesEntry(t *testing.T) {
	all := []string{"b1", "b2", "b3"}
	r := svc{persistence: "NEVER_PERSIST", groups: primaries(all...)}.rig(t)
	conn := findClient(r, 3, "b1")

	r.Health("b1", false)
	r.Now += 1000
	moved := other(t, "first packet on unhealthy b1", r.Send(with(conn, "A")), dataplane.TrackReplaced, "b1", "unhealthy")
	expect(t, "next packet", r.Send(with(conn, "A")), dataplane.TrackHit, moved, "")
	// b1 healthy again: the connection stays where the new entry put it.
	r.Health("b1", true)
	expect(t, "after b1 recovered", r.Send(with(conn, "A")), dataplane.TrackHit, moved, "")

	// Unhealthy and healthy again with no packet in between: the entry
	// survives.
	conn2 := findClient(r, 33, "b3")
	r.Health("b3", false)
	r.Now += 5000
	r.Health("b3", true)
	r.Now += 5000
	expect(t, "b3 flapped without a packet", r.Send(with(conn2, "A")), dataplane.TrackHit, "b3", "")

	// With persistence on (DEFAULT_FOR_PROTOCOL, TCP, PER_CONNECTION), the
	// entry is kept on the unhealthy backend.
	r2 := svc{groups: primaries(all...)}.rig(t)
	conn3 := findClient(r2, 3, "b1")
	r2.Health("b1", false)
	expect(t, "persisting TCP", r2.Send(with(conn3, "A")), dataplane.TrackHit, "b1", "")
}

// m4 is a failover service whose side switches while the entry's backend p1
// stays healthy: p2 down makes 1/2 healthy primaries < ratio 0.6 (E3.5).
func m4(noDrain bool) svc {
	return svc{ratio: "0.6", noDrain: noDrain, groups: []group{
		{name: "pool", backends: []string{"p1", "p2"}},
		{name: "spare", failover: true, backends: []string{"f1"}},
	}}
}

func TestM4_FailoverSwitch(t *testing.T) {
	t.Run("disable_connection_drain_on_failover true", func(t *testing.T) {
		r := m4(true).rig(t)
		conn := findClient(r, 4, "p1")
		r.Health("p2", false)
		if service(r, "web").Side != dataplane.SideFailover {
			t.Fatal("premise: the side should be failover")
		}
		res := r.Send(with(conn, "A"))
		expect(t, "entry recorded on primary, side now failover", res, dataplane.TrackReplaced, "f1", "failover")
		if res.Side != dataplane.SideFailover {
			t.Errorf("replaced entry side %v, want failover", res.Side)
		}
		expect(t, "next packet", r.Send(with(conn, "A")), dataplane.TrackHit, "f1", "")
		// And back: the entry (side failover) is replaced on the primary side.
		r.Health("p2", true)
		res = r.Send(with(conn, "A"))
		other(t, "failback", res, dataplane.TrackReplaced, "f1", "failover")
		if res.Side != dataplane.SidePrimary || res.Backend.Failover {
			t.Errorf("failback: side %v backend %s, want a primary", res.Side, res.BackendName())
		}

		// Switched and switched back with no packet in between: survives.
		conn2 := findClient(r, 44, "p1")
		r.Health("p2", false)
		r.Now += 1000
		r.Health("p2", true)
		expect(t, "switch and back without a packet", r.Send(with(conn2, "A")), dataplane.TrackHit, "p1", "")
	})
	t.Run("disable_connection_drain_on_failover false (default)", func(t *testing.T) {
		r := m4(false).rig(t)
		conn := findClient(r, 4, "p1")
		r.Health("p2", false)
		res := r.Send(with(conn, "A"))
		expect(t, "tracked connection across the switch", res, dataplane.TrackHit, "p1", "")
		if res.Side != dataplane.SidePrimary {
			t.Errorf("hit reports side %v, want the recorded primary", res.Side)
		}
		// Untracked traffic of the same client follows the new set.
		echo := r.Send(cptest.Proto(conn.Src.String(), vip, packet.ProtoICMP))
		expect(t, "ICMP echo (untracked)", echo, dataplane.TrackUntracked, "f1", "")
	})
}

// m5Conns establishes n connections and returns them with their backends.
func m5Conns(r *cptest.Rig, seed uint64, n int) ([]craft.Packet, []string) {
	r.TB.Helper()
	conns := clients(seed, n)
	return conns, route(r, conns)
}

func TestM5_RemovedBackend(t *testing.T) {
	all := []string{"b1", "b2", "b3"}
	base := svc{groups: []group{{name: "a", backends: []string{"b1", "b2"}}, {name: "b", backends: []string{"b3"}}}}
	removals := []struct {
		name    string
		gone    string
		removed svc // the configuration without it
	}{
		{"backend leaves its group", "b2", svc{groups: []group{{name: "a", backends: []string{"b1"}}, {name: "b", backends: []string{"b3"}}}}},
		{"its group is removed", "b3", svc{groups: []group{{name: "a", backends: []string{"b1", "b2"}}}}},
	}
	// neverSelected: new connections from many clients avoid gone.
	neverSelected := func(t *testing.T, r *cptest.Rig, gone string) {
		t.Helper()
		if got := sendAll(r, clients(77, 3000)); got.by[gone] != 0 || len(got.by) == 0 {
			t.Errorf("new connections: %v; %s must get none", got.by, gone)
		}
	}

	for _, rm := range removals {
		t.Run("reload, draining 0/"+rm.name, func(t *testing.T) {
			r := base.rig(t)
			conns, was := m5Conns(r, 5, 300)
			r.At(10)
			r.Reload(rm.removed.text(t))
			for i, c := range conns {
				res := r.Send(with(c, "A"))
				if was[i] == rm.gone {
					other(t, "flow of the removed backend", res, dataplane.TrackReplaced, rm.gone, "removed")
				} else {
					expect(t, "flow of a kept backend", res, dataplane.TrackHit, was[i], "")
				}
			}
			neverSelected(t, r, rm.gone)
		})
		t.Run("reload, draining 30 s/"+rm.name, func(t *testing.T) {
			s, after := base, rm.removed
			s.drainingSec, after.drainingSec = 30, 30
			r := s.rig(t)
			conns, was := m5Conns(r, 5, 300)
			r.At(10)
			r.Reload(after.text(t))
			neverSelected(t, r, rm.gone)
			r.Now = 10_000 + 30_000 - 1 // still draining
			for i, c := range conns {
				expect(t, "flow at removal+29.999 s", r.Send(with(c, "A")), dataplane.TrackHit, was[i], "")
			}
			neverSelected(t, r, rm.gone)
			r.Now = 10_000 + 30_000 // draining over
			for i, c := range conns {
				res := r.Send(with(c, "A"))
				if was[i] == rm.gone {
					other(t, "flow of the removed backend at removal+30 s", res, dataplane.TrackReplaced, rm.gone, "removed")
				} else {
					expect(t, "flow of a kept backend at removal+30 s", res, dataplane.TrackHit, was[i], "")
				}
			}
		})
	}
	t.Run("re-added while draining", func(t *testing.T) {
		s, after := base, removals[0].removed
		s.drainingSec, after.drainingSec = 30, 30
		r := s.rig(t)
		conns, was := m5Conns(r, 6, 300)
		ref := backendNamed(r, "b2").Ref
		r.At(10)
		r.Reload(after.text(t))
		r.At(20)
		r.Reload(s.text(t))
		if got := backendNamed(r, "b2").Ref; got != ref || backendNamed(r, "b2").Removed {
			t.Errorf("b2 re-added: ref %v (removed %v), want its old ref %v", got, backendNamed(r, "b2").Removed, ref)
		}
		r.At(45) // after the draining would have ended, within the idle timeout
		for i, c := range conns {
			expect(t, "flow after b2 came back", r.Send(with(c, "A")), dataplane.TrackHit, was[i], "")
		}
		if got := sendAll(r, clients(78, 1000)); got.by["b2"] == 0 {
			t.Errorf("b2 takes no new connections after it came back: %v", got.by)
		}
	})
	for _, draining := range []int{0, 30} {
		t.Run(fmt.Sprintf("operator drain, draining %d s", draining), func(t *testing.T) {
			s := base
			s.drainingSec = draining
			r := s.rig(t)
			conns, was := m5Conns(r, 7, 300)
			r.At(10)
			if _, err := r.CP.Drain("b1", r.Now); err != nil {
				t.Fatal(err)
			}
			if got := eligible(r, "web"); slices.Contains(got, "b1") {
				t.Errorf("drained b1 is eligible: %v", got)
			}
			neverSelected(t, r, "b1")
			r.Now = int64(10_000 + draining*1000 - 1)
			if draining > 0 {
				for i, c := range conns {
					expect(t, "flow while draining", r.Send(with(c, "A")), dataplane.TrackHit, was[i], "")
				}
			}
			r.Now = int64(10_000 + draining*1000)
			for i, c := range conns {
				res := r.Send(with(c, "A"))
				if was[i] == "b1" {
					other(t, "flow of the drained backend", res, dataplane.TrackReplaced, "b1", "removed")
				} else {
					expect(t, "flow of another backend", res, dataplane.TrackHit, was[i], "")
				}
			}
			if _, err := r.CP.Undrain("b1", r.Now); err != nil {
				t.Fatal(err)
			}
			if got := eligible(r, "web"); !slices.Equal(got, all) {
				t.Errorf("after Undrain: eligible %v, want %v", got, all)
			}
			if got := sendAll(r, clients(79, 1000)); got.by["b1"] == 0 {
				t.Errorf("undrained b1 takes no new connections: %v", got.by)
			}
		})
	}
}

// p1Persists is the table of SPEC §6.1: does an entry on an unhealthy
// backend keep its packets? (ALWAYS_PERSIST with PER_SESSION is rejected.)
func p1Persists(option, mode, affinity string, proto packet.Proto) bool {
	switch option {
	case "NEVER_PERSIST":
		return false
	case "ALWAYS_PERSIST":
		return proto == packet.ProtoTCP || affinity != "NONE"
	}
	if proto != packet.ProtoTCP {
		return false
	}
	return mode == "PER_CONNECTION" || affinity == "NONE" || affinity == "CLIENT_IP_PORT_PROTO"
}

// t1Trackable is T1.
func t1Trackable(affinity string, proto packet.Proto) bool {
	return proto == packet.ProtoTCP || affinity != "NONE"
}

func TestP1_PersistenceOnUnhealthyBackends(t *testing.T) {
	protos := []packet.Proto{packet.ProtoTCP, packet.ProtoUDP, packet.ProtoESP, packet.ProtoGRE}
	var rows []string
	for _, option := range []string{"DEFAULT_FOR_PROTOCOL", "NEVER_PERSIST", "ALWAYS_PERSIST"} {
		for _, mode := range []string{"PER_CONNECTION", "PER_SESSION"} {
			for _, affinity := range []string{"NONE", "CLIENT_IP_PORT_PROTO", "CLIENT_IP_PROTO", "CLIENT_IP"} {
				s := svc{persistence: option, mode: mode, affinity: affinity, groups: primaries("b1", "b2")}
				name := option + "/" + mode + "/" + affinity
				if option == "ALWAYS_PERSIST" && mode == "PER_SESSION" {
					t.Run(name+"/rejected", func(t *testing.T) {
						_, err := config.Parse("p1.toml", []byte(s.text(t)))
						const field = "backend_service[0].connection_tracking_policy.connection_persistence_on_unhealthy_backends"
						if err == nil || !strings.Contains(err.Error(), field) || !strings.Contains(err.Error(), "PER_SESSION") {
							t.Errorf("error %v, want one at %s", err, field)
						}
					})
					rows = append(rows, fmt.Sprintf("%-64s invalid configuration", name))
					continue
				}
				row := fmt.Sprintf("%-64s", name)
				for _, proto := range protos {
					persists, trackable := p1Persists(option, mode, affinity, proto), t1Trackable(affinity, proto)
					row += fmt.Sprintf(" %s:%v", proto.String(), persists)
					t.Run(name+"/"+proto.String(), func(t *testing.T) {
						r := s.rig(t)
						first, next := p1Packets(proto)
						res := r.Send(first)
						b := res.BackendName()
						r.Health(b, false)
						r.Now += 1000
						res = r.Send(next)
						switch {
						case trackable && persists:
							expect(t, "entry on the unhealthy backend", res, dataplane.TrackHit, b, "")
						case trackable:
							other(t, "entry on the unhealthy backend", res, dataplane.TrackReplaced, b, "unhealthy")
						default:
							other(t, "untracked packet", res, dataplane.TrackUntracked, b, "")
						}
					})
				}
				rows = append(rows, row)
			}
		}
	}
	t.Logf("P1 as tested (persists on an unhealthy backend):\n%s", strings.Join(rows, "\n"))
}

// p1Packets: a flow's first packet and a later one.
func p1Packets(proto packet.Proto) (first, next craft.Packet) {
	const src = "198.51.100.77"
	switch proto {
	case packet.ProtoTCP:
		first = cptest.TCP(src, vip, 40000, 443, "S")
		return first, with(first, "A")
	case packet.ProtoUDP:
		first = cptest.UDP(src, vip, 40000, 53)
		return first, first
	default:
		first = cptest.Proto(src, vip, proto)
		return first, first
	}
}

func TestX2_ReloadKeepsSurvivingFlows(t *testing.T) {
	before := svc{groups: []group{
		{name: "a", backends: []string{"b1", "b2"}},
		{name: "b", backends: []string{"b3"}},
	}}
	// b1 removed, b4 added, b3 moved into group a, groups reordered.
	after := svc{groups: []group{
		{name: "c", backends: []string{"b4"}},
		{name: "a", backends: []string{"b3", "b2"}},
	}}
	r := before.rig(t)
	conns := clients(8, 600)
	refs := make([]dataplane.BackendRef, len(conns))
	for i, c := range conns {
		refs[i] = r.Send(c).Backend.Ref
	}
	oldRef := map[string]dataplane.BackendRef{}
	for _, n := range []string{"b1", "b2", "b3"} {
		oldRef[n] = backendNamed(r, n).Ref
	}
	r.At(5)
	d := r.Reload(after.text(t))
	if d.BackendsKept != 2 || !slices.Equal(d.BackendsAdded, []string{"b4"}) || !slices.Equal(d.BackendsRemoved, []string{"b1"}) {
		t.Errorf("diff %+v, want b2 and b3 kept, b4 added, b1 removed", d)
	}
	for _, n := range []string{"b2", "b3"} {
		if got := backendNamed(r, n).Ref; got != oldRef[n] {
			t.Errorf("%s: ref %v after reload, want %v", n, got, oldRef[n])
		}
	}
	kept := 0
	for i, c := range conns {
		res := r.Send(with(c, "A"))
		if refs[i] == oldRef["b1"] {
			other(t, "flow of removed b1", res, dataplane.TrackReplaced, "b1", "removed")
			continue
		}
		kept++
		if res.Track != dataplane.TrackHit || res.Backend == nil || res.Backend.Ref != refs[i] {
			t.Errorf("flow %d: %v to %s, want a hit on ref %v", i, res.Track, res.BackendName(), refs[i])
		}
	}
	t.Logf("X2: %d flows of surviving backends kept their backend across the reload", kept)
	if got := sendAll(r, clients(9, 1000)); got.by["b4"] == 0 || got.by["b1"] != 0 {
		t.Errorf("new connections after reload: %v; want b4 used and b1 never", got.by)
	}
}

func TestX2_InvalidReloadKeepsRunningConfig(t *testing.T) {
	good := svc{groups: primaries("b1", "b2", "b3")}
	r := good.rig(t)
	conns, was := m5Conns(r, 10, 200)
	cfg, snap := r.CP.Config(), r.CP.Snapshot()

	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.toml")
	// Valid TOML, invalid configuration: b1 removed and a ratio out of range.
	broken := svc{ratio: "1.5", groups: primaries("b2", "b3")}.text(t)
	if err := os.WriteFile(bad, []byte(broken), 0o644); err != nil {
		t.Fatal(err)
	}
	var warn bytes.Buffer
	r.M.Warn = &warn
	r.At(5)
	if _, err := r.M.Step(&sim.Event{Line: 4, T: 5, TText: "5", Reload: bad}); err != nil {
		t.Fatalf("a rejected reload is not an error of the scenario: %v", err)
	}
	msg := warn.String()
	if !strings.Contains(msg, "line 4") || !strings.Contains(msg, "rejected") ||
		!strings.Contains(msg, "backend_service[0].failover_policy.failover_ratio: 1.5 is outside [0.0, 1.0]") {
		t.Errorf("warning %q: want the line, \"rejected\" and the error with its field", msg)
	}
	if r.CP.Config() != cfg || r.CP.Snapshot() != snap {
		t.Error("the running configuration or snapshot changed")
	}
	for i, c := range conns {
		expect(t, "flow after the rejected reload", r.Send(with(c, "A")), dataplane.TrackHit, was[i], "")
	}
	if got := sendAll(r, clients(11, 600)); got.by["b1"] == 0 {
		t.Errorf("b1 (removed only in the rejected file) takes no new connections: %v", got.by)
	}

	// The same path with a valid file is applied (the rejection was the file's).
	if err := os.WriteFile(bad, []byte(svc{groups: primaries("b2", "b3")}.text(t)), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := r.M.Step(&sim.Event{Line: 5, T: 6, TText: "6", Reload: bad}); err != nil {
		t.Fatal(err)
	}
	if got := eligible(r, "web"); !slices.Equal(got, []string{"b2", "b3"}) {
		t.Errorf("after a valid reload: eligible %v, want [b2 b3]", got)
	}
}

package e2e

import (
	"fmt"
	"math"
	"net/netip"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"xlb/scripts/testbed"
)

// longLived is the number of long-lived connections of the kill -9, join,
// SIGTERM and node-drain steps, each asking every 100 ms (3000 requests a
// second through the fleet), as issue 10 asks.
const longLived = 300

// TestFleet runs three xlb instances behind the fleet bed's router, which
// spreads flows over them with ECMP on a layer-4 hash, and proves with the
// clients' real kernel TCP, one bed shared by the steps:
//
//   - ECMPSpread: new connections spread over all three instances, each
//     within 8 points of a third, and every connection's backend is the
//     one `xlb explain` predicts from the configuration alone, whichever
//     instance it crossed: every instance builds the same tables (S5).
//   - Kill9: kill -9 of an instance under 300 long-lived connections and a
//     stream of new ones: >= 99 % of the long-lived connections survive,
//     without a reset and on their backend (the flows the router moves to
//     the other instances are CT4 misses there, decided to the same
//     backend); new connections fail only until the router drops the dead
//     instance, for at most hold time + 1 s.
//   - Join: the killed instance comes back: the flows ECMP moves to it keep
//     their backends, none breaks.
//   - SIGTERM: an instance stopped with SIGTERM breaks no long-lived
//     connection and fails no new one, and exits 0.
//   - DrainNode: `xlb drain --node` and `xlb undrain --node` break none and
//     fail none either.
//
// Without fleetBGP the test installs the router's ECMP route itself and
// removes or adds an instance's next hop where BGP would: kill -9 is
// followed by the removal one hold time later, SIGTERM by graceful
// shutdown's order (withdraw, forward graceful_shutdown_sec, stop).
func TestFleet(t *testing.T) {
	f := upFleet(t, "e2efl")
	all := []int{0, 1, 2}
	for j := range all {
		f.start(t, j)
	}
	for j := range all {
		f.waitStatus(t, j, "healthy backends", fleetHealthy)
	}
	if !fleetBGP {
		f.setRoutes(t, all...)
	}
	f.waitRoutes(t, all...)

	if !t.Run("ECMPSpread", func(t *testing.T) { fleetSpread(t, f) }) {
		return
	}

	tr := newTraffic(t, f)
	var conns []*longConn
	ok := t.Run("Kill9", func(t *testing.T) {
		// Which instance each connection crossed, from their counters.
		before := f.newConnsTotal(t, all...)
		conns = tr.open(t, longLived)
		after := f.newConnsTotal(t, all...)
		var per []string
		for j := range all {
			per = append(per, fmt.Sprintf("%s %.0f", f.bed.Instances[j].Name, after[j]-before[j]))
			if after[j] == before[j] {
				t.Errorf("no long-lived connection crossed %s", f.bed.Instances[j].Name)
			}
		}
		t.Logf("%d long-lived connections opened, per instance: %s", len(conns), strings.Join(per, ", "))
		tr.startStream()
		fleetKill9(t, f, tr)
	})
	if !ok {
		return
	}
	t.Run("Join", func(t *testing.T) { fleetJoin(t, f, tr) })
	t.Run("SIGTERM", func(t *testing.T) { fleetSIGTERM(t, f, tr) })
	t.Run("DrainNode", func(t *testing.T) { fleetDrainNode(t, f, tr) })
	tr.close()
	t.Logf("long-lived connections: %d opened, %d alive at the end, %d answers in all", len(conns), len(tr.alive()), answers(conns))
}

// fleetSpread opens new connections from the client, 16 at a time, and
// checks each instance's share (its counters) and each connection's
// backend against xlb explain.
func fleetSpread(t *testing.T, f *fleet) {
	const n4, n6 = 600, 150
	all := []int{0, 1, 2}
	before := f.newConnsTotal(t, all...)
	type result struct {
		local, remote netip.AddrPort
		backend       string
		err           error
	}
	res := make([]result, n4+n6)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	for i := range res {
		vip := testbed.VIP4
		if i >= n4 {
			vip = testbed.VIP6
		}
		dst := netip.AddrPortFrom(vip, testbed.HTTPPort)
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			hc, err := testbed.DialHTTP(f.bed.Clients[0].NS, dst, 3*time.Second)
			if err != nil {
				res[i] = result{remote: dst, err: err}
				return
			}
			defer hc.Close()
			r, err := hc.Get("/", 3*time.Second)
			res[i] = result{netip.MustParseAddrPort(hc.LocalAddr().String()), dst, r.Backend, err}
		})
	}
	wg.Wait()
	after := f.newConnsTotal(t, all...)

	perBackend := map[string]int{}
	mismatch := 0
	for _, r := range res {
		if r.err != nil {
			t.Errorf("new connection to %s: %v", r.remote, r.err)
			continue
		}
		perBackend[r.backend]++
		if want := f.predict(t, r.local, r.remote); r.backend != want {
			mismatch++
			if mismatch <= 10 {
				t.Errorf("connection %s -> %s answered by %s; xlb explain predicts %s", r.local, r.remote, r.backend, want)
			}
		}
	}
	if mismatch > 0 {
		t.Errorf("%d of %d connections answered by another backend than xlb explain predicts", mismatch, len(res))
	}
	total := 0.0
	for j := range all {
		total += after[j] - before[j]
	}
	var report []string
	for j := range all {
		got := 100 * (after[j] - before[j]) / total
		report = append(report, fmt.Sprintf("%s %.0f (%.1f%%)", f.bed.Instances[j].Name, after[j]-before[j], got))
		if math.Abs(got-100.0/3) > shareTolerance {
			t.Errorf("%s took %.1f%% of new connections, want %.1f%% within %.0f points", f.bed.Instances[j].Name, got, 100.0/3, shareTolerance)
		}
	}
	if int(total) < len(res) {
		t.Errorf("the instances recorded %.0f new connections, the client opened %d", total, len(res))
	}
	t.Logf("%d new connections (%d IPv4, %d IPv6) over the instances: %s; over the backends: %v; all as xlb explain predicts: %v",
		len(res), n4, n6, strings.Join(report, ", "), perBackend, mismatch == 0)

	// The same tables on every instance: their fingerprints agree.
	fps := map[string][]string{}
	for j := range all {
		for _, svc := range f.status(t, j).Services {
			fps[svc.Name] = append(fps[svc.Name], svc.Fingerprint)
		}
	}
	for name, fp := range fps {
		if fp[0] == "" {
			t.Logf("service %s: /status has no fingerprint (yet)", name)
			continue
		}
		if fp[0] != fp[1] || fp[0] != fp[2] {
			t.Errorf("service %s: fingerprints differ across the instances: %v", name, fp)
		}
	}
}

// fleetKill9 kills l1 with SIGKILL while tr's long-lived connections and
// stream run.
func fleetKill9(t *testing.T, f *fleet, tr *traffic) {
	start := time.Now()
	time.Sleep(time.Second) // traffic before the kill
	alive := tr.alive()
	if len(alive) != len(tr.conns) {
		t.Fatalf("%d of %d long-lived connections failed before the kill: %v", len(tr.conns)-len(alive), len(tr.conns), tr.broken(tr.conns, start.Add(-time.Hour)))
	}
	kill := time.Now()
	f.procs[0].kill9(t)
	if !fleetBGP {
		// What the router does with BGP: it keeps the dead instance's
		// route until its hold time expires.
		time.Sleep(fleetHold)
		f.setRoutes(t, 1, 2)
	}
	removed := f.waitRoutes(t, 1, 2)
	t.Logf("the router dropped l1's route %v after the kill", removed.Sub(kill).Round(time.Millisecond))
	tr.settle(t, alive, removed)
	time.Sleep(2 * time.Second) // new connections after the route changed
	end := time.Now()
	time.Sleep(3500 * time.Millisecond) // their results

	broken := tr.broken(alive, kill)
	survived := len(alive) - len(broken)
	t.Logf("long-lived connections: %d of %d survived the kill (%.1f%%), without a reset and on their backend", survived, len(alive), 100*float64(survived)/float64(len(alive)))
	if float64(survived) < 0.99*float64(len(alive)) {
		t.Errorf("only %d of %d long-lived connections survived, want >= 99%%: %s", survived, len(alive), strings.Join(broken, "; "))
	} else if len(broken) > 0 {
		t.Logf("broken: %s", strings.Join(broken, "; "))
	}

	// New connections: failed when not answered within 1 s (a SYN lost to
	// the dead instance and its first retransmission after 1 s). The
	// outage is the span of failed attempts.
	before := tr.attemptsBetween(start, kill.Add(-time.Second))
	for _, a := range before {
		if a.err != nil {
			t.Errorf("a new connection failed before the kill (at %v): %v", a.at.Sub(kill), a.err)
		}
	}
	attempts := tr.attemptsBetween(kill.Add(-time.Second), end)
	var failed []attempt
	for _, a := range attempts {
		if a.err != nil || a.latency > time.Second {
			failed = append(failed, a)
		}
	}
	outage := time.Duration(0)
	if len(failed) > 0 {
		outage = failed[len(failed)-1].at.Sub(failed[0].at)
		t.Logf("new connections: %d of %d failed (not answered within 1 s), from %v to %v after the kill: outage %v (bound: hold time %v + 1 s)",
			len(failed), len(attempts), failed[0].at.Sub(kill).Round(time.Millisecond),
			failed[len(failed)-1].at.Sub(kill).Round(time.Millisecond), outage.Round(time.Millisecond), fleetHold)
	} else {
		t.Logf("new connections: none of %d failed around the kill", len(attempts))
	}
	if outage > fleetHold+time.Second {
		t.Errorf("new connections failed for %v, want <= hold time %v + 1 s", outage, fleetHold)
	}
	for _, a := range attempts {
		if a.at.After(removed.Add(500*time.Millisecond)) && (a.err != nil || a.latency > time.Second) {
			t.Errorf("a new connection %v after the router dropped l1 failed: %v (%v)", a.at.Sub(removed).Round(time.Millisecond), a.err, a.latency)
		}
	}
}

// fleetJoin restarts l1 while the long-lived connections run, without
// new ones, so that what l1 records are the flows ECMP moved to it.
func fleetJoin(t *testing.T, f *fleet, tr *traffic) {
	tr.stopStream()
	alive := tr.alive()
	f.start(t, 0)
	f.waitStatus(t, 0, "healthy backends", fleetHealthy)
	join := time.Now()
	if !fleetBGP {
		f.setRoutes(t, 0, 1, 2)
	}
	added := f.waitRoutes(t, 0, 1, 2)
	tr.settle(t, alive, added)
	time.Sleep(time.Second)
	moved := f.newConnsTotal(t, 0)[0]
	t.Logf("l1 joined: %.0f of %d long-lived flows moved to it (recorded there as CT4 misses), %v after the join began",
		moved, len(alive), added.Sub(join).Round(time.Millisecond))
	if moved < float64(len(alive))/10 {
		t.Errorf("only %.0f of %d flows moved to l1 when it joined: the join was not exercised", moved, len(alive))
	}
	if broken := tr.broken(alive, join); len(broken) > 0 {
		t.Errorf("%d of %d long-lived connections broke when l1 joined: %s", len(broken), len(alive), strings.Join(broken, "; "))
	}
	tr.startStream()
}

// fleetSIGTERM stops l2 with SIGTERM, then starts it again.
func fleetSIGTERM(t *testing.T, f *fleet, tr *traffic) {
	alive := tr.alive()
	time.Sleep(time.Second)
	term := time.Now()
	if fleetBGP {
		f.signal(t, 1, syscall.SIGTERM)
	} else {
		f.setRoutes(t, 0, 2)
		time.Sleep(fleetGrace)
		f.signal(t, 1, syscall.SIGTERM)
	}
	removed := f.waitRoutes(t, 0, 2)
	if err := f.waitExit(t, 1); err != nil {
		t.Errorf("xlb in l2 ended with %v after SIGTERM, want exit 0", err)
	}
	exited := time.Now()
	t.Logf("SIGTERM: route withdrawn after %v, xlb exited after %v", removed.Sub(term).Round(time.Millisecond), exited.Sub(term).Round(time.Millisecond))
	tr.settle(t, alive, exited)
	time.Sleep(time.Second)
	end := time.Now()
	time.Sleep(3500 * time.Millisecond)
	checkNoBreak(t, tr, "SIGTERM of l2", alive, term, end)

	// l2 back.
	alive = tr.alive()
	f.start(t, 1)
	f.waitStatus(t, 1, "healthy backends", fleetHealthy)
	join := time.Now()
	if !fleetBGP {
		f.setRoutes(t, 0, 1, 2)
	}
	added := f.waitRoutes(t, 0, 1, 2)
	tr.settle(t, alive, added)
	end = time.Now()
	time.Sleep(3500 * time.Millisecond)
	checkNoBreak(t, tr, "l2 joining again", alive, join, end)
}

// fleetDrainNode drains l3 with `xlb drain --node`, then undrains it.
func fleetDrainNode(t *testing.T, f *fleet, tr *traffic) {
	alive := tr.alive()
	time.Sleep(time.Second)
	drain := time.Now()
	if fleetBGP {
		if out, err := f.xlbIn(2, "drain", "--node", "--admin", fleetAdmin.String()); err != nil {
			t.Fatalf("xlb drain --node: %v\n%s", err, out)
		}
	} else {
		f.setRoutes(t, 0, 1)
	}
	removed := f.waitRoutes(t, 0, 1)
	if fleetBGP {
		f.waitStatus(t, 2, "node drained", func(s fleetStatus) bool { return s.BGP != nil && s.BGP.NodeDrained })
	}
	t.Logf("drain --node: route withdrawn after %v", removed.Sub(drain).Round(time.Millisecond))
	tr.settle(t, alive, removed)
	time.Sleep(time.Second)
	end := time.Now()
	time.Sleep(3500 * time.Millisecond)
	checkNoBreak(t, tr, "drain --node of l3", alive, drain, end)

	alive = tr.alive()
	undrain := time.Now()
	if fleetBGP {
		if out, err := f.xlbIn(2, "undrain", "--node", "--admin", fleetAdmin.String()); err != nil {
			t.Fatalf("xlb undrain --node: %v\n%s", err, out)
		}
	} else {
		f.setRoutes(t, 0, 1, 2)
	}
	added := f.waitRoutes(t, 0, 1, 2)
	tr.settle(t, alive, added)
	end = time.Now()
	time.Sleep(3500 * time.Millisecond)
	checkNoBreak(t, tr, "undrain --node of l3", alive, undrain, end)
}

// checkNoBreak fails t when a connection of alive broke since from, or a
// new connection started in [from, to) failed.
func checkNoBreak(t *testing.T, tr *traffic, what string, alive []*longConn, from, to time.Time) {
	t.Helper()
	if broken := tr.broken(alive, from); len(broken) > 0 {
		t.Errorf("%s: %d of %d long-lived connections broke: %s", what, len(broken), len(alive), strings.Join(broken, "; "))
	}
	attempts := tr.attemptsBetween(from, to)
	var failed []string
	var slow int
	for _, a := range attempts {
		if a.err != nil {
			failed = append(failed, fmt.Sprintf("%v: %v", a.at.Sub(from).Round(time.Millisecond), a.err))
		} else if a.latency > time.Second {
			slow++
		}
	}
	if len(failed) > 0 {
		t.Errorf("%s: %d of %d new connections failed: %s", what, len(failed), len(attempts), strings.Join(failed, "; "))
	}
	t.Logf("%s: %d long-lived connections, none broken; %d new connections, %d failed, %d answered after a SYN retransmission",
		what, len(alive), len(attempts), len(failed), slow)
}

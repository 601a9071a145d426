package e2e

import (
	"encoding/json"
	"fmt"
	"math"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"xlb/scripts/testbed"
)

// longLived is the number of long-lived connections of the kill -9, join,
// SIGTERM and node-drain steps, each asking every 100 ms (3000 requests a
// second through the fleet).
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
//   - Hung: an instance stops (SIGSTOP) without closing its BGP session, as
//     a hung process or a machine gone would: the router drops its route
//     when the hold time expires; survival and the outage bound as for
//     kill -9, where the instance's kernel closes the session at once.
//     Then it is killed and joins again.
//   - SIGTERM: an instance stopped with SIGTERM breaks no long-lived
//     connection and fails no new one, and exits 0.
//   - DrainNode: `xlb drain --node` and `xlb undrain --node` break none and
//     fail none either.
//   - StatusFleet: `xlb status --fleet` from the router sees the same
//     fingerprints on every instance (exit 0), and names the service when
//     one instance's tables differ (exit 1).
//   - WithdrawUnhealthyVIP: every backend unhealthy: every instance
//     withdraws both VIPs and the router has no route; one recovers: all
//     announce again.
//   - NeighborRestart: the router's BIRD stops and starts again: every
//     instance shows its session down, dials again, and the routes return.
//   - BadNeighbors: unreachable, wrong-ASN and wrong-password neighbors
//     (given by reload) are shown down with their reason and retried, and
//     the instance keeps its good session, its route and its traffic.
//
// Every instance announces the VIPs over BGP to the router (AS 65010 to
// 65000, hold time 3 s, graceful shutdown 2 s), whose BIRD installs them
// as one ECMP route. The test is not parallel: its 300 connections want
// the machine's cores to themselves. Only the outage bound is a
// wall-clock assertion; every other wait is a bound (fleetWait).
func TestFleet(t *testing.T) {
	f := upFleet(t, "e2efl")
	all := []int{0, 1, 2}
	for j := range all {
		f.start(t, j)
	}
	for j := range all {
		f.waitStatus(t, j, "healthy backends", fleetHealthy)
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
		fleetDeath(t, f, tr, 0, syscall.SIGKILL)
	})
	if !ok {
		return
	}
	t.Run("Join", func(t *testing.T) { fleetJoin(t, f, tr, 0) })
	t.Run("Hung", func(t *testing.T) {
		fleetDeath(t, f, tr, 2, syscall.SIGSTOP)
		f.procs[2].kill9(t)
		fleetJoin(t, f, tr, 2)
	})
	t.Run("SIGTERM", func(t *testing.T) { fleetSIGTERM(t, f, tr) })
	t.Run("DrainNode", func(t *testing.T) { fleetDrainNode(t, f, tr) })
	tr.close()
	t.Logf("long-lived connections: %d opened, %d alive at the end, %d answers in all", len(conns), len(tr.alive()), answers(conns))

	t.Run("StatusFleet", func(t *testing.T) { fleetStatusCLI(t, f) })
	t.Run("WithdrawUnhealthyVIP", func(t *testing.T) { fleetWithdrawUnhealthy(t, f) })
	t.Run("NeighborRestart", func(t *testing.T) { fleetNeighborRestart(t, f) })
	t.Run("BadNeighbors", func(t *testing.T) { fleetBadNeighbors(t, f) })
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
				t.Errorf("connection %s -> %s answered by %s; predicted %s", r.local, r.remote, r.backend, want)
			}
		}
	}
	if mismatch > 0 {
		t.Errorf("%d of %d connections answered by another backend than predicted", mismatch, len(res))
	}
	// The predictions above run the engine xlb explain runs; the command
	// itself says the same, for a few of them.
	for _, r := range res[:3] {
		if r.err != nil {
			continue
		}
		out, err := exec.Command(xlbBin, "explain", "-c", f.cfgs[0], "--json", "--src", r.local.Addr().String(),
			"--dst", r.remote.Addr().String(), "--proto", "tcp", "--sport", strconv.Itoa(int(r.local.Port())),
			"--dport", strconv.Itoa(int(r.remote.Port())), "--flags", "S").Output()
		var rep struct {
			Backend string `json:"backend"`
		}
		if err != nil || json.Unmarshal(out, &rep) != nil || rep.Backend != r.backend {
			t.Errorf("xlb explain for %s -> %s: %q (%v), the connection was answered by %s", r.local, r.remote, out, err, r.backend)
		}
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
	t.Logf("%d new connections (%d IPv4, %d IPv6) over the instances: %s; over the backends: %v; all as predicted: %v",
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
		} else {
			t.Logf("service %s: the same fingerprint %s on every instance", name, fp[0])
		}
	}
}

// fleetDeath ends instance j with sig while tr's long-lived connections
// and stream run: SIGKILL (its kernel closes its BGP session, and the
// router drops its route at once), or SIGSTOP (a hung instance, or a
// machine gone without a word: its session stays open until the router's
// hold timer expires). It checks survival and measures the outage of new
// connections.
func fleetDeath(t *testing.T, f *fleet, tr *traffic, j int, sig syscall.Signal) {
	name := f.bed.Instances[j].Name
	var rest []int
	for i := range f.bed.Instances {
		if i != j {
			rest = append(rest, i)
		}
	}
	start := time.Now()
	time.Sleep(2 * time.Second) // traffic before the kill: no new connection fails
	alive := tr.alive()
	if len(alive) != len(tr.conns) {
		t.Fatalf("%d of %d long-lived connections failed before the kill: %v", len(tr.conns)-len(alive), len(tr.conns), tr.broken(tr.conns, start.Add(-time.Hour)))
	}
	kill := time.Now()
	if sig == syscall.SIGKILL {
		f.procs[j].kill9(t)
	} else {
		f.signal(t, j, sig)
	}
	removed := f.waitRoutes(t, rest...)
	t.Logf("%s to %s: the router dropped its route %v later", unix.SignalName(sig), name, removed.Sub(kill).Round(time.Millisecond))
	tr.settle(t, alive, removed)
	time.Sleep(2 * time.Second) // new connections after the route changed
	end := time.Now()
	time.Sleep(3500 * time.Millisecond) // their results

	broken := tr.broken(alive, kill)
	survived := len(alive) - len(broken)
	t.Logf("long-lived connections: %d of %d survived (%.1f%%), without a reset and on their backend", survived, len(alive), 100*float64(survived)/float64(len(alive)))
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
		t.Logf("new connections: %d of %d failed (not answered within 1 s), from %v to %v after the signal: outage %v (bound: hold time %v + 1 s)",
			len(failed), len(attempts), failed[0].at.Sub(kill).Round(time.Millisecond),
			failed[len(failed)-1].at.Sub(kill).Round(time.Millisecond), outage.Round(time.Millisecond), fleetHold)
	} else {
		t.Logf("new connections: none of %d failed around the signal", len(attempts))
	}
	if outage > fleetHold+time.Second {
		t.Errorf("new connections failed for %v, want <= hold time %v + 1 s", outage, fleetHold)
	}
	for _, a := range attempts {
		if a.at.After(removed.Add(500*time.Millisecond)) && (a.err != nil || a.latency > time.Second) {
			t.Errorf("a new connection %v after the router dropped %s failed: %v (%v)", a.at.Sub(removed).Round(time.Millisecond), name, a.err, a.latency)
		}
	}
}

// fleetJoin starts instance j again while the long-lived connections
// run, without new ones, so that what it records are the flows ECMP moved
// to it: each a CT4 miss there, decided to the backend it had.
func fleetJoin(t *testing.T, f *fleet, tr *traffic, j int) {
	name := f.bed.Instances[j].Name
	tr.stopStream()
	alive := tr.alive()
	f.start(t, j)
	f.waitStatus(t, j, "healthy backends", fleetHealthy)
	join := time.Now()
	added := f.waitRoutes(t, 0, 1, 2)
	tr.settle(t, alive, added)
	time.Sleep(time.Second)
	moved := f.newConnsTotal(t, j)[0]
	t.Logf("%s joined %v after it was healthy: %.0f of %d long-lived flows moved to it (recorded there as CT4 misses)",
		name, added.Sub(join).Round(time.Millisecond), moved, len(alive))
	if moved < float64(len(alive))/10 {
		t.Errorf("only %.0f of %d flows moved to %s when it joined: the join was not exercised", moved, len(alive), name)
	}
	if broken := tr.broken(alive, join); len(broken) > 0 {
		t.Errorf("%d of %d long-lived connections broke when %s joined: %s", len(broken), len(alive), name, strings.Join(broken, "; "))
	} else {
		t.Logf("none of the %d long-lived connections broke or changed backend", len(alive))
	}
	tr.startStream()
}

// fleetSIGTERM stops l2 with SIGTERM, then starts it again.
func fleetSIGTERM(t *testing.T, f *fleet, tr *traffic) {
	alive := tr.alive()
	time.Sleep(time.Second)
	term := time.Now()
	f.signal(t, 1, syscall.SIGTERM)
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
	if out, err := f.xlbIn(2, "drain", "--node", "--socket", adminSocket(f.bed.Instances[2].NS)); err != nil {
		t.Fatalf("xlb drain --node: %v\n%s", err, out)
	}
	removed := f.waitRoutes(t, 0, 1)
	f.waitStatus(t, 2, "node drained", func(s fleetStatus) bool {
		return s.BGP != nil && s.BGP.NodeDrained && vipsAnnounced(s, false, "node drained")
	})
	t.Logf("drain --node: route withdrawn after %v", removed.Sub(drain).Round(time.Millisecond))
	tr.settle(t, alive, removed)
	time.Sleep(time.Second)
	end := time.Now()
	time.Sleep(3500 * time.Millisecond)
	checkNoBreak(t, tr, "drain --node of l3", alive, drain, end)

	alive = tr.alive()
	undrain := time.Now()
	if out, err := f.xlbIn(2, "undrain", "--node", "--socket", adminSocket(f.bed.Instances[2].NS)); err != nil {
		t.Fatalf("xlb undrain --node: %v\n%s", err, out)
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

// fleetStatusCLI runs `xlb status --fleet` from the router's namespace
// over every instance's admin listener: they agree (exit 0); then an
// operator drain of b1 on l1 alone makes l1's tables differ, and the
// command names the services where they disagree and exits 1.
func fleetStatusCLI(t *testing.T, f *fleet) {
	var addrs []string
	for _, in := range f.bed.Instances {
		addrs = append(addrs, netip.AddrPortFrom(in.Addr4, fleetAdminPort).String())
	}
	list := strings.Join(addrs, ",")
	out, err := testbed.Exec(f.bed.Router.NS, xlbBin, "status", "--fleet", list)
	if err != nil {
		t.Fatalf("xlb status --fleet on agreeing instances: %v\n%s", err, out)
	}
	t.Logf("xlb status --fleet %s:\n%s", list, out)
	if o, err := f.xlbIn(0, "drain", "--socket", adminSocket(f.bed.Instances[0].NS), "b1"); err != nil {
		t.Fatalf("xlb drain b1 on l1: %v\n%s", err, o)
	}
	out, err = testbed.Exec(f.bed.Router.NS, xlbBin, "status", "--fleet", list)
	if err == nil || !strings.Contains(out, "web") {
		t.Errorf("xlb status --fleet with b1 drained on l1 only: %v, want exit 1 naming web:\n%s", err, out)
	} else {
		t.Logf("with b1 drained on l1 only: %v\n%s", err, out)
	}
	if o, err := f.xlbIn(0, "undrain", "--socket", adminSocket(f.bed.Instances[0].NS), "b1"); err != nil {
		t.Fatalf("xlb undrain b1 on l1: %v\n%s", err, o)
	}
	deadline := time.Now().Add(fleetWait)
	for {
		out, err = testbed.Exec(f.bed.Router.NS, xlbBin, "status", "--fleet", list)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("xlb status --fleet after undrain: %v\n%s", err, out)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// vipsAnnounced reports whether s announces both VIPs (want true) or
// neither, with reason (want false).
func vipsAnnounced(s fleetStatus, want bool, reason string) bool {
	if s.BGP == nil || len(s.BGP.VIPs) != 2 {
		return false
	}
	for _, v := range s.BGP.VIPs {
		if v.Announced != want || (!want && v.Reason != reason) {
			return false
		}
	}
	return true
}

// fleetWithdrawUnhealthy makes every backend fail its health check: every
// instance withdraws both VIPs ("no eligible backend") and the router has
// no route left; one backend recovers: every instance announces again and
// new connections reach that backend through all of them.
func fleetWithdrawUnhealthy(t *testing.T, f *fleet) {
	all := []int{0, 1, 2}
	for _, be := range f.bed.Backends {
		if err := f.bed.SetHealthy(be.Name, false); err != nil {
			t.Fatal(err)
		}
	}
	f.waitRoutes(t)
	for j := range all {
		f.waitStatus(t, j, "both VIPs withdrawn", func(s fleetStatus) bool { return vipsAnnounced(s, false, "no eligible backend") })
	}
	t.Log("every backend unhealthy: every instance withdrew both VIPs (no eligible backend), the router has no route")
	if err := f.bed.SetHealthy("b2", true); err != nil {
		t.Fatal(err)
	}
	f.waitRoutes(t, all...)
	for j := range all {
		f.waitStatus(t, j, "both VIPs announced", func(s fleetStatus) bool { return vipsAnnounced(s, true, "") })
	}
	before := f.newConnsTotal(t, all...)
	for i := range 60 {
		vip := testbed.VIP4
		if i%2 == 1 {
			vip = testbed.VIP6
		}
		r, err := testbed.HTTPGet(f.bed.Clients[0].NS, netip.AddrPortFrom(vip, testbed.HTTPPort), "/", 3*time.Second)
		if err != nil || r.Backend != "b2" {
			t.Errorf("new connection %d to %s with only b2 healthy: %q, %v", i, vip, r.Backend, err)
		}
	}
	after := f.newConnsTotal(t, all...)
	for j := range all {
		if after[j] == before[j] {
			t.Errorf("no new connection crossed %s after b2 recovered", f.bed.Instances[j].Name)
		}
	}
	t.Log("b2 recovered: every instance announced both VIPs again, 60 new connections reached b2 through all three")
	for _, be := range f.bed.Backends {
		if err := f.bed.SetHealthy(be.Name, true); err != nil {
			t.Fatal(err)
		}
	}
	for j := range all {
		f.waitStatus(t, j, "healthy backends", fleetHealthy)
	}
}

// birdPID is the pid of the bed's BIRD.
func birdPID(t *testing.T, f *fleet) int {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(f.bed.RunDir, "bird.pid"))
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(raw)))
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

// fleetNeighborRestart stops the router's BIRD (its sessions go, its
// routes leave the kernel), checks that every instance shows the session
// down, and starts BIRD again: every instance dials it again (connect
// retry) and the routes come back via all three.
func fleetNeighborRestart(t *testing.T, f *fleet) {
	all := []int{0, 1, 2}
	pid := birdPID(t, f)
	if out, err := f.bed.BirdC("down"); err != nil {
		t.Fatalf("birdc down: %v\n%s", err, out)
	}
	for processAlive(pid) {
		time.Sleep(20 * time.Millisecond)
	}
	f.waitRoutes(t)
	for j := range all {
		s := f.waitStatus(t, j, "the router's session down", func(s fleetStatus) bool {
			return s.BGP != nil && len(s.BGP.Neighbors) == 1 && !s.BGP.Neighbors[0].Up
		})
		t.Logf("%s with the router gone: session %s (%s), %d transitions", f.bed.Instances[j].Name,
			s.BGP.Neighbors[0].State, s.BGP.Neighbors[0].Reason, s.BGP.Neighbors[0].Transitions)
	}
	restart := time.Now()
	ctl, conf := filepath.Join(f.bed.RunDir, "bird.ctl"), filepath.Join(f.bed.RunDir, "bird.conf")
	if out, err := testbed.Exec(f.bed.Router.NS, "bird", "-c", conf, "-s", ctl, "-P", filepath.Join(f.bed.RunDir, "bird.pid")); err != nil {
		t.Fatalf("starting bird again: %v\n%s", err, out)
	}
	back := f.waitRoutes(t, all...)
	t.Logf("router back: routes via all three instances again %v after BIRD restarted", back.Sub(restart).Round(time.Millisecond))
	for i := range 30 {
		if _, err := testbed.HTTPGet(f.bed.Clients[0].NS, netip.AddrPortFrom(testbed.VIP4, testbed.HTTPPort), "/", 3*time.Second); err != nil {
			t.Errorf("new connection %d after the router came back: %v", i, err)
		}
	}
}

// processAlive: pid exists and is not a zombie.
func processAlive(pid int) bool {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	i := strings.LastIndexByte(string(raw), ')')
	return i < 0 || i+2 >= len(raw) || raw[i+2] != 'Z'
}

// fleetBadNeighbors gives l3, by reload, neighbors that never come up
// next to the router's good session: one at an address nobody holds
// (unreachable), one whose AS number is not the one configured (the
// router's IPv6 address, where BIRD has a session for l3 with MD5 key
// "secret": the TCP connection opens, the OPEN is refused), then the same
// with a wrong password (the router's kernel drops every segment). Each is
// shown in /status as down with a reason and retried, and l3 keeps its
// good session, its route and its share of new connections throughout.
func fleetBadNeighbors(t *testing.T, f *fleet) {
	const j = 2
	all := []int{0, 1, 2}
	in := f.bed.Instances[j]
	// BIRD: a session for l3's IPv6 address, with an MD5 key.
	conf := filepath.Join(f.bed.RunDir, "bird.conf")
	fh, err := os.OpenFile(conf, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, err = fmt.Fprintf(fh, "protocol bgp l3v6 from xlb_instance { neighbor %s as %d; password \"secret\"; }\n", in.Addr6, testbed.InstanceASN)
	fh.Close()
	if err != nil {
		t.Fatal(err)
	}
	if out, err := f.bed.BirdC("configure"); err != nil || !strings.Contains(out, "Reconfigured") {
		t.Fatalf("birdc configure: %v\n%s", err, out)
	}
	good := fmt.Sprintf("  [[bgp.neighbor]]\n  address = %q\n  asn = %d\n", testbed.RouterSegment4, testbed.RouterASN)
	unreachable := "  [[bgp.neighbor]]\n  address = \"10.97.0.99\"\n  asn = 65000\n"
	v6 := func(asn int, password string) string {
		return fmt.Sprintf("  [[bgp.neighbor]]\n  address = %q\n  asn = %d\n  password = %q\n", testbed.RouterSegment6, asn, password)
	}
	for _, step := range []struct {
		what, neighbors string
		arp             bool // the unreachable neighbor is configured
	}{
		{"unreachable neighbor 10.97.0.99 and wrong ASN 65001 for the router's " + testbed.RouterSegment6.String(),
			good + unreachable + v6(65001, "secret"), true},
		{"wrong password for the router's " + testbed.RouterSegment6.String(),
			good + v6(testbed.RouterASN, "wrong"), false},
	} {
		// The attempts, as the router's interface sees them: SYNs from l3
		// to its IPv6 address (one source port per attempt), and ARP
		// requests from l3 for 10.97.0.99 (at most 3 per attempt).
		cap := captureAttempts(t, f, in)
		f.writeConfig(t, j, step.neighbors)
		f.signal(t, j, syscall.SIGHUP)
		want := 2
		if step.arp {
			want = 3
		}
		f.waitStatus(t, j, "the bad neighbors down with a reason, the good one up", func(s fleetStatus) bool {
			if s.BGP == nil || len(s.BGP.Neighbors) != want {
				return false
			}
			for _, n := range s.BGP.Neighbors {
				good := n.Address == testbed.RouterSegment4.String()
				if n.Up != good || (!good && n.Reason == "") {
					return false
				}
				// A wrong MD5 password is a silent drop at the router: the
				// reason says it may be one, once the connect timed out.
				if !step.arp && !good && !strings.Contains(n.Reason, "MD5") {
					return false
				}
			}
			return true
		})
		// Retried: two attempts or more of each bad neighbor.
		deadline := time.Now().Add(fleetWait)
		for {
			syns, arps := cap.counts()
			if syns >= 2 && (!step.arp || arps > 3) {
				t.Logf("%s: retried: %d connection attempts to %s, %d ARP requests for 10.97.0.99 seen by the router", step.what, syns, testbed.RouterSegment6, arps)
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: within %v the router saw %d connection attempts to %s and %d ARP requests for 10.97.0.99", step.what, fleetWait, syns, testbed.RouterSegment6, arps)
			}
			time.Sleep(100 * time.Millisecond)
		}
		cap.stop()
		s := f.status(t, j)
		for _, n := range s.BGP.Neighbors {
			t.Logf("%s: neighbor %s AS %d: state %s, up %v, reason %q", step.what, n.Address, n.ASN, n.State, n.Up, n.Reason)
			if good := n.Address == testbed.RouterSegment4.String(); n.Up != good {
				t.Errorf("%s: neighbor %s up %v", step.what, n.Address, n.Up)
			}
		}
		// Forwarding goes on: l3 stays in the route and takes its share.
		f.waitRoutes(t, all...)
		before := f.newConnsTotal(t, j)[0]
		for i := range 60 {
			if _, err := testbed.HTTPGet(f.bed.Clients[0].NS, netip.AddrPortFrom(testbed.VIP4, testbed.HTTPPort), "/", 3*time.Second); err != nil {
				t.Errorf("%s: new connection %d: %v", step.what, i, err)
			}
		}
		after := f.newConnsTotal(t, j)[0]
		if after == before {
			t.Errorf("%s: no new connection crossed l3", step.what)
		}
		t.Logf("%s: l3 kept its session with the router and its route: %.0f of 60 new connections crossed it", step.what, after-before)
	}
	proto, _ := f.bed.BirdC("show", "protocols", "all", "l3v6")
	t.Logf("the router's view of l3v6 at the end:\n%s", proto)
}

// attemptCapture counts, on the router's segment interface, the TCP
// connection attempts (SYN without ACK; one source port each) from an
// instance's IPv6 address to the router's port 179, and the ARP requests
// from the instance for 10.97.0.99.
type attemptCapture struct {
	mu    sync.Mutex
	ports map[uint16]bool
	arps  int
	done  chan struct{}
	wg    sync.WaitGroup
}

func captureAttempts(t *testing.T, f *fleet, in testbed.Host) *attemptCapture {
	t.Helper()
	ps := openPacketSocket(t, f.bed.Router)
	c := &attemptCapture{ports: map[uint16]bool{}, done: make(chan struct{})}
	src6, dst6 := in.Addr6.As16(), testbed.RouterSegment6.As16()
	unreach := netip.MustParseAddr("10.97.0.99").As4()
	c.wg.Go(func() {
		for {
			select {
			case <-c.done:
				return
			default:
			}
			_, _ = ps.capture(100*time.Millisecond, func(fr []byte) bool {
				if len(fr) < 14 {
					return false
				}
				c.mu.Lock()
				defer c.mu.Unlock()
				switch uint16(fr[12])<<8 | uint16(fr[13]) {
				case 0x0806: // ARP request for 10.97.0.99 from the instance
					if len(fr) >= 42 && fr[21] == 1 && string(fr[22:28]) == string(in.MAC) && string(fr[38:42]) == string(unreach[:]) {
						c.arps++
					}
				case 0x86dd: // TCP SYN to [router]:179
					if len(fr) >= 14+40+20 && fr[20] == 6 && string(fr[22:38]) == string(src6[:]) && string(fr[38:54]) == string(dst6[:]) {
						tcp := fr[54:]
						if uint16(tcp[2])<<8|uint16(tcp[3]) == 179 && tcp[13]&0x12 == 0x02 {
							c.ports[uint16(tcp[0])<<8|uint16(tcp[1])] = true
						}
					}
				}
				return false
			})
		}
	})
	t.Cleanup(c.stop)
	return c
}

func (c *attemptCapture) counts() (syns, arps int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.ports), c.arps
}

func (c *attemptCapture) stop() {
	select {
	case <-c.done:
	default:
		close(c.done)
	}
	c.wg.Wait()
}

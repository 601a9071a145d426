package e2e

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"xlb/dataplane"
	"xlb/internal/nsx"
	"xlb/scripts/testbed"
)

// fsRate is TestFleetSync's max_records_per_sec: low enough that a flood
// could exceed it many times over.
const fsRate = 2000

// fsPort is the [flow_sync] port of TestFleetSync's instances, UDP and TCP.
const fsPort = 7300

// fsDrain is the web services' connection_draining_timeout_sec in
// TestFleetSync: longer than the whole test, so that the connections of a
// backend removed by a reload are still draining when it ends.
const fsDrain = 600

// TestFleetSync: with [flow_sync], events that combine break no
// connection. Three instances behind the fleet bed's router
// (ECMP), each with its own state_dir, sharing one key; the web services
// start over b1-b3 of the bed's b1-b4. 300 long-lived connections ask
// every 100 ms through every step, one bed, and each step asserts 0
// connections reset (or failed) and 0 answered by another backend among
// those alive before it:
//
//   - AddThenKill: b4 added on every instance by a reload (the same
//     fingerprints everywhere), then kill -9 of l1: the flows the router
//     moves to l2 and l3, many of which Maglev now sends elsewhere, find
//     l1's records there (without sync: 26-34 of 240 reset).
//   - PullOnJoin: l1 starts again with its state_dir emptied: its log
//     shows the table pulled from a peer before it announces the VIPs,
//     and the flows ECMP moves back to it find their entries.
//   - RemoveDrainThenRouterRestart: b2 removed on every instance by a
//     reload (draining, its connections stay on it) and the weights
//     changed (WEIGHTED_MAGLEV, b1 reports 4), then the router's BIRD
//     restarts: its ECMP set is rebuilt one session at a time, every flow
//     crosses other instances meanwhile (without sync: 26 of 240 reset).
//   - RemoveThenJoin: after that, l3 stops (SIGTERM) and starts again with
//     an empty state_dir: it pulls the table and the flows that come back
//     to it keep their backends, the draining b2 included.
//   - SYNFlood: 100,000 SYNs from random sources at l2: they make only
//     half-open entries, which are never sent, so l2's sync traffic
//     stays within max_records_per_sec (and far below the flood), and
//     the connections stay.
//   - BadPeer: datagrams spoofed from l2's flow-sync address to l1's, of
//     garbage, cut short, of an unknown version, sealed with a key l1
//     does not have, a repeat and a stale one of the fleet's key, and
//     one from the router (no peer): refused and counted by reason
//     (malformed, version, key, repeat, stale, peer), nothing stored,
//     the connections untouched.
//
// Not parallel, as TestFleet: the connections want the cores. Every wait
// is a bound (fleetWait); no assertion is on the wall clock.
func TestFleetSync(t *testing.T) {
	s := upFleetSync(t)
	f := s.f
	all := []int{0, 1, 2}
	for j := range all {
		f.start(t, j)
	}
	for j := range all {
		f.waitStatus(t, j, "healthy backends", fleetHealthy)
	}
	f.waitRoutes(t, all...)
	s.waitPeersUp(t, all...)

	tr := newTraffic(t, f)
	// Answers may wait out the router's restart (its sessions come back
	// after the instances' connect retry, 5-10 s): a slow answer is not a
	// broken connection.
	tr.timeout = 30 * time.Second
	stored := s.storedTotal(t, all...)
	before := f.newConnsTotal(t, all...)
	conns := tr.open(t, longLived)
	after := f.newConnsTotal(t, all...)
	var per []string
	for j := range all {
		per = append(per, fmt.Sprintf("%s %.0f", f.bed.Instances[j].Name, after[j]-before[j]))
	}
	t.Logf("%d long-lived connections opened, per instance: %s", len(conns), strings.Join(per, ", "))
	// Every flow recorded by the two instances it did not cross.
	s.waitStored(t, stored, 2*len(conns), all...)

	t.Run("AddThenKill", func(t *testing.T) { s.addThenKill(t, tr) })
	t.Run("PullOnJoin", func(t *testing.T) { s.join(t, tr, 0) })
	t.Run("RemoveDrainThenRouterRestart", func(t *testing.T) { s.removeDrainThenRouterRestart(t, tr) })
	t.Run("RemoveThenJoin", func(t *testing.T) {
		alive := tr.alive()
		term := time.Now()
		f.signal(t, 2, syscall.SIGTERM)
		f.waitRoutes(t, 0, 1)
		if err := f.waitExit(t, 2); err != nil {
			t.Errorf("xlb in l3 ended with %v after SIGTERM, want exit 0", err)
		}
		tr.settle(t, alive, time.Now())
		s.checkConns(t, tr, "l3 stopped (SIGTERM) after b2's removal", alive, term)
		s.join(t, tr, 2)
	})
	t.Run("SYNFlood", func(t *testing.T) { s.synFlood(t, tr, 1) })
	t.Run("BadPeer", func(t *testing.T) { s.badPeer(t, tr) })
	tr.close()
	t.Logf("long-lived connections: %d opened, %d alive at the end, %d answers in all", len(conns), len(tr.alive()), answers(conns))
}

// fleetSync is TestFleetSync's fleet: per instance a state_dir, and the
// configuration as it is now.
type fleetSync struct {
	f         *fleet
	stateDirs []string
	keyFile   string
	key       [32]byte
	backends  []string // of the web services now
	weighted  bool     // WEIGHTED_MAGLEV
}

// upFleetSync brings up the fleet bed with four backends reporting weight
// 1 and writes the instances' configurations (b1-b3, MAGLEV).
func upFleetSync(t *testing.T) *fleetSync {
	t.Helper()
	s := &fleetSync{backends: []string{"b1", "b2", "b3"}}
	dir := t.TempDir()
	s.keyFile = filepath.Join(dir, "flow-sync.key")
	must(t, readRandom(s.key[:]))
	must(t, os.WriteFile(s.keyFile, fmt.Appendf(nil, "%x\n", s.key), 0o600))
	for range 3 {
		s.stateDirs = append(s.stateDirs, t.TempDir())
	}
	opts := testbed.Options{Prefix: "e2efs", Instances: 3, Backends: 4, Failover: -1, Weights: []int{1, 1, 1, 1}}
	s.f = upFleetWith(t, opts, s.config)
	return s
}

// config is instance j's configuration: fleetConfig's over s.backends,
// with its state_dir, draining, the policy, and [flow_sync] with every
// instance as a peer (itself ignored).
func (s *fleetSync) config(b *testbed.Bed, j int) string {
	var peers []string
	for _, in := range b.Instances {
		peers = append(peers, strconv.Quote(netip.AddrPortFrom(in.Addr4, fsPort).String()))
	}
	policy := "MAGLEV"
	if s.weighted {
		policy = "WEIGHTED_MAGLEV"
	}
	return fleetConfigWith(b, b.Instances[j], "", fleetOpts{
		backends: s.backends,
		svcKeys:  fmt.Sprintf("connection_draining_timeout_sec = %d\nlocality_lb_policy = %q", fsDrain, policy),
		stateDir: s.stateDirs[j],
		more: fmt.Sprintf(`
[flow_sync]
listen = %q
peers = [%s]
key_file = %q
pull_on_start = true
pull_timeout_sec = 5
max_records_per_sec = %d
`, netip.AddrPortFrom(b.Instances[j].Addr4, fsPort), strings.Join(peers, ", "), s.keyFile, fsRate),
	})
}

// reload writes every running instance's configuration as s is now,
// sends SIGHUP, and waits until each has applied it and all of them have
// the same fingerprints, other than before.
func (s *fleetSync) reload(t *testing.T, js ...int) {
	t.Helper()
	f := s.f
	old := s.fingerprints(t, js[0])
	for _, j := range js {
		n := s.metric(t, j, "xlb_reload_success_total")
		f.write(t, j, s.config(f.bed, j))
		f.signal(t, j, syscall.SIGHUP)
		s.waitMetric(t, j, "xlb_reload_success_total", func(v float64) bool { return v > n })
	}
	f.loadExp(t)
	deadline := time.Now().Add(fleetWait)
	for {
		fps := s.fingerprints(t, js[0])
		same := !maps2Equal(fps, old)
		for _, j := range js[1:] {
			same = same && maps2Equal(s.fingerprints(t, j), fps)
		}
		if same {
			t.Logf("reloaded: the same fingerprints on %s: %v", f.names(js...), fps)
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("fingerprints %v before the reload, still not the same new ones on %s within %v", old, f.names(js...), fleetWait)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func maps2Equal(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v || v == "" {
			return false
		}
	}
	return true
}

// fingerprints are instance j's services' fingerprints, by name.
func (s *fleetSync) fingerprints(t *testing.T, j int) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, svc := range s.f.status(t, j).Services {
		out[svc.Name] = svc.Fingerprint
	}
	return out
}

// addThenKill: b4 added everywhere, then kill -9 of l1.
func (s *fleetSync) addThenKill(t *testing.T, tr *traffic) {
	f := s.f
	alive := tr.alive()
	start := time.Now()
	s.backends = []string{"b1", "b2", "b3", "b4"}
	s.reload(t, 0, 1, 2)
	for j := range 3 {
		f.waitStatus(t, j, "b4 healthy", fleetHealthy)
	}
	tr.settle(t, alive, time.Now())
	s.checkConns(t, tr, "b4 added by a reload", alive, start)

	alive = tr.alive()
	via := s.vias(t, alive)
	off := s.offMaglev(t, alive)
	onL1, remapped, changed := 0, 0, 0
	for i := range alive {
		if off[i] {
			changed++
		}
		if via[i] == 0 {
			onL1++
			if off[i] {
				remapped++
			}
		}
	}
	t.Logf("before the kill: %d long-lived connections cross l1; %d of them, %d of all %d, on a backend Maglev no longer chooses for them",
		onL1, remapped, changed, len(alive))
	if changed == 0 {
		t.Errorf("no long-lived connection is off Maglev's choice after b4 was added: the step proves nothing")
	}
	kill := time.Now()
	f.procs[0].kill9(t)
	removed := f.waitRoutes(t, 1, 2)
	t.Logf("kill -9 of l1: the router dropped its route %v later", removed.Sub(kill).Round(time.Millisecond))
	tr.settle(t, alive, removed)
	s.checkConns(t, tr, "b4 added, then kill -9 of l1", alive, kill)
}

// join starts instance j with its state_dir emptied: it must pull the
// table from a peer before it announces the VIPs; then the flows ECMP
// moves to it keep their backends.
func (s *fleetSync) join(t *testing.T, tr *traffic, j int) {
	f := s.f
	name := f.bed.Instances[j].Name
	select {
	case <-f.procs[j].exited:
	default:
		t.Fatalf("%s still runs: the previous step did not end it", name)
	}
	ents, err := os.ReadDir(s.stateDirs[j])
	must(t, err)
	for _, e := range ents {
		must(t, os.RemoveAll(filepath.Join(s.stateDirs[j], e.Name())))
	}
	alive := tr.alive()
	var rest []int
	for i := range f.bed.Instances {
		if i != j {
			rest = append(rest, i)
		}
	}
	start := time.Now()
	p := f.start(t, j)
	// The pull's line, then (not before) the route via j.
	deadline := time.Now().Add(fleetWait)
	for !strings.Contains(p.log.String(), `"msg":"flow table pulled"`) {
		if strings.Contains(p.log.String(), `"msg":"flow table not pulled: announcing anyway"`) {
			t.Fatalf("%s did not pull the flow table:\n%s", name, grepLines(p.log.String(), "flow table"))
		}
		if got, _ := f.routeVia(t, false); slices.Contains(got, j) {
			t.Fatalf("the router routes the VIP via %s before its log says the table was pulled", name)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: no line \"flow table pulled\" in its log within %v", name, fleetWait)
		}
		time.Sleep(20 * time.Millisecond)
	}
	logText := p.log.String()
	pulled := strings.Index(logText, `"msg":"flow table pulled"`)
	if ann := strings.Index(logText, `"msg":"bgp route announced"`); ann >= 0 && ann < pulled {
		t.Errorf("%s announced a VIP before it pulled the flow table:\n%s", name, grepLines(logText, "flow table", "bgp route announced"))
	}
	t.Logf("%s: %s", name, strings.TrimSpace(grepLines(logText, `"msg":"flow table pulled"`)))
	st := s.syncStatus(t, j)
	if st.FlowSync == nil || st.FlowSync.Pull == nil || !st.FlowSync.Pull.Done || st.FlowSync.Pull.Error != "" {
		t.Errorf("%s /status flow_sync: %+v, want a pull done without error", name, st.FlowSync)
	} else if pl, stored := st.FlowSync.Pull, s.metric(t, j, "xlb_flowsync_records_stored_total"); pl.Records < len(alive) || stored < float64(len(alive)) {
		// Stored by the pull or, where a peer's datagram came first, by
		// the datagram (the pull then only refreshes it): either way
		// before the VIPs are announced.
		t.Errorf("%s pulled %d records from %s (%d stored by the pull), %.0f stored in all; want every one of the %d long-lived flows (refused for an unknown backend: %.0f)",
			name, pl.Records, pl.Peer, pl.Stored, stored, len(alive), s.metric(t, j, `xlb_flowsync_refused_total{reason="unknown_backend"}`))
	}
	f.waitStatus(t, j, "healthy backends", fleetHealthy)
	added := f.waitRoutes(t, append(rest, j)...)
	tr.settle(t, alive, added)
	// The flows ECMP moved to j: each a hit of a pulled entry there, which
	// makes it j's own and sends it to the peers (the design's rule (b)).
	s.waitMetric(t, j, `xlb_flowsync_records_sent_total{source="ring"}`, func(v float64) bool { return v > 0 })
	via := s.vias(t, alive)
	moved := 0
	for _, v := range via {
		if v == j {
			moved++
		}
	}
	t.Logf("%s joined: %d of %d long-lived flows cross it now (the router's route for each)", name, moved, len(alive))
	s.checkConns(t, tr, name+" joining with an emptied state_dir", alive, start)
	s.waitPeersUp(t, 0, 1, 2)
}

// removeDrainThenRouterRestart: b2 removed with draining and the weights
// changed, then the router's BIRD stops and starts again.
func (s *fleetSync) removeDrainThenRouterRestart(t *testing.T, tr *traffic) {
	f := s.f
	all := []int{0, 1, 2}
	alive := tr.alive()
	start := time.Now()
	must(t, f.bed.SetWeight("b1", "4"))
	s.backends, s.weighted = []string{"b1", "b3", "b4"}, true
	s.reload(t, all...)
	for j := range all {
		f.waitStatus(t, j, "b1 at weight 4, b2 removed", func(st fleetStatus) bool {
			ok := false
			for _, svc := range st.Services {
				for _, be := range svc.Backends {
					if strings.TrimSuffix(be.Name, "-v6") == "b1" && be.Weight == 4 {
						ok = true
					}
				}
			}
			return ok && fleetHealthy(st)
		})
	}
	onB2 := 0
	for _, c := range alive {
		if c.backend == "b2" {
			onB2++
		}
	}
	tr.settle(t, alive, time.Now())
	s.checkConns(t, tr, "b2 removed (draining) and b1 weighted 4 by a reload", alive, start)
	t.Logf("%d long-lived connections on b2, draining", onB2)
	if onB2 == 0 {
		t.Errorf("no long-lived connection on b2: its removal proves nothing")
	}

	alive = tr.alive()
	down := time.Now()
	pid := birdPID(t, f)
	if out, err := f.bed.BirdC("down"); err != nil {
		t.Fatalf("birdc down: %v\n%s", err, out)
	}
	for deadline := time.Now().Add(fleetWait); processAlive(pid); {
		if time.Now().After(deadline) {
			t.Fatalf("BIRD (pid %d) still runs %v after birdc down", pid, fleetWait)
		}
		time.Sleep(20 * time.Millisecond)
	}
	ctl, conf := filepath.Join(f.bed.RunDir, "bird.ctl"), filepath.Join(f.bed.RunDir, "bird.conf")
	if out, err := testbed.Exec(f.bed.Router.NS, "bird", "-c", conf, "-s", ctl, "-P", filepath.Join(f.bed.RunDir, "bird.pid")); err != nil {
		t.Fatalf("starting bird again: %v\n%s", err, out)
	}
	// The sessions come back one by one (each instance's connect retry):
	// meanwhile the route goes via one instance, then two, and every flow
	// crosses instances that did not see it begin.
	back := f.waitRoutes(t, all...)
	t.Logf("router restarted: routes via all three instances again %v after birdc down", back.Sub(down).Round(time.Millisecond))
	tr.settle(t, alive, back)
	s.checkConns(t, tr, "b2 removed and weights changed, then the router restarted", alive, down)
}

// badPeer sends l1 datagrams from l2's flow-sync address (and one from
// the router's) that must be refused.
func (s *fleetSync) badPeer(t *testing.T, tr *traffic) {
	f := s.f
	alive := tr.alive()
	start := time.Now()
	src := netip.AddrPortFrom(f.bed.Instances[1].Addr4, fsPort)
	dst := netip.AddrPortFrom(f.bed.Instances[0].Addr4, fsPort)
	refused := func() map[string]float64 {
		out := map[string]float64{}
		for k, v := range s.metrics(t, 0) {
			if r, ok := strings.CutPrefix(k, `xlb_flowsync_refused_total{reason="`); ok {
				out[strings.TrimSuffix(r, `"}`)] = v
			}
		}
		return out
	}
	before := refused()
	storedBefore := s.metric(t, 0, "xlb_flowsync_records_stored_total")

	garbage := make([]byte, 200)
	must(t, readRandom(garbage))
	var wrongKey [32]byte
	must(t, readRandom(wrongKey[:]))
	// A record steering a flow of the client to b3, sealed as a peer would
	// but with another key.
	rec := fsRecord(f.bed.Clients[0].Addr4, testbed.VIP4, 40000, testbed.HTTPPort,
		dataplane.FleetID("web", f.bed.Backend("b3").Addr4))
	now := time.Now()
	sender := func() uint64 {
		var b [8]byte
		must(t, readRandom(b[:]))
		return binary.BigEndian.Uint64(b[:])
	}
	sealed := fsSeal(&wrongKey, sender(), 1, now, rec)
	unknownVersion := fsSeal(&s.key, sender(), 1, now, rec)
	unknownVersion[4] = 9
	// With the fleet's key, no records (a heartbeat): the first is taken,
	// the same again is a repeat; one a minute old is stale; one from the
	// router, which is no peer, is refused for that.
	heartbeat := fsSeal(&s.key, sender(), 1, now, nil)
	old := fsSeal(&s.key, sender(), 1, now.Add(-time.Minute), nil)
	router := netip.AddrPortFrom(f.bed.Router.Addr4, fsPort)
	sends := []struct {
		what, reason string
		from         netip.AddrPort
		ns           string
		msg          []byte
	}{
		{"200 random bytes", "malformed", src, f.bed.Instances[1].NS, garbage},
		{"a header cut short", "malformed", src, f.bed.Instances[1].NS, sealed[:30]},
		{"version 9", "version", src, f.bed.Instances[1].NS, unknownVersion},
		{"records sealed with another key", "key", src, f.bed.Instances[1].NS, sealed},
		{"a heartbeat with the key", "", src, f.bed.Instances[1].NS, heartbeat},
		{"the same heartbeat again", "repeat", src, f.bed.Instances[1].NS, heartbeat},
		{"a heartbeat a minute old", "stale", src, f.bed.Instances[1].NS, old},
		{"a heartbeat from the router", "peer", router, f.bed.Router.NS, fsSeal(&s.key, sender(), 1, now, nil)},
	}
	want := map[string]float64{}
	for _, x := range sends {
		must(t, spoofUDP(x.ns, x.from, dst, x.msg))
		if x.reason != "" {
			want[x.reason]++
		}
	}
	deadline := time.Now().Add(fleetWait)
	for {
		got := refused()
		ok := true
		for r, n := range want {
			ok = ok && got[r]-before[r] >= n
		}
		if ok {
			var report []string
			for r := range want {
				report = append(report, fmt.Sprintf("%s +%.0f", r, got[r]-before[r]))
			}
			slices.Sort(report)
			t.Logf("l1 refused the bad datagrams: %s", strings.Join(report, ", "))
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("l1's xlb_flowsync_refused_total %v before, %v after %d bad datagrams; want at least %v more", before, got, len(sends), want)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if st := s.metric(t, 0, "xlb_flowsync_records_stored_total"); st != storedBefore {
		t.Errorf("l1 stored %.0f records while it was sent only bad datagrams", st-storedBefore)
	}
	tr.settle(t, alive, time.Now())
	s.checkConns(t, tr, "bad datagrams at l1", alive, start)
	s.waitPeersUp(t, 0, 1, 2)
}

// checkConns fails t for every connection of alive that failed or was
// answered by another backend since from, and logs the counts.
func (s *fleetSync) checkConns(t *testing.T, tr *traffic, what string, alive []*longConn, from time.Time) {
	t.Helper()
	broken := tr.broken(alive, from)
	reset, moved := 0, 0
	for _, c := range alive {
		c.mu.Lock()
		switch {
		case !c.failAt.IsZero() && !c.failAt.Before(from):
			reset++
		case !c.movedAt.IsZero() && !c.movedAt.Before(from):
			moved++
		}
		c.mu.Unlock()
	}
	t.Logf("%s: of %d long-lived connections, %d reset or failed, %d answered by another backend", what, len(alive), reset, moved)
	if len(broken) > 0 {
		if len(broken) > 20 {
			broken = append(broken[:20], fmt.Sprintf("(%d more)", len(broken)-20))
		}
		t.Errorf("%s: %d of %d long-lived connections broke: %s", what, reset+moved, len(alive), strings.Join(broken, "; "))
	}
}

// offMaglev says, per connection of conns, whether its backend is not the
// one Maglev now chooses for a new connection of its 5-tuple: predict's,
// on the configuration the last reload gave l1.
func (s *fleetSync) offMaglev(t *testing.T, conns []*longConn) []bool {
	t.Helper()
	out := make([]bool, len(conns))
	for i, c := range conns {
		out[i] = s.f.predict(t, c.local, c.remote) != c.backend
	}
	return out
}

// vias is, per connection of conns, the instance the router's route sends
// it to now (ip route get with its 5-tuple: the ECMP hash), -1 when
// unknown.
func (s *fleetSync) vias(t *testing.T, conns []*longConn) []int {
	t.Helper()
	f := s.f
	iif := f.bed.Opts.Prefix + "-rceth"
	out := make([]int, len(conns))
	re := regexp.MustCompile(`via (?:inet6? )?([0-9a-f.:]+)`)
	for i, c := range conns {
		fam := "-4"
		if c.remote.Addr().Is6() {
			fam = "-6"
		}
		o, err := testbed.Exec(f.bed.Router.NS, "ip", fam, "route", "get", c.remote.Addr().String(),
			"from", c.local.Addr().String(), "iif", iif, "ipproto", "tcp",
			"sport", strconv.Itoa(int(c.local.Port())), "dport", strconv.Itoa(int(c.remote.Port())))
		out[i] = -1
		m := re.FindStringSubmatch(o)
		if err != nil || m == nil {
			continue
		}
		for j, in := range f.bed.Instances {
			if m[1] == in.Addr4.String() || m[1] == in.Addr6.String() {
				out[i] = j
			}
		}
	}
	return out
}

// --- flow_sync's /status and /metrics ---------------------------------------

type fsStatus struct {
	FlowSync *struct {
		Listen string `json:"listen"`
		Peers  []struct {
			Address     string `json:"address"`
			Up          bool   `json:"up"`
			LastHeardMs int64  `json:"last_heard_ms"`
			RecordsIn   uint64 `json:"records_in"`
			RecordsOut  uint64 `json:"records_out"`
		} `json:"peers"`
		Pull *struct {
			Done    bool   `json:"done"`
			Peer    string `json:"peer"`
			Records int    `json:"records"`
			Stored  int    `json:"stored"`
			TookMs  int64  `json:"took_ms"`
			Error   string `json:"error"`
		} `json:"pull"`
	} `json:"flow_sync"`
}

func (s *fleetSync) syncStatus(t *testing.T, j int) fsStatus {
	t.Helper()
	var st fsStatus
	body := s.f.adminGet(t, j, "/status")
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		t.Fatalf("%s /status: %v\n%s", s.f.bed.Instances[j].Name, err, body)
	}
	return st
}

// waitPeersUp waits until every instance of js hears from every other one.
func (s *fleetSync) waitPeersUp(t *testing.T, js ...int) {
	t.Helper()
	deadline := time.Now().Add(fleetWait)
	for {
		ok := true
		var last fsStatus
		for _, j := range js {
			last = s.syncStatus(t, j)
			up := 0
			if last.FlowSync != nil {
				for _, p := range last.FlowSync.Peers {
					if p.Up {
						up++
					}
				}
			}
			ok = ok && up == len(s.f.bed.Instances)-1
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			raw, _ := json.Marshal(last.FlowSync)
			t.Fatalf("flow sync: not every peer up on %s within %v; last: %s", s.f.names(js...), fleetWait, raw)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// metrics is instance j's /metrics, series (with labels) -> value.
func (s *fleetSync) metrics(t *testing.T, j int) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for _, line := range strings.Split(s.f.adminGet(t, j, "/metrics"), "\n") {
		i := strings.LastIndexByte(line, ' ')
		if line == "" || line[0] == '#' || i < 0 {
			continue
		}
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			out[line[:i]] = v
		}
	}
	return out
}

// metric is instance j's series, or with a bare name the sum over its
// labels.
func (s *fleetSync) metric(t *testing.T, j int, series string) float64 {
	t.Helper()
	m := s.metrics(t, j)
	if strings.Contains(series, "{") {
		return m[series]
	}
	sum := 0.0
	for k, v := range m {
		if k == series || strings.HasPrefix(k, series+"{") {
			sum += v
		}
	}
	return sum
}

func (s *fleetSync) waitMetric(t *testing.T, j int, series string, ok func(float64) bool) {
	t.Helper()
	deadline := time.Now().Add(fleetWait)
	for {
		v := s.metric(t, j, series)
		if ok(v) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %s is %v after %v", s.f.bed.Instances[j].Name, series, v, fleetWait)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// storedTotal sums xlb_flowsync_records_stored_total over js.
func (s *fleetSync) storedTotal(t *testing.T, js ...int) float64 {
	t.Helper()
	sum := 0.0
	for _, j := range js {
		sum += s.metric(t, j, "xlb_flowsync_records_stored_total")
	}
	return sum
}

// waitStored waits until js have stored n records more than from.
func (s *fleetSync) waitStored(t *testing.T, from float64, n int, js ...int) {
	t.Helper()
	deadline := time.Now().Add(fleetWait)
	for {
		got := s.storedTotal(t, js...) - from
		if got >= float64(n) {
			t.Logf("flow sync: %.0f records stored by the peers (want %d)", got, n)
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("flow sync: %.0f records stored by the instances within %v, want %d", got, fleetWait, n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// grepLines is the lines of text that contain any of subs.
func grepLines(text string, subs ...string) string {
	var out strings.Builder
	for line := range strings.Lines(text) {
		for _, s := range subs {
			if strings.Contains(line, s) {
				out.WriteString(line)
				break
			}
		}
	}
	return out.String()
}

// --- hand-made datagrams ----------------------------------------------------

// fsRecord is one IPv4 5-tuple TCP record of the wire format (docs: the
// flowsync package's wire.go): flags, protocol, addresses, ports, fleet
// ID, side 0, age 0.
func fsRecord(src, dst netip.Addr, sport, dport uint16, fleetID uint64) []byte {
	b := []byte{2, unix.IPPROTO_TCP}
	s4, d4 := src.As4(), dst.As4()
	b = append(b, s4[:]...)
	b = append(b, d4[:]...)
	b = binary.BigEndian.AppendUint16(b, sport)
	b = binary.BigEndian.AppendUint16(b, dport)
	b = binary.BigEndian.AppendUint64(b, fleetID)
	return append(b, 0, 0, 0, 0, 0)
}

// fsSeal makes a records datagram (kind 1) as a peer with key would: the
// header in the clear (magic, version 1, kind, key ID, sender ID, seq,
// wall clock) authenticated, body sealed with AES-256-GCM under
// HKDF-SHA256(key, sender ID), the nonce from seq.
func fsSeal(key *[32]byte, sender, seq uint64, wall time.Time, body []byte) []byte {
	sid := binary.BigEndian.AppendUint64(nil, sender)
	kid := sha256.Sum256(key[:])
	h := append([]byte("XLBF"), 1, 1, 0, 0)
	h = append(h, kid[:4]...)
	h = append(h, sid[:]...)
	h = binary.BigEndian.AppendUint64(h, seq)
	h = binary.BigEndian.AppendUint64(h, uint64(wall.UnixMilli()))
	dk, err := hkdf.Key(sha256.New, key[:], sid[:], "xlb flow sync v1", 32)
	if err != nil {
		panic(err)
	}
	blk, err := aes.NewCipher(dk)
	if err != nil {
		panic(err)
	}
	a, err := cipher.NewGCM(blk)
	if err != nil {
		panic(err)
	}
	var nonce [12]byte
	binary.BigEndian.PutUint64(nonce[4:], seq)
	return a.Seal(h, nonce[:], body, h)
}

func readRandom(b []byte) error {
	_, err := rand.Read(b)
	return err
}

// spoofUDP sends payload from src to dst as one IPv4 UDP datagram made by
// hand (a raw socket in namespace ns), so that it carries src's port even
// while a socket there holds it.
func spoofUDP(ns string, src, dst netip.AddrPort, payload []byte) error {
	pkt := make([]byte, 28, 28+len(payload))
	pkt[0] = 0x45
	binary.BigEndian.PutUint16(pkt[2:], uint16(28+len(payload)))
	pkt[6] = 0x40 // DF
	pkt[8] = 64
	pkt[9] = unix.IPPROTO_UDP
	s4, d4 := src.Addr().As4(), dst.Addr().As4()
	copy(pkt[12:16], s4[:])
	copy(pkt[16:20], d4[:])
	binary.BigEndian.PutUint16(pkt[20:], src.Port())
	binary.BigEndian.PutUint16(pkt[22:], dst.Port())
	binary.BigEndian.PutUint16(pkt[24:], uint16(8+len(payload)))
	pkt = append(pkt, payload...)
	// The UDP checksum, over the pseudo-header, the header and the data.
	sum := uint32(0)
	add := func(b []byte) {
		for i := 0; i+1 < len(b); i += 2 {
			sum += uint32(binary.BigEndian.Uint16(b[i:]))
		}
		if len(b)%2 == 1 {
			sum += uint32(b[len(b)-1]) << 8
		}
	}
	add(pkt[12:20])
	sum += unix.IPPROTO_UDP + uint32(8+len(payload))
	add(pkt[20:])
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	c := ^uint16(sum)
	if c == 0 {
		c = 0xffff
	}
	binary.BigEndian.PutUint16(pkt[26:], c)
	return nsx.Do(ns, func() error {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_RAW, unix.IPPROTO_RAW)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		return unix.Sendto(fd, pkt, 0, &unix.SockaddrInet4{Addr: d4})
	})
}

// synFlood floods instance j with SYNs from random sources to the VIP and
// checks that its records sent stay within the rate bound and never
// follow the flood (half-open entries are not shared), and that no
// long-lived connection breaks.
func (s *fleetSync) synFlood(t *testing.T, tr *traffic, j int) {
	f := s.f
	alive := tr.alive()
	in := f.bed.Instances[j]
	fl, err := newTCPFlooder(f.bed.Router, in.MAC, netip.AddrPortFrom(testbed.VIP4, testbed.HTTPPort), "S")
	if err != nil {
		t.Fatal(err)
	}
	defer fl.close()
	sent := func() float64 {
		return s.metric(t, j, `xlb_flowsync_records_sent_total{source="ring"}`) + s.metric(t, j, `xlb_flowsync_records_sent_total{source="refresh"}`)
	}
	const frames = 100_000
	start, before := time.Now(), sent()
	flooded := 0
	for flooded < frames {
		n, err := fl.sendBatch()
		if err != nil {
			t.Fatalf("flooding %s: %v", in.Name, err)
		}
		flooded += n
	}
	tr.settle(t, alive, time.Now())
	records, secs := sent()-before, time.Since(start).Seconds()
	// The token bucket holds a tenth of a second of records, at least a
	// datagram's worth (49).
	bound := fsRate*secs + max(fsRate/10, 49)
	t.Logf("%d SYNs at %s: %.0f records sent meanwhile (%.1f s; bound %.0f)", flooded, in.Name, records, secs, bound)
	if records > bound {
		t.Errorf("%s sent %.0f records during a SYN flood of %.1f s, over its bound of %.0f", in.Name, records, secs, bound)
	}
	if records > frames/100 {
		t.Errorf("%s sent %.0f records for %d SYNs: half-open entries must not be shared", in.Name, records, frames)
	}
	s.checkConns(t, tr, "SYN flood at "+in.Name, alive, start)
}

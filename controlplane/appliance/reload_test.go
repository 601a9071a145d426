package appliance

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"xlb/config"
	"xlb/controlplane"
	"xlb/controlplane/admin"
	"xlb/controlplane/cptest"
	"xlb/healthcheck"
)

// ctlConfig: web has two primaries and a failover, one unnamed backend in
// dns (the fixture shared with controlplane/admin and cmd/xlb).
var ctlConfig = func() string {
	b, err := os.ReadFile("../../testdata/config/two-services.toml")
	if err != nil {
		panic(err)
	}
	return string(b)
}()

const reloadDataplane = `
[dataplane]
interface = "eth0"
`

// reloadRig is a reloader on a cptest control plane whose XDP map,
// resolver and checker are fakes that record each call, with what the
// control plane had published at that moment.
type reloadRig struct {
	rig   *cptest.Rig
	rl    *reloader
	file  string
	calls []string
	// reaps are the delays the reloader scheduled reap after, the
	// last one still pending unless cancelled.
	reaps []time.Duration
	// reapPending: the last scheduled reap was not cancelled.
	reapPending bool
	// healthErr, when set, is what the checker's Set answers.
	healthErr error
}

func (f *reloadRig) published() string {
	var names []string
	for _, b := range f.rig.CP.Snapshot().Backends {
		if b != nil && !b.Removed {
			names = append(names, b.Name)
		}
	}
	slices.Sort(names)
	return strings.Join(names, ",")
}

func (f *reloadRig) SetVIPs(vs []netip.Addr) error {
	f.calls = append(f.calls, fmt.Sprintf("vips %v [%s]", vs, f.published()))
	return nil
}

// Want records the addresses of cfgs, each once, in order.
func (f *reloadRig) Want(cfgs ...*config.Config) {
	var ips []string
	for _, cfg := range cfgs {
		if cfg == nil {
			continue
		}
		for _, s := range cfg.Services {
			for _, g := range s.Groups {
				for _, ep := range g.Endpoints {
					if ip := ep.IP.String(); !slices.Contains(ips, ip) {
						ips = append(ips, ip)
					}
				}
			}
		}
	}
	f.calls = append(f.calls, fmt.Sprintf("neigh %s [%s]", strings.Join(ips, " "), f.published()))
}

func (f *reloadRig) Set(ts []healthcheck.Target) error {
	var keys []string
	for _, t := range ts {
		keys = append(keys, t.Key)
	}
	f.calls = append(f.calls, fmt.Sprintf("health %s [%s]", strings.Join(keys, " "), f.published()))
	return f.healthErr
}

// refusingCP is a control plane that refuses every configuration.
type refusingCP struct{}

func (refusingCP) Apply(*config.Config, int64) (controlplane.Diff, error) {
	return controlplane.Diff{}, errors.New("no room for another service")
}

func newReloadRig(t *testing.T) *reloadRig {
	t.Helper()
	text := ctlConfig + reloadDataplane
	f := &reloadRig{rig: cptest.New(t, text), file: filepath.Join(t.TempDir(), "xlb.toml")}
	f.write(t, text)
	cur, err := config.Load(f.file)
	if err != nil {
		t.Fatal(err)
	}
	_, feeds := healthTargets(cur)
	fp := &atomic.Pointer[map[string][]healthFeed]{}
	fp.Store(&feeds)
	f.rl = &reloader{vips: f, neigh: f, hc: f, cp: f.rig.CP, feeds: fp,
		now: func() int64 { return f.rig.Now }, log: zap.NewNop(), cur: cur,
		schedule: func(d time.Duration, _ func()) func() {
			f.reaps, f.reapPending = append(f.reaps, d), true
			return func() { f.reapPending = false }
		}}
	return f
}

func (f *reloadRig) write(t *testing.T, text string) {
	t.Helper()
	if err := os.WriteFile(f.file, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestX2_ReloadOrder: the new VIP is in the XDP map before the control
// plane has its rule, the old one leaves only after; neighbours and
// health checks know the new backend before the control plane selects
// it; kept backends keep their flows, the removed one drains; the diff
// and the counters say so.
func TestX2_ReloadOrder(t *testing.T) {
	f := newReloadRig(t)
	next := strings.Replace(ctlConfig, `{ name = "b2", ip = "10.0.1.2" }`, `{ name = "b3", ip = "10.0.1.3" }`, 1)
	next = strings.ReplaceAll(next, `ip_address = "203.0.113.10"`, `ip_address = "203.0.113.20"`)
	f.write(t, next+reloadDataplane)
	if err := f.rl.reloadFile(ReloadOptions{}); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"vips [203.0.113.10 203.0.113.20] [10.0.4.1,b1,b2,f1]",
		// b2, removed, stays followed while it drains.
		"neigh 10.0.1.1 10.0.1.3 10.0.3.1 10.0.4.1 10.0.1.2 [10.0.4.1,b1,b2,f1]",
		"health hc/10.0.1.1 hc/10.0.1.3 hc/10.0.3.1 hc/10.0.4.1 [10.0.4.1,b1,b2,f1]",
		// The old VIP stays while web's removed rule drains (30 s, M5).
		"vips [203.0.113.20 203.0.113.10] [10.0.4.1,b1,b3,f1]",
	}
	if !slices.Equal(f.calls, want) {
		t.Errorf("calls:\n%s\nwant:\n%s", strings.Join(f.calls, "\n"), strings.Join(want, "\n"))
	}
	rep := f.rl.report()
	if rep.Success != 1 || rep.Failure != 0 || rep.Last == nil || !rep.Last.OK ||
		!slices.Equal(rep.Last.BackendsAdded, []string{"b3"}) || !slices.Equal(rep.Last.BackendsRemoved, []string{"b2"}) || rep.Last.BackendsKept != 3 {
		t.Errorf("report %+v last %+v", rep, rep.Last)
	}
	if fs := *f.rl.feeds.Load(); fs["hc/10.0.1.3"] == nil || fs["hc/10.0.1.2"] != nil {
		t.Errorf("health feeds not replaced: %v", fs)
	}
}

// TestX2_ReloadRejected: an invalid file, or a change of [dataplane] or
// [admin], changes nothing, counts a failure and says why; the next good
// file applies.
func TestX2_ReloadRejected(t *testing.T) {
	f := newReloadRig(t)
	gen := f.rig.CP.Snapshot().Gen
	for _, tc := range []struct {
		name, text, want string
	}{
		{"invalid", strings.Replace(ctlConfig, `protocol = "TCP"`, `protocol = "SCTP"`, 1) + reloadDataplane, "SCTP"},
		{"no interface", ctlConfig, "dataplane.interface"},
		{"ring size", ctlConfig + reloadDataplane + "ring_size = 4096\n", "dataplane.ring_size changed: restart required"},
		{"interface", ctlConfig + "[dataplane]\ninterface = \"eth1\"\n", "dataplane.interface changed: restart required"},
		// The rig keeps the default, /run/xlb: turning keeping off is a change.
		{"state dir", ctlConfig + reloadDataplane + "state_dir = \"\"\n", "dataplane.state_dir changed: restart required"},
		{"user", ctlConfig + reloadDataplane + "user = \"nobody\"\n", "dataplane.user changed: restart required"},
		{"admin", ctlConfig + reloadDataplane + "[admin]\nlisten = \"127.0.0.1:9999\"\n", "admin.listen changed: restart required"},
	} {
		f.write(t, tc.text)
		err := f.rl.reloadFile(ReloadOptions{})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error with %q", tc.name, err, tc.want)
		}
		if tc.name == "ring size" && !errors.Is(err, ErrRestart) {
			t.Errorf("%s: not ErrRestart", tc.name)
		}
	}
	if len(f.calls) != 0 || f.rig.CP.Snapshot().Gen != gen {
		t.Errorf("a rejected reload changed something: calls %v, generation %d -> %d", f.calls, gen, f.rig.CP.Snapshot().Gen)
	}
	rep := f.rl.report()
	if rep.Success != 0 || rep.Failure != 7 || rep.Last == nil || rep.Last.OK || len(rep.Last.Errors) == 0 {
		t.Errorf("report %+v last %+v", rep, rep.Last)
	}
	f.write(t, ctlConfig+reloadDataplane)
	if err := f.rl.reloadFile(ReloadOptions{}); err != nil {
		t.Fatal(err)
	}
	if rep := f.rl.report(); rep.Success != 1 || !rep.Last.OK {
		t.Errorf("good file after bad ones: %+v", rep)
	}
}

// TestX2_ReloadRollsBack: when the checker refuses the new targets, or the
// control plane the new configuration, what was changed before is put
// back (VIPs, neighbours, health targets), the running configuration and
// the health feeds stay, and the failure is counted with its reason.
func TestX2_ReloadRollsBack(t *testing.T) {
	next := strings.Replace(ctlConfig, `{ name = "b2", ip = "10.0.1.2" }`, `{ name = "b3", ip = "10.0.1.3" }`, 1)
	next = strings.ReplaceAll(next, `ip_address = "203.0.113.10"`, `ip_address = "203.0.113.20"`)
	oldNeigh := "neigh 10.0.1.1 10.0.1.2 10.0.3.1 10.0.4.1 [10.0.4.1,b1,b2,f1]"
	newNeigh := "neigh 10.0.1.1 10.0.1.3 10.0.3.1 10.0.4.1 10.0.1.2 [10.0.4.1,b1,b2,f1]" // b2 removed: still followed
	newHealth := "health hc/10.0.1.1 hc/10.0.1.3 hc/10.0.3.1 hc/10.0.4.1 [10.0.4.1,b1,b2,f1]"
	union := "vips [203.0.113.10 203.0.113.20] [10.0.4.1,b1,b2,f1]"
	old := "vips [203.0.113.10] [10.0.4.1,b1,b2,f1]"
	for _, tc := range []struct {
		name  string
		setup func(f *reloadRig)
		want  []string
		err   string
	}{
		{"checker refuses", func(f *reloadRig) { f.healthErr = errors.New("bad target") },
			[]string{union, newNeigh, newHealth, oldNeigh, old}, "bad target"},
		{"control plane refuses", func(f *reloadRig) { f.rl.cp = refusingCP{} },
			[]string{union, newNeigh, newHealth, "health hc/10.0.1.1 hc/10.0.1.2 hc/10.0.3.1 hc/10.0.4.1 [10.0.4.1,b1,b2,f1]", oldNeigh, old},
			"control plane: no room"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newReloadRig(t)
			tc.setup(f)
			feeds, cur, gen := f.rl.feeds.Load(), f.rl.cur, f.rig.CP.Snapshot().Gen
			f.write(t, next+reloadDataplane)
			if err := f.rl.reloadFile(ReloadOptions{}); err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("reload: %v, want an error with %q", err, tc.err)
			}
			if !slices.Equal(f.calls, tc.want) {
				t.Errorf("calls:\n%s\nwant:\n%s", strings.Join(f.calls, "\n"), strings.Join(tc.want, "\n"))
			}
			if f.rl.feeds.Load() != feeds || f.rl.cur != cur || f.rig.CP.Snapshot().Gen != gen {
				t.Error("a refused reload replaced the feeds, the running configuration or the snapshot")
			}
			rep := f.rl.report()
			if rep.Success != 0 || rep.Failure != 1 || rep.Last == nil || rep.Last.OK || len(rep.Last.Errors) != 1 ||
				!strings.Contains(rep.Last.Errors[0], tc.err) {
				t.Errorf("report %+v last %+v", rep, rep.Last)
			}
		})
	}
}

// TestX2_ReloadOfAConfig: Reload applies a configuration given in memory
// as ReloadFile applies the file; before Run it is ErrNotRunning and
// counts nothing, as are Drain and Undrain, and Status is an empty report.
func TestX2_ReloadOfAConfig(t *testing.T) {
	f := newReloadRig(t)
	cfg := cptest.Config(t, strings.Replace(ctlConfig, `{ name = "b2", ip = "10.0.1.2" }`, "", 1)+reloadDataplane)
	a := &Appliance{log: zap.NewNop()}
	a.cur.Store(&running{cp: f.rig.CP, rl: f.rl, now: func() int64 { return f.rig.Now }, runtime: func() *admin.Runtime { return nil }})
	if err := a.Reload(cfg); err != nil {
		t.Fatal(err)
	}
	if rep := f.rl.report(); rep.Success != 1 || !slices.Equal(rep.Last.BackendsRemoved, []string{"b2"}) {
		t.Errorf("report %+v last %+v, want b2 removed", rep, rep.Last)
	}
	bad := cptest.Config(t, ctlConfig) // no [dataplane] interface
	if err := a.Reload(bad); err == nil || !strings.Contains(err.Error(), "dataplane.interface") {
		t.Errorf("reload without an interface: %v", err)
	}
	if rep := f.rl.report(); rep.Failure != 1 {
		t.Errorf("failures %d, want 1", rep.Failure)
	}
	// The operator's drain, on the same control plane (M5).
	if _, err := a.Drain("nope"); !errors.Is(err, admin.ErrUnknownBackend) || !strings.Contains(err.Error(), `"nope"`) {
		t.Errorf("drain of an unknown name: %v, want admin.ErrUnknownBackend naming it", err)
	}
	if _, err := a.Drain("b1"); err != nil {
		t.Fatal(err)
	}
	drained := slices.ContainsFunc(a.Status().Services[0].Backends, func(b admin.BackendReport) bool {
		return b.Name == "b1" && b.Removed && b.Draining
	})
	if !drained {
		t.Errorf("after Drain: %+v, want b1 removed and draining", a.Status().Services[0].Backends)
	}
	if _, err := a.Undrain("b1"); err != nil {
		t.Fatal(err)
	}

	idle, err := New(cptest.Config(t, ctlConfig+reloadDataplane), nil)
	if err != nil {
		t.Fatal(err)
	}
	_, drainErr := idle.Drain("b1")
	_, undrainErr := idle.Undrain("b1")
	for name, err := range map[string]error{"Reload": idle.Reload(cfg), "ReloadFile": idle.ReloadFile(),
		"Drain": drainErr, "Undrain": undrainErr} {
		if !errors.Is(err, ErrNotRunning) {
			t.Errorf("%s before Run: %v, want ErrNotRunning", name, err)
		}
	}
	if st := idle.Status(); st.Generation != 0 || len(st.Services) != 0 || st.Runtime != nil || st.Reloads != nil {
		t.Errorf("status before Run: %+v, want empty", st)
	}
	if _, err := New(cptest.Config(t, ctlConfig), nil); err == nil || !strings.Contains(err.Error(), "dataplane.interface") {
		t.Errorf("New without an interface: %v", err)
	}
}

// reloadFleet records what a reload hands the announcer.
type reloadFleet struct{ f *reloadRig }

func (r reloadFleet) reload(cfg *config.Config) error {
	var ns []string
	for _, n := range cfg.BGP.Neighbors {
		ns = append(ns, n.Address.String())
	}
	r.f.calls = append(r.f.calls, fmt.Sprintf("bgp %s [%s]", strings.Join(ns, " "), r.f.published()))
	return nil
}

const reloadBGP = `
[bgp]
asn = 65010
  [[bgp.neighbor]]
  address = "10.97.0.1"
  asn = 65000
`

// TestX2_ReloadBGP: with [bgp], a reload hands the announcer the new
// neighbors (and VIPs) after the control plane has the new configuration
// and before stale VIPs leave the XDP map, so a removed VIP is withdrawn
// while it is still steered; a change of asn or router_id, or adding or
// removing the section, needs a restart and changes nothing.
func TestX2_ReloadBGP(t *testing.T) {
	f := newReloadRig(t)
	f.write(t, ctlConfig+reloadDataplane+reloadBGP)
	// The rig started without [bgp]: adding the section is a restart.
	if err := f.rl.reloadFile(ReloadOptions{}); !errors.Is(err, ErrRestart) || !strings.Contains(err.Error(), "bgp changed") {
		t.Fatalf("adding [bgp]: %v, want a restart", err)
	}
	cur, err := config.Load(f.file)
	if err != nil {
		t.Fatal(err)
	}
	f.rl.cur, f.rl.fleet = cur, reloadFleet{f}

	next := strings.ReplaceAll(ctlConfig, `ip_address = "203.0.113.10"`, `ip_address = "203.0.113.20"`)
	f.write(t, next+reloadDataplane+reloadBGP+"  [[bgp.neighbor]]\n  address = \"10.97.0.9\"\n  asn = 65000\n")
	if err := f.rl.reloadFile(ReloadOptions{}); err != nil {
		t.Fatal(err)
	}
	if i := slices.Index(f.calls, "bgp 10.97.0.1 10.97.0.9 [10.0.4.1,b1,b2,f1]"); i < 0 || i != len(f.calls)-2 ||
		f.calls[len(f.calls)-1] != "vips [203.0.113.20 203.0.113.10] [10.0.4.1,b1,b2,f1]" {
		t.Errorf("calls:\n%s\nwant the neighbors handed over just before the stale VIP leaves", strings.Join(f.calls, "\n"))
	}
	for _, tc := range []struct{ name, bgp, want string }{
		{"asn", strings.Replace(reloadBGP, "asn = 65010", "asn = 65011", 1), "bgp.asn changed: restart required"},
		{"router id", strings.Replace(reloadBGP, "asn = 65010", "asn = 65010\nrouter_id = \"10.0.0.9\"", 1), "bgp.router_id changed: restart required"},
		{"removed", "", "bgp changed: restart required"},
	} {
		calls := len(f.calls)
		f.write(t, next+reloadDataplane+tc.bgp)
		if err := f.rl.reloadFile(ReloadOptions{}); !errors.Is(err, ErrRestart) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
		if len(f.calls) != calls {
			t.Errorf("%s: a rejected reload changed something: %v", tc.name, f.calls[calls:])
		}
	}
}

// reloadFlowSync is a [flow_sync] whose key file is key.
func reloadFlowSync(listen, peers, key string) string {
	return fmt.Sprintf("\n[flow_sync]\nlisten = %q\npeers = [%s]\nkey_file = %q\n", listen, peers, key)
}

// TestX2_ReloadFlowSync: a reload may change the peers, the keys and the
// rate bound of [flow_sync]; adding or removing the section, or changing
// listen (the sockets are bound once), needs a restart and changes
// nothing.
func TestX2_ReloadFlowSync(t *testing.T) {
	f := newReloadRig(t)
	dir := t.TempDir()
	key := filepath.Join(dir, "flow-sync.key")
	writeKey := func(lines ...string) {
		t.Helper()
		if err := os.WriteFile(key, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	k1, k2 := strings.Repeat("a1", 32), strings.Repeat("b2", 32)
	writeKey(k1)
	start := ctlConfig + reloadDataplane + reloadFlowSync("10.0.0.5:7300", `"10.0.0.6:7300"`, key)
	// The rig started without [flow_sync]: adding the section is a restart.
	f.write(t, start)
	if err := f.rl.reloadFile(ReloadOptions{}); !errors.Is(err, ErrRestart) || !strings.Contains(err.Error(), "flow_sync changed: restart required") {
		t.Fatalf("adding [flow_sync]: %v, want a restart", err)
	}
	cur, err := config.Load(f.file)
	if err != nil {
		t.Fatal(err)
	}
	f.rl.cur = cur
	gen := f.rig.CP.Snapshot().Gen
	for _, tc := range []struct{ name, text, want string }{
		{"listen", ctlConfig + reloadDataplane + reloadFlowSync("10.0.0.5:7301", `"10.0.0.6:7300"`, key), "flow_sync.listen changed: restart required"},
		{"removed", ctlConfig + reloadDataplane, "flow_sync changed: restart required"},
	} {
		f.write(t, tc.text)
		if err := f.rl.reloadFile(ReloadOptions{}); !errors.Is(err, ErrRestart) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
		if f.rl.cur != cur || f.rig.CP.Snapshot().Gen != gen {
			t.Errorf("%s: a rejected reload changed the configuration", tc.name)
		}
	}
	// Peers, a second key (a rollover) and the rate bound: applied.
	writeKey(k2, k1)
	f.write(t, ctlConfig+reloadDataplane+reloadFlowSync("10.0.0.5:7300", `"10.0.0.5:7300", "10.0.0.6:7300", "10.0.0.7:7300"`, key)+
		"max_records_per_sec = 5000\n")
	if err := f.rl.reloadFile(ReloadOptions{}); err != nil {
		t.Fatal(err)
	}
	fs := f.rl.cur.FlowSync
	if fs == nil || len(fs.Peers) != 2 || len(fs.Keys) != 2 || fs.Keys[0][0] != 0xb2 || fs.MaxRecordsPerSec != 5000 {
		t.Errorf("the reloaded [flow_sync]: %+v", fs)
	}
}

// TestX2_ReloadRefusesEmpty: a file with only [dataplane] (a truncated
// one, say) would remove every forwarding rule at once: the reload is
// refused, nothing changes, the failure is counted with the reason; asked
// for explicitly (--allow-empty), it applies, and the VIPs leave, with
// the warning the README promises (the refused one logs no such line).
func TestX2_ReloadRefusesEmpty(t *testing.T) {
	f := newReloadRig(t)
	core, logs := observer.New(zapcore.DebugLevel)
	f.rl.log = zap.New(core)
	const allowed = "reload removes every forwarding rule, as asked (--allow-empty)"
	rulesBefore := int64(len(f.rl.cur.Rules))
	if rulesBefore == 0 {
		t.Fatal("the rig runs no forwarding rule: nothing to remove")
	}
	gen := f.rig.CP.Snapshot().Gen
	f.write(t, reloadDataplane)
	err := f.rl.reloadFile(ReloadOptions{})
	if !errors.Is(err, ErrEmpty) || !strings.Contains(err.Error(), f.file) {
		t.Fatalf("reload of a file without rules: %v, want ErrEmpty naming the file", err)
	}
	if len(f.calls) != 0 || f.rig.CP.Snapshot().Gen != gen {
		t.Errorf("the refused reload changed something: calls %v, generation %d -> %d", f.calls, gen, f.rig.CP.Snapshot().Gen)
	}
	if rep := f.rl.report(); rep.Failure != 1 || rep.Last == nil || rep.Last.OK || !strings.Contains(strings.Join(rep.Last.Errors, " "), "--allow-empty") {
		t.Errorf("report %+v last %+v", rep, rep.Last)
	}
	if n := logs.FilterMessage(allowed).Len(); n != 0 {
		t.Errorf("the refused reload logged %q %d time(s)", allowed, n)
	}
	if err := f.rl.reloadFile(ReloadOptions{AllowEmpty: true}); err != nil {
		t.Fatalf("--allow-empty: %v", err)
	}
	if got := logs.FilterMessage(allowed).All(); len(got) != 1 || got[0].Level != zapcore.WarnLevel {
		t.Errorf("--allow-empty logged %+v, want one warning %q", got, allowed)
	} else if m := got[0].ContextMap(); m["file"] != f.file || m["rules_before"] != rulesBefore {
		t.Errorf("the --allow-empty warning has fields %v, want file %s and rules_before %d", m, f.file, rulesBefore)
	}
	// web's rule drains 30 s (M5): its VIP leaves when that ends.
	if last := f.calls[len(f.calls)-1]; last != "vips [203.0.113.10] []" {
		t.Errorf("after the empty reload: %s, want the draining VIP only", last)
	}
	f.rig.Now += 30_000
	f.rl.reap()
	if last := f.calls[len(f.calls)-1]; last != "vips [] []" {
		t.Errorf("after the drain: %s, want no VIPs", last)
	}
	// From empty to empty is no change of that kind: no flag needed.
	if err := f.rl.reloadFile(ReloadOptions{}); err != nil {
		t.Errorf("empty again: %v", err)
	}
}

// TestM5_RemovedVIPLeavesMapAfterDrain: a reload that removes a VIP's
// rules leaves the VIP in the XDP map while a removed rule drains, and
// schedules its removal for the drain's end; the reaper takes it out then,
// not before; a reload that brings the rule back cancels it.
func TestM5_RemovedVIPLeavesMapAfterDrain(t *testing.T) {
	f := newReloadRig(t)
	moved := strings.ReplaceAll(ctlConfig, `ip_address = "203.0.113.10"`, `ip_address = "203.0.113.20"`)
	f.rig.Now = 5_000
	f.write(t, moved+reloadDataplane)
	if err := f.rl.reloadFile(ReloadOptions{}); err != nil {
		t.Fatal(err)
	}
	both := "vips [203.0.113.20 203.0.113.10] [10.0.4.1,b1,b2,f1]"
	if last := f.calls[len(f.calls)-1]; last != both || !slices.Equal(f.reaps, []time.Duration{30 * time.Second}) || !f.reapPending {
		t.Fatalf("after the reload: %s, reaps %v (pending %v); want %s and one reap in 30s", last, f.reaps, f.reapPending, both)
	}
	calls := len(f.calls)
	f.rig.Now = 34_999 // early: nothing leaves, the reap is put off
	f.rl.reap()
	if len(f.calls) != calls || !slices.Equal(f.reaps[1:], []time.Duration{time.Millisecond}) {
		t.Errorf("reap before the drain ends: calls %v, reaps %v; want none, then one in 1ms", f.calls[calls:], f.reaps)
	}
	f.rig.Now = 35_000
	f.rl.reap()
	if got := f.calls[calls:]; !slices.Equal(got, []string{"vips [203.0.113.20] [10.0.4.1,b1,b2,f1]"}) || len(f.reaps) != 2 {
		t.Errorf("reap at the drain's end: calls %v, reaps %v; want the old VIP gone and nothing scheduled", got, f.reaps)
	}

	// Moved away and back before the drain ends: the drain ends at the
	// second reload, and nothing is left to reap.
	g := newReloadRig(t)
	g.write(t, moved+reloadDataplane)
	if err := g.rl.reloadFile(ReloadOptions{}); err != nil {
		t.Fatal(err)
	}
	g.rig.Now = 10_000
	g.write(t, ctlConfig+reloadDataplane)
	if err := g.rl.reloadFile(ReloadOptions{}); err != nil {
		t.Fatal(err)
	}
	// .20's rules drain now, .10's are current again.
	if last := g.calls[len(g.calls)-1]; last != "vips [203.0.113.10 203.0.113.20] [10.0.4.1,b1,b2,f1]" ||
		!slices.Equal(g.reaps, []time.Duration{30 * time.Second, 30 * time.Second}) {
		t.Errorf("moved back: %s, reaps %v", last, g.reaps)
	}
	g.rig.Now = 40_000
	g.rl.reap()
	if last := g.calls[len(g.calls)-1]; last != "vips [203.0.113.10] [10.0.4.1,b1,b2,f1]" || g.reapPending {
		t.Errorf("after the drain of .20: %s (reap pending %v), want .10 only", last, g.reapPending)
	}
}

// TestX2_ReloadFollowsRemovedBackends: a backend a reload removes stays
// among the neighbours to resolve for as long as it drains (its tracked
// flows are still sent to it, M5, and it may come back while it drains,
// selected again at once), through later reloads, failed ones included;
// it is dropped when its drain ends, not before. Were it forgotten, its
// frames would be dropped as backend-not-ready until it was resolved
// again (seen under reload bursts on busy CPUs).
func TestX2_ReloadFollowsRemovedBackends(t *testing.T) {
	f := newReloadRig(t)
	lastNeigh := func() string {
		for i := len(f.calls) - 1; i >= 0; i-- {
			if c := f.calls[i]; strings.HasPrefix(c, "neigh ") {
				got, _, _ := strings.Cut(c, " [")
				return got
			}
		}
		return "none"
	}
	reload := func(at int64, text string) error {
		t.Helper()
		f.rig.Now, f.calls = at, nil
		f.write(t, text+reloadDataplane)
		return f.rl.reloadFile(ReloadOptions{})
	}
	reap := func(at int64) {
		f.rig.Now, f.calls = at, nil
		f.rl.reap()
	}
	// web drains 30 s. At 0 s b2 leaves (b3 comes), at 10 s b3 leaves (b4
	// comes): b2 drains until 30 s, b3 until 40 s.
	withB3 := strings.Replace(ctlConfig, `{ name = "b2", ip = "10.0.1.2" }`, `{ name = "b3", ip = "10.0.1.3" }`, 1)
	withB4 := strings.Replace(ctlConfig, `{ name = "b2", ip = "10.0.1.2" }`, `{ name = "b4", ip = "10.0.1.4" }`, 1)
	if err := reload(0, withB3); err != nil {
		t.Fatal(err)
	}
	if got, want := lastNeigh(), "neigh 10.0.1.1 10.0.1.3 10.0.3.1 10.0.4.1 10.0.1.2"; got != want {
		t.Errorf("b2 removed: %q, want %q", got, want)
	}
	if err := reload(10_000, withB4); err != nil {
		t.Fatal(err)
	}
	if got, want := lastNeigh(), "neigh 10.0.1.1 10.0.1.4 10.0.3.1 10.0.4.1 10.0.1.2 10.0.1.3"; got != want {
		t.Errorf("second reload inside b2's drain: %q, want %q (b2 and b3 both drain)", got, want)
	}
	if !slices.Equal(f.reaps, []time.Duration{30 * time.Second, 20 * time.Second}) || !f.reapPending {
		t.Errorf("reaps %v (pending %v), want 30s then 20s (b2's drain end)", f.reaps, f.reapPending)
	}
	// A reload that fails puts back what is followed between reloads: the
	// running file's backends and both draining ones.
	f.healthErr = errors.New("checker refuses")
	if err := reload(20_000, ctlConfig); err == nil {
		t.Fatal("the reload the checker refused succeeded")
	}
	f.healthErr = nil
	if got, want := lastNeigh(), "neigh 10.0.1.1 10.0.1.4 10.0.3.1 10.0.4.1 10.0.1.2 10.0.1.3"; got != want {
		t.Errorf("after a failed reload: %q, want %q", got, want)
	}
	reap(29_999) // early: nothing changes
	if got := lastNeigh(); got != "none" {
		t.Errorf("reap before b2's drain ends: %q, want no change", got)
	}
	reap(30_000)
	if got, want := lastNeigh(), "neigh 10.0.1.1 10.0.1.4 10.0.3.1 10.0.4.1 10.0.1.3"; got != want {
		t.Errorf("b2's drain over: %q, want %q", got, want)
	}
	if n := len(f.reaps); n == 0 || f.reaps[n-1] != 10*time.Second || !f.reapPending {
		t.Errorf("reaps %v (pending %v), want the next in 10s (b3's drain end)", f.reaps, f.reapPending)
	}
	reap(40_000)
	if got, want := lastNeigh(), "neigh 10.0.1.1 10.0.1.4 10.0.3.1 10.0.4.1"; got != want {
		t.Errorf("b3's drain over: %q, want %q", got, want)
	}
	if f.reapPending {
		t.Errorf("a reap is still scheduled (%v) with nothing left to drain", f.reaps)
	}
	// Taken out and back within the drain: followed throughout, and the
	// reload that brings it back leaves nothing to forget later.
	if err := reload(50_000, withB3); err != nil {
		t.Fatal(err)
	}
	if err := reload(51_000, withB4); err != nil {
		t.Fatal(err)
	}
	if got, want := lastNeigh(), "neigh 10.0.1.1 10.0.1.4 10.0.3.1 10.0.4.1 10.0.1.3"; got != want {
		t.Errorf("b4 back within its drain: %q, want %q", got, want)
	}
}

// TestM5_RemovedServiceBackendsFollowed: a reload that removes a service
// and its rule leaves the rule draining for the service's timeout, its
// tracked flows going to the removed service's backends: those stay
// among the neighbours to resolve until then, on the removed service's
// timeout (the new file no longer says it).
func TestM5_RemovedServiceBackendsFollowed(t *testing.T) {
	f := newReloadRig(t)
	// dns alone: web (30 s of draining) and its rule leave.
	webStart := strings.Index(ctlConfig, "[[backend_service]]")
	dnsStart := strings.Index(ctlConfig[webStart+1:], "[[backend_service]]") + webStart + 1
	webRule := strings.Index(ctlConfig, "[[forwarding_rule]]")
	dnsRule := strings.Index(ctlConfig[webRule+1:], "[[forwarding_rule]]") + webRule + 1
	dnsOnly := ctlConfig[:webStart] + ctlConfig[dnsStart:webRule] + ctlConfig[dnsRule:]
	f.rig.Now = 1_000
	f.write(t, dnsOnly+reloadDataplane)
	if err := f.rl.reloadFile(ReloadOptions{}); err != nil {
		t.Fatal(err)
	}
	neigh := func() []string {
		var out []string
		for _, c := range f.calls {
			if strings.HasPrefix(c, "neigh ") {
				got, _, _ := strings.Cut(c, " [")
				out = append(out, got)
			}
		}
		return out
	}
	if got, want := neigh(), []string{"neigh 10.0.4.1 10.0.1.1 10.0.1.2 10.0.3.1"}; !slices.Equal(got, want) {
		t.Errorf("web removed: %q, want %q", got, want)
	}
	if !slices.Equal(f.reaps, []time.Duration{30 * time.Second}) {
		t.Errorf("reaps %v, want one at web's drain end (30s)", f.reaps)
	}
	f.calls = nil
	f.rig.Now = 31_000
	f.rl.reap()
	if got, want := neigh(), []string{"neigh 10.0.4.1"}; !slices.Equal(got, want) {
		t.Errorf("web's drain over: %q, want %q", got, want)
	}
}

// TestX2_ReloadBurstKeepsRemovedBounded: a burst of reloads alternating
// two files inside one drain, one of them without b2, keeps at most one
// draining backend followed besides the running file's: one a later
// reload brings back is the running file's again, so what the resolver
// follows does not grow with the burst.
func TestX2_ReloadBurstKeepsRemovedBounded(t *testing.T) {
	f := newReloadRig(t)
	withB3 := strings.Replace(ctlConfig, `{ name = "b2", ip = "10.0.1.2" }`, `{ name = "b3", ip = "10.0.1.3" }`, 1)
	for i := range 50 {
		f.rig.Now = int64(i) * 100 // all inside web's 30 s drain
		text := ctlConfig
		if i%2 == 0 {
			text = withB3
		}
		f.write(t, text+reloadDataplane)
		if err := f.rl.reloadFile(ReloadOptions{}); err != nil {
			t.Fatal(err)
		}
		if n := len(f.rl.draining); n > 1 {
			t.Fatalf("after reload %d: %d draining backends followed (%v), want at most 1", i+1, n, f.rl.draining)
		}
	}
	// The last reload (ctlConfig) removed b3: it is still followed.
	if !slices.Equal(f.rl.draining, []string{"web/10.0.1.3"}) {
		t.Errorf("draining backends followed %v, want b3's alone", f.rl.draining)
	}
}

// reloadFlows records what a reload hands the flow-sync goroutine.
type reloadFlows struct{ f *reloadRig }

func (r reloadFlows) Reconfigure(c *config.FlowSync) {
	var ps []string
	for _, p := range c.Peers {
		ps = append(ps, p.String())
	}
	r.f.calls = append(r.f.calls, fmt.Sprintf("flowsync %s keys %d rate %d [%s]", strings.Join(ps, " "), len(c.Keys), c.MaxRecordsPerSec, r.f.published()))
}

// TestX2_ReloadPassesFlowSyncOn: with [flow_sync], a reload hands the sync
// goroutine the new peers, keys and rate bound once the control plane has
// the new configuration (the records of a backend the reload added can be
// resolved from then on); a new listen address, or adding or removing the
// section, needs a restart and changes nothing.
func TestX2_ReloadPassesFlowSyncOn(t *testing.T) {
	f := newReloadRig(t)
	keyFile := filepath.Join(t.TempDir(), "flow-sync.key")
	if err := os.WriteFile(keyFile, []byte(strings.Repeat("ab", 32)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	section := func(listen, peers, extra string) string {
		return fmt.Sprintf("\n[flow_sync]\nlisten = %q\npeers = [%s]\nkey_file = %q\n%s", listen, peers, keyFile, extra)
	}
	first := section("10.0.0.5:7300", `"10.0.0.5:7300", "10.0.0.6:7300"`, "")
	f.write(t, ctlConfig+reloadDataplane+first)
	if err := f.rl.reloadFile(ReloadOptions{}); !errors.Is(err, ErrRestart) || !strings.Contains(err.Error(), "flow_sync") {
		t.Fatalf("adding [flow_sync]: %v, want a restart", err)
	}
	cur, err := config.Load(f.file)
	if err != nil {
		t.Fatal(err)
	}
	f.rl.cur, f.rl.flows = cur, reloadFlows{f}

	next := strings.Replace(ctlConfig, `{ name = "b2", ip = "10.0.1.2" }`, `{ name = "b2", ip = "10.0.1.2" }, { name = "b3", ip = "10.0.1.3" }`, 1)
	if next == ctlConfig {
		t.Fatal("the fixture has changed: no b2 to add b3 after")
	}
	f.write(t, next+reloadDataplane+section("10.0.0.5:7300", `"10.0.0.6:7300", "10.0.0.7:7300"`, "max_records_per_sec = 5000\n"))
	if err := f.rl.reloadFile(ReloadOptions{}); err != nil {
		t.Fatal(err)
	}
	want := "flowsync 10.0.0.6:7300 10.0.0.7:7300 keys 1 rate 5000 [10.0.4.1,b1,b2,b3,f1]"
	if !slices.Contains(f.calls, want) {
		t.Errorf("calls:\n%s\nwant %q: the new peers and rate, after the control plane has b3", strings.Join(f.calls, "\n"), want)
	}
	for _, tc := range []struct{ name, section, want string }{
		{"listen", section("10.0.0.8:7300", `"10.0.0.6:7300"`, ""), "flow_sync.listen changed: restart required"},
		{"removed", "", "flow_sync changed: restart required"},
	} {
		calls := len(f.calls)
		f.write(t, next+reloadDataplane+tc.section)
		if err := f.rl.reloadFile(ReloadOptions{}); !errors.Is(err, ErrRestart) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
		if len(f.calls) != calls {
			t.Errorf("%s: a rejected reload changed something: %v", tc.name, f.calls[calls:])
		}
	}
}

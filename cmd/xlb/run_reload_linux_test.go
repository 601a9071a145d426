package main

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

	"go.uber.org/zap"

	"xlb/config"
	"xlb/controlplane/cptest"
	"xlb/controlplane/neigh"
	"xlb/healthcheck"
)

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

func (f *reloadRig) Want(ts []neigh.Target) {
	f.calls = append(f.calls, fmt.Sprintf("neigh %d [%s]", len(ts), f.published()))
}

func (f *reloadRig) Set(ts []healthcheck.Target) error {
	var keys []string
	for _, t := range ts {
		keys = append(keys, t.Key)
	}
	f.calls = append(f.calls, fmt.Sprintf("health %s [%s]", strings.Join(keys, " "), f.published()))
	return nil
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
	f.rl = &reloader{path: f.file, vips: f, neigh: f, hc: f, cp: f.rig.CP, feeds: fp,
		now: func() int64 { return f.rig.Now }, log: zap.NewNop(), cur: cur}
	return f
}

func (f *reloadRig) write(t *testing.T, text string) {
	t.Helper()
	if err := os.WriteFile(f.file, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestReloadOrder (X2): the new VIP is in the XDP map before the control
// plane has its rule, the old one leaves only after; neighbours and
// health checks know the new backend before the control plane selects
// it; kept backends keep their flows, the removed one drains; the diff
// and the counters say so.
func TestReloadOrder(t *testing.T) {
	f := newReloadRig(t)
	next := strings.Replace(ctlConfig, `{ name = "b2", ip = "10.0.1.2" }`, `{ name = "b3", ip = "10.0.1.3" }`, 1)
	next = strings.ReplaceAll(next, `ip_address = "203.0.113.10"`, `ip_address = "203.0.113.20"`)
	f.write(t, next+reloadDataplane)
	if err := f.rl.reload(); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"vips [203.0.113.10 203.0.113.20] [10.0.4.1,b1,b2,f1]",
		"neigh 4 [10.0.4.1,b1,b2,f1]",
		"health hc/10.0.1.1 hc/10.0.1.3 hc/10.0.3.1 hc/10.0.4.1 [10.0.4.1,b1,b2,f1]",
		"vips [203.0.113.20] [10.0.4.1,b1,b3,f1]",
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

// TestReloadRejected (X2): an invalid file, or a change of [dataplane] or
// [admin], changes nothing, counts a failure and says why; the next good
// file applies.
func TestReloadRejected(t *testing.T) {
	f := newReloadRig(t)
	gen := f.rig.CP.Snapshot().Gen
	for _, tc := range []struct {
		name, text, want string
	}{
		{"invalid", strings.Replace(ctlConfig, `protocol = "TCP"`, `protocol = "SCTP"`, 1) + reloadDataplane, "SCTP"},
		{"no interface", ctlConfig, "dataplane.interface"},
		{"ring size", ctlConfig + reloadDataplane + "ring_size = 4096\n", "dataplane.ring_size changed: restart required"},
		{"interface", ctlConfig + "[dataplane]\ninterface = \"eth1\"\n", "dataplane.interface changed: restart required"},
		{"admin", ctlConfig + reloadDataplane + "[admin]\nlisten = \"127.0.0.1:9999\"\n", "admin.listen changed: restart required"},
	} {
		f.write(t, tc.text)
		err := f.rl.reload()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error with %q", tc.name, err, tc.want)
		}
		if tc.name == "ring size" && !errors.Is(err, errRestart) {
			t.Errorf("%s: not errRestart", tc.name)
		}
	}
	if len(f.calls) != 0 || f.rig.CP.Snapshot().Gen != gen {
		t.Errorf("a rejected reload changed something: calls %v, generation %d -> %d", f.calls, gen, f.rig.CP.Snapshot().Gen)
	}
	rep := f.rl.report()
	if rep.Success != 0 || rep.Failure != 5 || rep.Last == nil || rep.Last.OK || len(rep.Last.Errors) == 0 {
		t.Errorf("report %+v last %+v", rep, rep.Last)
	}
	f.write(t, ctlConfig+reloadDataplane)
	if err := f.rl.reload(); err != nil {
		t.Fatal(err)
	}
	if rep := f.rl.report(); rep.Success != 1 || !rep.Last.OK {
		t.Errorf("good file after bad ones: %+v", rep)
	}
}

package appliance

import (
	"errors"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	"golang.org/x/sys/unix"

	"xlb/config"
	"xlb/internal/nettest"
)

// TestPrivErr: a refusal anywhere reads as the privileges hint; any other
// error, joined ones included, prints as one line naming the step.
func TestPrivErr(t *testing.T) {
	if got := privErr("loading", fmt.Errorf("deep: %w", unix.EPERM)).Error(); !strings.Contains(got, "needs root") || !strings.Contains(got, "loading") {
		t.Errorf("EPERM: %q, want the step and the privileges hint", got)
	}
	joined := errors.Join(errors.New("native: no"), errors.New("generic: no"))
	got := privErr("attaching", joined).Error()
	if strings.Contains(got, "\n") || !strings.Contains(got, "native: no; generic: no") || !strings.HasPrefix(got, "attaching: ") {
		t.Errorf("joined: %q, want one line with both", got)
	}
}

// fakeVIPs is the VIP map for dropper's measurement: err is what Lookup
// returns; eff, the CapEff of the thread it ran on.
type fakeVIPs struct {
	err error
	eff uint64
}

func (f *fakeVIPs) Lookup(_, _ any) error {
	b, err := os.ReadFile("/proc/thread-self/status")
	if err != nil {
		return err
	}
	for l := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(l, "CapEff:"); ok {
			f.eff, _ = strconv.ParseUint(strings.TrimSpace(v), 16, 64)
		}
	}
	return f.err
}

// TestDropper_MeasuresBPF: what the maps need is measured on a thread
// with only CAP_NET_ADMIN effective; where the kernel refuses the lookup
// (EPERM, as before Linux 6.5 with unprivileged BPF disabled), CAP_BPF is
// kept too, and where it allows it, CAP_NET_ADMIN alone.
func TestDropper_MeasuresBPF(t *testing.T) {
	nettest.RequireRoot(t) // the measuring thread lowers its effective set to CAP_NET_ADMIN
	for _, tc := range []struct {
		name string
		err  error
		want uint64
	}{
		{"Allowed", errors.New("key does not exist"), 1 << capNetAdmin},
		{"Refused", fmt.Errorf("map lookup: %w", unix.EPERM), 1<<capNetAdmin | 1<<capBPF},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vips := &fakeVIPs{err: tc.err}
			var got target
			d := dropper{log: zap.NewNop(), vips: vips, drop: func(t target) (bool, error) { got = t; return false, nil }}
			if err := d.run(); err != nil {
				t.Fatal(err)
			}
			if got.keep != tc.want || got.id != nil {
				t.Errorf("dropped to %+v, want keep %x and no switch", got, tc.want)
			}
			if vips.eff != 1<<capNetAdmin {
				t.Errorf("measured with CapEff %x, want CAP_NET_ADMIN alone", vips.eff)
			}
		})
	}
}

// TestDropper_Refuses: a drop that fails stops the start with one line
// naming the failure and --keep-privileges; with --keep-privileges
// nothing is dropped and a warning says so.
func TestDropper_Refuses(t *testing.T) {
	called := false
	failing := func(target) (bool, error) {
		called = true
		return false, errors.New("thread 42 still has CapEff 1fffeffffff")
	}
	d := dropper{log: zap.NewNop(), vips: &fakeVIPs{}, drop: failing}
	err := d.run()
	if err == nil || strings.Contains(err.Error(), "\n") || !strings.Contains(err.Error(), "thread 42 still has CapEff") ||
		!strings.Contains(err.Error(), "refusing to run with them (xlb run --keep-privileges runs anyway)") {
		t.Errorf("failed drop: %v, want one line with the failure and --keep-privileges", err)
	}
	core, logs := observer.New(zapcore.WarnLevel)
	called = false
	d = dropper{log: zap.New(core), keep: true, vips: &fakeVIPs{}, drop: failing}
	if err := d.run(); err != nil || called {
		t.Errorf("--keep-privileges: %v, drop called %v; want nil and no drop", err, called)
	}
	if logs.FilterMessage("capabilities kept (--keep-privileges): xlb runs with every capability it was started with").Len() != 1 {
		t.Errorf("--keep-privileges logged %v, want the warning", logs.All())
	}
}

// TestDropper_ConfigUnreadable: a configuration file (or flow sync key
// file) the process cannot read once privileges are dropped stops the
// start (every reload would fail), naming the file and the uid.
func TestDropper_ConfigUnreadable(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gone.toml")
	d := dropper{log: zap.NewNop(), vips: &fakeVIPs{}, cfgPath: path, drop: func(target) (bool, error) { return false, nil }}
	err := d.run()
	if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "a reload could not read it") {
		t.Errorf("%v, want the file named and why it matters", err)
	}
	// So does flow_sync.key_file, which a reload reads as well.
	cfg := filepath.Join(t.TempDir(), "xlb.toml")
	if err := os.WriteFile(cfg, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	d.cfgPath, d.keyFile = cfg, filepath.Join(t.TempDir(), "gone.key")
	if err := d.run(); err == nil || !strings.Contains(err.Error(), d.keyFile) || !strings.Contains(err.Error(), "a reload could not read it") {
		t.Errorf("key file: %v, want the file named and why it matters", err)
	}
	d.keyFile = cfg
	if err := d.run(); err != nil {
		t.Errorf("readable files: %v", err)
	}
}

// TestRunAs: dataplane.user by name (its uid and primary group) or by a
// uid the user database lacks (the group of the same number); without
// it, this process's user; an unknown name is an error naming the key.
func TestRunAs(t *testing.T) {
	cfg := func(user string) *config.Config {
		return &config.Config{Path: "/etc/xlb/xlb.toml", Dataplane: config.Dataplane{User: user}}
	}
	if id, err := RunAs(cfg("")); err != nil || id.UID != os.Geteuid() || id.GID != os.Getegid() || id.Configured || id.switches() {
		t.Errorf(`"": %+v %v, want this process's ids, no switch`, id, err)
	}
	root, err := user.LookupId("0")
	if err != nil {
		t.Skipf("no user database entry for uid 0: %v", err)
	}
	if id, err := RunAs(cfg(root.Username)); err != nil || id.UID != 0 || id.GID != 0 || !id.Configured {
		t.Errorf("%q: %+v %v, want uid 0, gid 0", root.Username, id, err)
	} else if os.Geteuid() == 0 && os.Getegid() == 0 && id.switches() {
		t.Errorf("%q as root: switches, want not", root.Username)
	}
	if id, err := RunAs(cfg("4242420")); err != nil || id.UID != 4242420 || id.GID != 4242420 || !id.switches() {
		t.Errorf("4242420: %+v %v, want uid and gid 4242420, a switch", id, err)
	}
	if uid, err := RunAsUID(cfg("4242420")); uid != 4242420 || err != nil {
		t.Errorf("RunAsUID: %d %v", uid, err)
	}
	if _, err := RunAs(cfg("no-such-xlb-user")); err == nil || !strings.Contains(err.Error(), `dataplane.user "no-such-xlb-user" (/etc/xlb/xlb.toml)`) {
		t.Errorf("unknown user: %v, want an error naming dataplane.user and the file", err)
	}
}

// TestCheckSwitch: a switch with --keep-privileges is refused with one
// line; without a switch there is nothing to check.
func TestCheckSwitch(t *testing.T) {
	other := Identity{UID: 4242420, GID: 4242420, Configured: true, Cfg: "4242420"}
	if err := checkSwitch(other, true); err == nil || !strings.Contains(err.Error(), `dataplane.user "4242420" gives up what --keep-privileges keeps`) {
		t.Errorf("switch and keep: %v", err)
	}
	if err := checkSwitch(Identity{UID: os.Geteuid(), GID: os.Getegid()}, true); err != nil {
		t.Errorf("no switch: %v", err)
	}
	if os.Geteuid() != 0 {
		if err := checkSwitch(other, false); err == nil || !strings.Contains(err.Error(), "switching to it needs root") {
			t.Errorf("switch without root: %v", err)
		}
	}
}

// TestCredsDiffers: what verifyThreads reports of a thread that kept more
// than the target, read from a status file as the kernel writes it.
func TestCredsDiffers(t *testing.T) {
	status := func(eff, bnd, uid, groups, nnp string) string {
		p := filepath.Join(t.TempDir(), "status")
		text := "Name:\txlb\nUid:\t" + uid + "\nGid:\t" + uid + "\nGroups:\t" + groups + "\n" +
			"CapInh:\t0000000000000000\nCapPrm:\t" + eff + "\nCapEff:\t" + eff + "\nCapBnd:\t" + bnd + "\nCapAmb:\t0000000000000000\nNoNewPrivs:\t" + nnp + "\n"
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	const na = "0000000000001000"
	user := &Identity{UID: 65534, GID: 65534}
	for _, tc := range []struct {
		name, path string
		t          target
		bounding   bool
		want       string
	}{
		{"Dropped", status(na, na, "65534\t65534\t65534\t65534", "", "1"), target{keep: 1 << capNetAdmin, id: user}, true, ""},
		{"AllCaps", status("000001ffffffffff", na, "0\t0\t0\t0", "", "1"), target{keep: 1 << capNetAdmin}, true, "CapEff 000001ffffffffff"},
		{"Bounding", status(na, "000001ffffffffff", "0\t0\t0\t0", "", "1"), target{keep: 1 << capNetAdmin}, true, "CapBnd 000001ffffffffff"},
		{"BoundingKept", status(na, "000001ffffffffff", "0\t0\t0\t0", "", "1"), target{keep: 1 << capNetAdmin}, false, ""},
		{"SavedRoot", status(na, na, "65534\t65534\t0\t65534", "", "1"), target{keep: 1 << capNetAdmin, id: user}, true, "uids [65534 65534 0 65534]"},
		{"Groups", status(na, na, "65534\t65534\t65534\t65534", "0 27", "1"), target{keep: 1 << capNetAdmin, id: user}, true, "2 supplementary groups"},
		{"NoNewPrivs", status(na, na, "0\t0\t0\t0", "", "0"), target{keep: 1 << capNetAdmin}, true, "no_new_privs unset"},
	} {
		c, err := readCreds(tc.path)
		if err != nil {
			t.Fatal(err)
		}
		if got := c.differs(tc.t, tc.bounding); !strings.Contains(got, tc.want) || (tc.want == "") != (got == "") {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

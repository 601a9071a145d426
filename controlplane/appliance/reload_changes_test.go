package appliance

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"xlb/config"
)

// webOnly is the rig's file without dns: its rule, service and backend
// leave; b3 joins web.
var webOnly = func() string {
	text, _, _ := strings.Cut(ctlConfig, "[[backend_service]]\nname = \"dns\"")
	rules := ctlConfig[strings.Index(ctlConfig, "[[forwarding_rule]]"):]
	web, _, _ := strings.Cut(rules, "[[forwarding_rule]]\nname = \"dns-udp\"")
	text = strings.Replace(text, `{ name = "b2", ip = "10.0.1.2" }`, `{ name = "b2", ip = "10.0.1.2" }, { name = "b3", ip = "10.0.1.3" }`, 1)
	return text + web
}()

var webOnlyChanges = []string{
	"removed rule dns-udp: 203.0.113.10 UDP 53 -> dns",
	"removed service dns: UDP, MAGLEV, 1 backend",
	"removed backend dns/10.0.4.1: in pool-d",
	"added backend web/b3: 10.0.1.3 in pool-a",
}

// TestX2_ReloadReportsChanges: a reload returns what it applied, one line
// each (config.Diff against the running file), and last_reload has the
// same lines; a reload of the same file again is no change.
func TestX2_ReloadReportsChanges(t *testing.T) {
	f := newReloadRig(t)
	f.write(t, webOnly+reloadDataplane)
	changes, err := f.rl.reloadFileChanges(ReloadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := changes.Lines(); !slices.Equal(got, webOnlyChanges) {
		t.Errorf("changes:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(webOnlyChanges, "\n"))
	}
	if rep := f.rl.report(); rep.Success != 1 || !slices.Equal(rep.Last.Changes, webOnlyChanges) {
		t.Errorf("report %+v, last changes %q", rep, rep.Last.Changes)
	}
	if changes, err := f.rl.reloadFileChanges(ReloadOptions{}); err != nil || len(changes) != 0 {
		t.Errorf("the same file again: %v, %q; want no changes", err, changes.Lines())
	}
}

// TestX2_ReloadDryRun: a dry run answers the changes the reload would
// apply and applies nothing: no VIP map, resolver, checker or control
// plane call, the running configuration and the counters as they were; a
// dry run that a reload would refuse (a restart needed, no rules) says
// why and counts no failure; the reload then applies what the dry run
// said.
func TestX2_ReloadDryRun(t *testing.T) {
	f := newReloadRig(t)
	core, logs := observer.New(zapcore.DebugLevel)
	f.rl.log = zap.New(core)
	cur, gen := f.rl.cur, f.rig.CP.Snapshot().Gen
	f.write(t, webOnly+reloadDataplane)
	changes, err := f.rl.reloadFileChanges(ReloadOptions{DryRun: true, Path: f.file})
	if err != nil {
		t.Fatal(err)
	}
	if got := changes.Lines(); !slices.Equal(got, webOnlyChanges) {
		t.Errorf("dry run:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(webOnlyChanges, "\n"))
	}
	for what, text := range map[string]string{
		"restart":  webOnly + reloadDataplane + "ring_size = 4096\n",
		"no rules": reloadDataplane,
	} {
		f.write(t, text)
		if _, err := f.rl.reloadFileChanges(ReloadOptions{DryRun: true}); err == nil {
			t.Errorf("dry run of a file the reload refuses (%s): no error", what)
		}
	}
	f.write(t, reloadDataplane)
	if _, err := f.rl.reloadFileChanges(ReloadOptions{DryRun: true, AllowEmpty: true}); err != nil {
		t.Errorf("dry run with --allow-empty: %v", err)
	}
	if len(f.calls) != 0 || f.rl.cur != cur || f.rig.CP.Snapshot().Gen != gen {
		t.Errorf("a dry run applied something: calls %v, running file replaced %v, generation %d -> %d",
			f.calls, f.rl.cur != cur, gen, f.rig.CP.Snapshot().Gen)
	}
	if rep := f.rl.report(); rep.Success != 0 || rep.Failure != 0 || rep.Last != nil {
		t.Errorf("dry runs were counted: %+v", rep)
	}
	if logs.FilterLevelExact(zapcore.WarnLevel).Len() != 0 {
		t.Errorf("a dry run warned: %v", logs.All())
	}
	f.write(t, webOnly+reloadDataplane)
	applied, err := f.rl.reloadFileChanges(ReloadOptions{})
	if err != nil || !slices.Equal(applied.Lines(), webOnlyChanges) {
		t.Errorf("the reload after the dry run: %v, %q", err, applied.Lines())
	}
}

// TestX2_ReloadRefusesOtherFile: a reload asked for a file that is not the
// running one (xlb reload -c B while xlb runs A) is refused before
// anything is read, naming both files, and counts nothing; the running
// file by another path (a link) reloads; a file that does not exist is
// refused naming it.
func TestX2_ReloadRefusesOtherFile(t *testing.T) {
	f := newReloadRig(t)
	other := filepath.Join(t.TempDir(), "b.toml")
	if err := os.WriteFile(other, []byte(webOnly+reloadDataplane), 0o644); err != nil {
		t.Fatal(err)
	}
	f.write(t, webOnly+reloadDataplane)
	_, err := f.rl.reloadFileChanges(ReloadOptions{Path: other})
	var oe *OtherFileError
	if !errors.As(err, &oe) || !strings.Contains(err.Error(), "xlb runs "+f.file) || !strings.Contains(err.Error(), "(asked: "+other+")") {
		t.Fatalf("reload of another file: %v, want an OtherFileError naming %s and %s", err, f.file, other)
	}
	if _, err := f.rl.reloadFileChanges(ReloadOptions{Path: other, DryRun: true}); !errors.As(err, &oe) {
		t.Errorf("dry run of another file: %v, want OtherFileError", err)
	}
	missing := filepath.Join(t.TempDir(), "none.toml")
	if _, err := f.rl.reloadFileChanges(ReloadOptions{Path: missing}); err == nil || !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), missing) {
		t.Errorf("reload of a missing file: %v, want not found naming it", err)
	}
	if len(f.calls) != 0 {
		t.Errorf("a refused reload applied something: %v", f.calls)
	}
	if rep := f.rl.report(); rep.Success != 0 || rep.Failure != 0 {
		t.Errorf("refusals were counted: %+v", rep)
	}
	link := filepath.Join(t.TempDir(), "current.toml")
	if err := os.Symlink(f.file, link); err != nil {
		t.Fatal(err)
	}
	if _, err := f.rl.reloadFileChanges(ReloadOptions{Path: link}); err != nil {
		t.Errorf("reload of the running file through a link: %v", err)
	}
	if rep := f.rl.report(); rep.Success != 1 {
		t.Errorf("report %+v, want the reload through the link applied", rep)
	}
}

// TestX2_ReloadWarnsRemoved: a reload that removes a forwarding rule and
// a backend service logs one warning for each, with field rule or
// service; one that removes neither warns nothing.
func TestX2_ReloadWarnsRemoved(t *testing.T) {
	f := newReloadRig(t)
	core, logs := observer.New(zapcore.DebugLevel)
	f.rl.log = zap.New(core)
	f.write(t, webOnly+reloadDataplane)
	if err := f.rl.reloadFile(ReloadOptions{}); err != nil {
		t.Fatal(err)
	}
	warns := logs.FilterLevelExact(zapcore.WarnLevel).All()
	if len(warns) != 2 {
		t.Fatalf("warnings %v, want 2: the rule and the service", warns)
	}
	if m := warns[0].ContextMap(); m["rule"] != "dns-udp" || m["was"] != "203.0.113.10 UDP 53 -> dns" || m["file"] != f.file {
		t.Errorf("the removed rule's warning: %q %v", warns[0].Message, m)
	}
	if m := warns[1].ContextMap(); m["service"] != "dns" || m["file"] != f.file {
		t.Errorf("the removed service's warning: %q %v", warns[1].Message, m)
	}
	logs.TakeAll()
	f.write(t, strings.Replace(webOnly, `, { name = "b3", ip = "10.0.1.3" }`, "", 1)+reloadDataplane)
	if err := f.rl.reloadFile(ReloadOptions{}); err != nil {
		t.Fatal(err)
	}
	if w := logs.FilterLevelExact(zapcore.WarnLevel).All(); len(w) != 0 {
		t.Errorf("a reload that removes only a backend warned: %v", w)
	}
}

// TestX2_ReloadWaitsForSettledFile: the reload reads the file only once
// two stats around a read agree (config.LoadSettled): a file whose stat
// keeps changing is read the bounded number of times, then refused with
// the advice to rename it into place, counted as a failed reload, the
// running configuration kept; one that settles applies.
func TestX2_ReloadWaitsForSettledFile(t *testing.T) {
	f := newReloadRig(t)
	f.write(t, webOnly+reloadDataplane)
	real, err := os.Stat(f.file)
	if err != nil {
		t.Fatal(err)
	}
	stats, sleeps := 0, 0
	changing := true
	f.rl.settle = config.Settle{
		Stat: func(string) (fs.FileInfo, error) {
			stats++
			if changing || stats < 4 {
				return growing{real, int64(stats)}, nil
			}
			return real, nil
		},
		Sleep: func(time.Duration) { sleeps++ },
	}
	cur := f.rl.cur
	err = f.rl.reloadFile(ReloadOptions{})
	if !errors.Is(err, config.ErrUnsettled) || !strings.Contains(err.Error(), "rename it into place") {
		t.Fatalf("reload of a file being written: %v, want ErrUnsettled with the advice", err)
	}
	if stats != 2*config.DefaultSettleReads || sleeps != config.DefaultSettleReads-1 {
		t.Errorf("%d stats, %d pauses; want %d reads", stats, sleeps, config.DefaultSettleReads)
	}
	if rep := f.rl.report(); rep.Failure != 1 || f.rl.cur != cur || len(f.calls) != 0 ||
		!strings.Contains(strings.Join(rep.Last.Errors, " "), "rename it into place") {
		t.Errorf("report %+v last %+v, calls %v: want one failure with the advice, nothing applied", rep, rep.Last, f.calls)
	}
	changing, stats, sleeps = false, 0, 0
	if err := f.rl.reloadFile(ReloadOptions{}); err != nil {
		t.Fatalf("reload of a file that settles: %v", err)
	}
	if sleeps != 2 {
		t.Errorf("%d pauses, want 2 (the stats agree from the third read on)", sleeps)
	}
}

// growing is a stat of a file n bytes longer than fi.
type growing struct {
	fs.FileInfo
	n int64
}

func (g growing) Size() int64 { return g.FileInfo.Size() + g.n }

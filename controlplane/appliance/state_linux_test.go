package appliance

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	"golang.org/x/sys/unix"

	"xlb/config"
	"xlb/conntrack"
	"xlb/controlplane"
	"xlb/dataplane"
	"xlb/internal/nettest"
	"xlb/internal/nsx"
	"xlb/internal/safedir"
)

// TestKeeper_SaveLoad: the state saved for a table loads back for that
// table only; a missing, foreign or out-of-range state is an error (the caller then
// empties the table rather than resolve its refs wrongly).
func TestKeeper_SaveLoad(t *testing.T) {
	dir := t.TempDir()
	k := &keeper{dir: dir, tableID: 0xabc, log: zap.NewNop()}
	if _, err := k.load(); err == nil {
		t.Fatal("load without a state file succeeded")
	}
	st := controlplane.State{Format: controlplane.StateFormat, Gens: []uint32{0, 3},
		Backends: []controlplane.BackendRecord{{Service: "web", IP: netip.MustParseAddr("10.0.0.1"), Slot: 1, Gen: 3, Healthy: true, Weight: 7}}}
	k.save(st)
	got, err := k.load()
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	if got.Table != 0xabc || len(got.Backends) != 1 || got.Backends[0] != st.Backends[0] {
		t.Fatalf("loaded %+v, want %+v for table abc", got, st)
	}
	if _, err := os.Stat(filepath.Join(dir, stateFile+".new")); !os.IsNotExist(err) {
		t.Fatalf("temporary file left behind: %v", err)
	}
	other := &keeper{dir: dir, tableID: 0xdef, log: zap.NewNop()}
	if _, err := other.load(); err == nil {
		t.Fatal("the state of table abc loaded for table def")
	}
	if err := os.WriteFile(filepath.Join(dir, stateFile), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := k.load(); err == nil {
		t.Fatal("a truncated state loaded")
	}
	// A generation beyond what a ref carries is refused, not truncated.
	big := st
	big.Gens = []uint32{0, dataplane.MaxGeneration + 1}
	big.Backends = []controlplane.BackendRecord{st.Backends[0]}
	big.Backends[0].Gen = dataplane.MaxGeneration + 1
	k.save(big)
	if got, err := k.load(); err == nil {
		t.Fatalf("a state with generation %d loaded: %+v", dataplane.MaxGeneration+1, got)
	}
}

// stateStack is a stack with only what openTable reads: a state_dir and
// a small table, logging to an observer.
func stateStack(dir string) (*stack, *observer.ObservedLogs) {
	core, logs := observer.New(zapcore.DebugLevel)
	cfg := &config.Config{}
	cfg.Dataplane.StateDir, cfg.Dataplane.ConntrackCapacity = dir, 1024
	return &stack{cfg: cfg, log: zap.New(core)}, logs
}

// twoBackends is a state of two backends of one service, in slots 0 and 1.
func twoBackends() controlplane.State {
	return controlplane.State{Format: controlplane.StateFormat, NextService: 2,
		Services: []controlplane.ServiceID{{Name: "web", ID: 1}}, Gens: []uint32{0, 0},
		Backends: []controlplane.BackendRecord{
			{Service: "web", IP: netip.MustParseAddr("10.0.0.1"), Slot: 0, Healthy: true, Weight: 1},
			{Service: "web", IP: netip.MustParseAddr("10.0.0.2"), Slot: 1, Healthy: true, Weight: 1},
		}}
}

// TestOpenTable_UnsafeStateDirRefused: a state_dir that is writable by
// group or others, a link, owned by another uid, or under a parent others
// may write stops the start with one error naming it and why, and nothing
// is created in it. (Before, each was used as it was.)
func TestOpenTable_UnsafeStateDirRefused(t *testing.T) {
	cases := map[string]struct {
		make func(t *testing.T, base string) string
		says string
	}{
		"group-writable": {func(t *testing.T, base string) string {
			return stateMkdir(t, filepath.Join(base, "sd"), 0o770)
		}, "writable by group or others (mode drwxrwx---)"},
		"a link": {func(t *testing.T, base string) string {
			good := stateMkdir(t, filepath.Join(base, "real"), 0o700)
			stateMust(t, os.Symlink(good, filepath.Join(base, "sd")))
			return filepath.Join(base, "sd")
		}, "is a symbolic link"},
		"parent others may write": {func(t *testing.T, base string) string {
			open := stateMkdir(t, filepath.Join(base, "open"), 0o777)
			return stateMkdir(t, filepath.Join(open, "sd"), 0o700)
		}, "above it, is writable by group or others and not sticky"},
		// Not made: the directory would be another user's to move.
		"missing, under a parent others may write": {func(t *testing.T, base string) string {
			return filepath.Join(stateMkdir(t, filepath.Join(base, "open"), 0o777), "sd")
		}, "above it, is writable by group or others and not sticky"},
	}
	if os.Geteuid() == 0 {
		cases["owned by 65534"] = struct {
			make func(t *testing.T, base string) string
			says string
		}{func(t *testing.T, base string) string {
			d := stateMkdir(t, filepath.Join(base, "sd"), 0o700)
			stateMust(t, os.Chown(d, 65534, 65534))
			return d
		}, "is owned by uid 65534, not root or uid 0"}
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			dir := c.make(t, t.TempDir())
			_, missing := os.Lstat(dir)
			s, _ := stateStack(dir)
			ct, _, _, err := s.openTable()
			if _, ok := errors.AsType[errStateDir](err); !ok || ct != nil {
				t.Fatalf("openTable: table %v, error %v; want no table and errStateDir", ct != nil, err)
			}
			if msg := err.Error(); !strings.HasPrefix(msg, "refusing dataplane.state_dir: ") || !strings.Contains(msg, c.says) {
				t.Errorf("error %q does not say %q", msg, c.says)
			}
			if ents, _ := os.ReadDir(dir); len(ents) != 0 {
				t.Errorf("%d files created in the refused directory", len(ents))
			}
			if _, err := os.Lstat(dir); missing != nil && err == nil {
				t.Error("the refused directory was made")
			}
		})
	}
}

func stateMkdir(t *testing.T, p string, mode os.FileMode) string {
	t.Helper()
	stateMust(t, os.Mkdir(p, 0o700))
	stateMust(t, os.Chmod(p, mode))
	return p
}

func stateMust(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestOpenTable_PlantedLinks: links planted in state_dir as conntrack.new
// and controlplane.json.new, pointing at files outside, leave those files
// as they were; conntrack and controlplane.json are regular 0600 files of
// the process's uid; a controlplane.json that is a link to a good state
// elsewhere is refused. (Before, the first two were truncated and
// overwritten, the last loaded.)
func TestOpenTable_PlantedLinks(t *testing.T) {
	out := t.TempDir()
	dir := stateMkdir(t, filepath.Join(t.TempDir(), "sd"), 0o700)
	targets := map[string]string{}
	for _, name := range []string{tableFile + ".new", stateFile + ".new"} {
		p := filepath.Join(out, name+".target")
		stateMust(t, os.WriteFile(p, []byte("root's own"), 0o644))
		stateMust(t, os.Symlink(p, filepath.Join(dir, name)))
		targets[name] = p
	}
	s, logs := stateStack(dir)
	ct, _, k, err := s.openTable()
	if err != nil || k == nil {
		t.Fatalf("openTable: %v (keeper %v)", err, k != nil)
	}
	_ = ct
	k.save(twoBackends())
	for name, p := range targets {
		if b, _ := os.ReadFile(p); string(b) != "root's own" {
			t.Errorf("the target of %s was written through the link: %.40q", name, b)
		}
	}
	for _, name := range []string{tableFile, stateFile} {
		fi, err := os.Lstat(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if uid := fi.Sys().(*syscall.Stat_t).Uid; !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o600 || int(uid) != os.Geteuid() {
			t.Errorf("%s is %s of uid %d, want a regular 0600 file of uid %d", name, fi.Mode(), uid, os.Geteuid())
		}
	}
	if _, err := k.load(); err != nil {
		t.Fatalf("the state just saved: %v (log %v)", err, logs.All())
	}
	elsewhere := filepath.Join(out, "state")
	stateMust(t, os.Rename(filepath.Join(dir, stateFile), elsewhere))
	stateMust(t, os.Symlink(elsewhere, filepath.Join(dir, stateFile)))
	if _, err := k.load(); !errors.Is(err, safedir.ErrUnsafe) {
		t.Errorf("a controlplane.json that is a link: %v, want refused as unsafe", err)
	}
}

// TestKeeper_TamperedStateRefused: the saved state with two backends'
// slots swapped (valid JSON, a consistent state) is refused by its
// checksum: the table it goes with is then emptied, as for any state
// refused. (Before, it was restored, and flows went to the other
// backend.)
func TestKeeper_TamperedStateRefused(t *testing.T) {
	dir := t.TempDir()
	k := &keeper{dir: dir, tableID: 0xabc, log: zap.NewNop()}
	k.save(twoBackends())
	if _, err := k.load(); err != nil {
		t.Fatalf("load: %v", err)
	}
	path := filepath.Join(dir, stateFile)
	b, err := os.ReadFile(path)
	stateMust(t, err)
	swapped := strings.NewReplacer(`"slot":0`, `"slot":1`, `"slot":1`, `"slot":0`).Replace(string(b))
	if swapped == string(b) {
		t.Fatalf("no slots to swap in %s", b)
	}
	stateMust(t, os.WriteFile(path, []byte(swapped), 0o600))
	if st, err := k.load(); !errors.Is(err, controlplane.ErrStateChecksum) {
		t.Fatalf("the state with slots swapped: %+v, %v; want refused by its checksum", st, err)
	}
}

// TestKeeper_FullFileSystem: on a full tmpfs (a tiny one, mounted in a
// mount namespace of the test's thread only), a save is logged as an
// error, never as saved, and the teardown's last word says it was not
// saved; once there is room, the next save says so and the last word is
// "saved".
func TestKeeper_FullFileSystem(t *testing.T) {
	nettest.RequireRoot(t)
	dir := t.TempDir()
	err := nsx.OnThread(func() error {
		if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
			return fmt.Errorf("unshare: %w", err)
		}
		if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
			return fmt.Errorf("making / private: %w", err)
		}
		if err := unix.Mount("xlbtest", dir, "tmpfs", 0, "size=64k,mode=0700"); err != nil {
			return fmt.Errorf("mounting tmpfs: %w", err)
		}
		fill, err := os.Create(filepath.Join(dir, "fill"))
		if err != nil {
			return err
		}
		for {
			if _, err := fill.Write(make([]byte, 4096)); err != nil {
				if !errors.Is(err, unix.ENOSPC) {
					return err
				}
				break
			}
		}
		fill.Close()
		core, logs := observer.New(zapcore.DebugLevel)
		log := zap.New(core)
		k := &keeper{dir: dir, tableID: 0xabc, log: log}
		k.save(twoBackends())
		k.lastWord(log)
		if n := logs.FilterMessage("control plane state saved").Len(); n != 0 {
			t.Errorf("a failed save logged as saved (%d lines)", n)
		}
		failed := logs.FilterLevelExact(zapcore.ErrorLevel).All()
		if len(failed) != 2 || !strings.HasPrefix(failed[0].Message, "control plane state not saved") ||
			!strings.HasPrefix(failed[1].Message, "control plane state not saved at the end") {
			t.Errorf("errors logged: %v, want the save's and the last word's", failed)
		} else if e, _ := failed[0].ContextMap()["error"].(string); !strings.Contains(e, "no space left") {
			t.Errorf("the failed save's error %q does not say ENOSPC", e)
		}
		if _, err := os.Lstat(filepath.Join(dir, stateFile+".new")); !os.IsNotExist(err) {
			t.Errorf("a temporary file left on the full file system: %v", err)
		}
		// Room again: the next save says so, and the last word is saved.
		if err := os.Remove(filepath.Join(dir, "fill")); err != nil {
			return err
		}
		k.save(twoBackends())
		k.lastWord(log)
		if logs.FilterMessage("control plane state saved again").Len() != 1 || logs.FilterMessage("control plane state saved").Len() != 1 {
			t.Errorf("after room was made: %v", logs.All())
		}
		if _, err := k.load(); err != nil {
			t.Errorf("the state saved once there was room: %v", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestDropUnknown: entries of a kept table that name a service or a
// backend (slot and generation) the state does not have are deleted;
// those that name one of its backends stay.
func TestDropUnknown(t *testing.T) {
	ct, err := conntrack.New(1024)
	stateMust(t, err)
	st := twoBackends()
	st.Gens = []uint32{3, 0}
	st.Backends[0].Gen = 3
	key := func(svc uint16, port uint16) conntrack.Key {
		k := conntrack.Key{Kind: conntrack.Kind5T, Proto: 6, SrcPort: port, DstPort: 80, Service: svc}
		k.Src[15] = 1
		return k
	}
	entries := []struct {
		k    conntrack.Key
		ref  dataplane.BackendRef
		keep bool
	}{
		{key(1, 1), dataplane.MakeRef(0, 3), true},
		{key(1, 2), dataplane.MakeRef(1, 0), true},
		{key(1, 3), dataplane.MakeRef(0, 2), false}, // an older generation of slot 0
		{key(1, 4), dataplane.MakeRef(7, 0), false}, // a slot the state has not
		{key(9, 5), dataplane.MakeRef(0, 3), false}, // a service the state has not
	}
	for _, e := range entries {
		ct.Upsert(&e.k, conntrack.Value{Backend: uint32(e.ref), IdleSec: 60}, 1000)
	}
	if n := dropUnknown(ct, &st, 1000); n != 3 {
		t.Errorf("dropUnknown: %d, want 3", n)
	}
	for i, e := range entries {
		if _, ok := ct.Lookup(&e.k, 1000); ok != e.keep {
			t.Errorf("entry %d: kept %v, want %v", i, ok, e.keep)
		}
	}
}

// TestOpenTable_WarnsOffMemory: a state_dir on a file system that is not
// in memory (an overlay, here) is used with one warning naming it; one on
// tmpfs gets none. Both are mounted in the test thread's own mount
// namespace.
func TestOpenTable_WarnsOffMemory(t *testing.T) {
	nettest.RequireRoot(t)
	base := t.TempDir()
	const warning = "state_dir is not on a memory file system (tmpfs): every table write may reach the disk, and a reboot leaves a table that is refused"
	err := nsx.OnThread(func() error {
		if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
			return fmt.Errorf("unshare: %w", err)
		}
		if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
			return fmt.Errorf("making / private: %w", err)
		}
		if err := unix.Mount("xlbtest", base, "tmpfs", 0, "mode=0700"); err != nil {
			return fmt.Errorf("mounting tmpfs: %w", err)
		}
		for _, d := range []string{"lower", "upper", "work", "merged"} {
			if err := os.Mkdir(filepath.Join(base, d), 0o700); err != nil {
				return err
			}
		}
		merged := filepath.Join(base, "merged")
		opts := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s", filepath.Join(base, "lower"), filepath.Join(base, "upper"), filepath.Join(base, "work"))
		if err := unix.Mount("overlay", merged, "overlay", 0, opts); err != nil {
			return fmt.Errorf("mounting an overlay: %w", err)
		}
		for _, c := range []struct {
			dir  string
			warn int
		}{{filepath.Join(merged, "sd"), 1}, {filepath.Join(base, "sd"), 0}} {
			s, logs := stateStack(c.dir)
			if _, _, _, err := s.openTable(); err != nil {
				return fmt.Errorf("openTable(%s): %w", c.dir, err)
			}
			if got := logs.FilterMessage(warning).Len(); got != c.warn {
				t.Errorf("%s: %d warnings that it is not in memory, want %d (log %v)", c.dir, got, c.warn, logs.All())
			}
		}
		return nil
	})
	if errors.Is(err, unix.ENODEV) {
		t.Skip("the kernel has no overlayfs, the file system this test mounts:", err)
	}
	if err != nil {
		t.Fatal(err)
	}
}

// TestOpenTable_StateDirOfTheRunAsUser: started as root with
// dataplane.user, a state_dir xlb makes is that user's (it saves there
// once switched); one root already has is refused with a line saying
// whose it must be, and a state_dir of that user is used, its state file
// of that user loaded.
func TestOpenTable_StateDirOfTheRunAsUser(t *testing.T) {
	nettest.RequireRootTo(t, "chown a directory to another user")
	base := t.TempDir()
	made := filepath.Join(base, "made")
	s, _ := stateStack(made)
	s.cfg.Dataplane.User = "65534"
	ct, _, k, err := s.openTable()
	if err != nil || ct == nil || k == nil {
		t.Fatalf("openTable of a new state_dir as uid 65534: table %v keeper %v, %v", ct != nil, k != nil, err)
	}
	if fi, err := os.Lstat(made); err != nil || fi.Sys().(*syscall.Stat_t).Uid != 65534 {
		t.Fatalf("state_dir made for uid 65534: %v, %v", fi, err)
	}

	roots := stateMkdir(t, filepath.Join(base, "roots"), 0o700)
	s, _ = stateStack(roots)
	s.cfg.Dataplane.User = "65534"
	ct, _, _, err = s.openTable()
	if _, ok := errors.AsType[errStateDir](err); !ok || ct != nil {
		t.Fatalf("openTable of root's state_dir for uid 65534: table %v, %v; want errStateDir", ct != nil, err)
	}
	if msg := err.Error(); !strings.Contains(msg, "belongs to uid 0 but xlb runs as 65534") || !strings.Contains(msg, "chown it") {
		t.Errorf("error %q does not say whose it must be", msg)
	}
	// Without the switch, root's directory is root's to use.
	s.cfg.Dataplane.User = ""
	if ct, _, _, err := s.openTable(); err != nil || ct == nil {
		t.Fatalf("openTable of root's state_dir as root: %v", err)
	}
}

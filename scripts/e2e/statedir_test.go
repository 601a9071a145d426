package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"xlb/scripts/testbed"
)

// TestStateDir_Hostile: xlb run, as root, trusts nothing in state_dir that
// another user could have put there. A state_dir writable by its group
// makes it exit 1 with one line naming the directory and why, before it
// attaches anything. Made 0700, with links planted as conntrack.new and
// controlplane.json.new pointing at root-owned files outside, xlb starts
// (a second one on the same directory meanwhile exits 1 with one line
// naming it and the first one's pid), tracks flows and stops, leaving
// those files as they were and its own files regular, 0600 and root's. Last, controlplane.json edited with two
// backends' slots swapped (valid JSON, a consistent state) is refused by
// its checksum at the next start: the table kept beside it is emptied.
func TestStateDir_Hostile(t *testing.T) {
	t.Parallel()
	b := upBed(t, testbed.Options{Prefix: "e2esd"})
	dir := filepath.Join(t.TempDir(), "state")
	must(t, os.Mkdir(dir, 0o700))
	must(t, os.Chmod(dir, 0o770))
	cfg := writeConfig(t, b)
	keepIn(t, cfg, dir)

	// Refused: exit 1, one line, nothing attached or written.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, "ip", "netns", "exec", b.LB.NS, xlbBin, "run", "-c", cfg)
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Errorf("xlb on a group-writable state_dir: %v, want exit status 1", err)
	}
	want := fmt.Sprintf("refusing dataplane.state_dir: not safe for xlb's files: %s is writable by group or others (mode drwxrwx---)", dir)
	if n := strings.Count(out.String(), want); n != 1 {
		t.Errorf("xlb's output has %d lines %q, want 1:\n%s", n, want, out.String())
	}
	if xdpAttached(t, b) {
		t.Error("an XDP program is attached after xlb refused its state_dir")
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("%d files made in the refused state_dir", len(ents))
	}

	// Links planted where xlb makes its files.
	must(t, os.Chmod(dir, 0o700))
	outside := t.TempDir()
	targets := map[string]string{}
	for _, name := range []string{"conntrack.new", "controlplane.json.new"} {
		p := filepath.Join(outside, name+".target")
		must(t, os.WriteFile(p, []byte("root's own"), 0o644))
		must(t, os.Symlink(p, filepath.Join(dir, name)))
		targets[name] = p
	}
	p := startXLB(t, b, cfg)
	waitStatus(t, b, "healthy backends", allHealthy)

	// A second xlb on the same state_dir: exit 1, one line naming the
	// directory and the first one's pid (ip netns exec execs: xlb's own).
	out.Reset()
	second := exec.CommandContext(ctx, "ip", "netns", "exec", b.LB.NS, xlbBin, "run", "-c", cfg)
	second.Stdout, second.Stderr = &out, &out
	if err := second.Run(); !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Errorf("a second xlb on the same state_dir: %v, want exit status 1", err)
	}
	inUse := fmt.Sprintf("dataplane.state_dir %s is in use by xlb pid %d: give each instance its own state_dir", dir, p.cmd.Process.Pid)
	if n := strings.Count(out.String(), inUse); n != 1 {
		t.Errorf("the second xlb's output has %d lines %q, want 1:\n%s", n, inUse, out.String())
	}

	web := netip.AddrPortFrom(testbed.VIP4, testbed.HTTPPort)
	if n := len(probe(t, b, "tcp", web, 30)); n < 2 {
		t.Fatalf("30 connections reached %d backends", n)
	}
	p.stop()
	if !logHas(p, `"msg":"control plane state saved"`) || logHas(p, "control plane state not saved") {
		t.Error("xlb did not save its state at the end (its log says otherwise)")
	}
	for name, target := range targets {
		if got, err := os.ReadFile(target); err != nil || string(got) != "root's own" {
			t.Errorf("the target of the link %s was written: %.40q, %v", name, got, err)
		}
	}
	for _, name := range []string{"conntrack", "controlplane.json"} {
		fi, err := os.Lstat(filepath.Join(dir, name))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		st := fi.Sys().(*syscall.Stat_t)
		if !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o600 || st.Uid != 0 || st.Gid != 0 {
			t.Errorf("%s is %s of %d:%d, want a regular 0600 file of root", name, fi.Mode(), st.Uid, st.Gid)
		}
	}

	// Two backends' slots swapped: refused, the table emptied.
	path := filepath.Join(dir, "controlplane.json")
	must(t, os.WriteFile(path, swapSlots(t, path), 0o600))
	p = startXLB(t, b, cfg)
	if !logHas(p, `"msg":"conntrack table kept but not the control plane's state: starting with an empty table"`, "checksum does not match") {
		t.Errorf("controlplane.json with two slots swapped: no log line saying it was refused by its checksum")
	}
	if logHas(p, `"msg":"backends restored with their refs, health and weights"`) {
		t.Error("backends were restored from the edited state")
	}
}

// swapSlots returns the state file at path with its first two backends'
// slots (and generations) swapped: a state that is consistent, in a file
// that is valid JSON, under the sum of the original.
func swapSlots(t *testing.T, path string) []byte {
	t.Helper()
	raw, err := os.ReadFile(path)
	must(t, err)
	var file map[string]json.RawMessage
	must(t, json.Unmarshal(raw, &file))
	dec := json.NewDecoder(bytes.NewReader(file["state"]))
	dec.UseNumber() // the table ID is beyond a float64's integers
	var st map[string]any
	must(t, dec.Decode(&st))
	bs, _ := st["backends"].([]any)
	if len(bs) < 2 {
		t.Fatalf("the state has %d backends, want two to swap", len(bs))
	}
	b0, b1 := bs[0].(map[string]any), bs[1].(map[string]any)
	for _, f := range []string{"slot", "generation"} {
		b0[f], b1[f] = b1[f], b0[f]
	}
	state, err := json.Marshal(st)
	must(t, err)
	file["state"] = state
	out, err := json.Marshal(file)
	must(t, err)
	return out
}

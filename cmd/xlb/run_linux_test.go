package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"xlb/internal/nettest"
)

// runConfig is the CLI tests' file with a [dataplane] on interface
// ifname, keeping no table and with an admin socket in dir (not the
// host's /run/xlb, where another xlb may answer), written into dir.
func runConfig(tb testing.TB, dir, ifname string) string {
	tb.Helper()
	path := filepath.Join(dir, "xlb.toml")
	text := readFile(tb, cli("xlb.toml")) + "\n[dataplane]\ninterface = \"" + ifname + "\"\nstate_dir = \"\"\n" +
		"\n[admin]\nsocket = \"" + filepath.Join(dir, "admin.sock") + "\"\n"
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		tb.Fatal(err)
	}
	return path
}

// TestRun_NotRoot: without root, one line saying so, exit 1, nothing on
// stdout.
func TestRun_NotRoot(t *testing.T) {
	if xlbBin == "" {
		t.Skip("no go command to build the binary with")
	}
	// A directory an unprivileged user can read: the binary and the file.
	dir, err := os.MkdirTemp("", "xrt-nonroot-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "xlb")
	data, err := os.ReadFile(xlbBin)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "run", "-c", runConfig(t, dir, "lo"))
	if os.Geteuid() == 0 {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("xlb run as uid 65534: %v, want exit 1\nstderr: %s", err, stderr.String())
	}
	wantOneLine(t, stderr.String(), "xlb run: needs root")
	if stdout.Len() != 0 {
		t.Errorf("stdout %q, want nothing", stdout.String())
	}
}

// TestRun_MissingInterface: an interface that does not exist gives one
// line, "xlb run: " and the appliance's words naming it, exit 1.
// (Privileges are checked first, so as root.)
func TestRun_MissingInterface(t *testing.T) {
	nettest.RequireRoot(t)
	o := xlbExec(t, "run", "-c", runConfig(t, t.TempDir(), "xrt-missing0"))
	o.wantCode(t, 1)
	wantOneLine(t, o.stderr, `xlb run: interface "xrt-missing0"`)
	if in := xlb("run", "-c", runConfig(t, t.TempDir(), "xrt-missing0")); in.code != 1 || !strings.Contains(in.stderr, "does not exist") {
		t.Errorf("in-process run: %+v", in)
	}
}

// TestRun_UserRefused: a dataplane.user the user database lacks, or one
// with --keep-privileges (which keeps what the switch gives up), is one
// line at start, exit 1, before anything is attached (the interface does
// not exist either: the user is checked first, after privileges).
func TestRun_UserRefused(t *testing.T) {
	nettest.RequireRoot(t)
	withUser := func(user string) string {
		path := runConfig(t, t.TempDir(), "xrt-missing1")
		text := strings.Replace(readFile(t, path), "[dataplane]\n", "[dataplane]\nuser = \""+user+"\"\n", 1)
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	o := xlbExec(t, "run", "-c", withUser("no-such-xlb-user"))
	o.wantCode(t, 1)
	wantOneLine(t, o.stderr, `xlb run: dataplane.user "no-such-xlb-user"`)
	o = xlbExec(t, "run", "--keep-privileges", "-c", withUser("nobody"))
	o.wantCode(t, 1)
	wantOneLine(t, o.stderr, `xlb run: dataplane.user "nobody" gives up what --keep-privileges keeps: use one or the other`)
}

func wantOneLine(t *testing.T, stderr, want string) {
	t.Helper()
	lines := strings.Split(strings.TrimRight(stderr, "\n"), "\n")
	if len(lines) != 1 || !strings.Contains(lines[0], want) {
		t.Errorf("stderr %q: want one line containing %q", stderr, want)
	}
}

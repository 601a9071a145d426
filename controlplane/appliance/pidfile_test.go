package appliance

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPidFile: what WritePidFile writes ReadPidFile reads back, remove
// deletes it; a file without a process id is refused; SignalReload
// refuses a process that is not `xlb run` (this test binary) and one that
// does not exist, without signalling.
func TestPidFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "xlb.pid")
	remove, err := WritePidFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if pid, err := ReadPidFile(path); err != nil || pid != os.Getpid() {
		t.Errorf("read back %d, %v; want %d", pid, err, os.Getpid())
	}
	remove()
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("pid file still there after remove: %v", err)
	}
	if err := os.WriteFile(path, []byte("nope\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadPidFile(path); err == nil || !strings.Contains(err.Error(), "holds no process id") {
		t.Errorf("garbage pid file: %v", err)
	}
	if _, err := os.Stat("/proc/self"); err != nil {
		t.Skip("no /proc: SignalReload trusts the pid")
	}
	if err := SignalReload(os.Getpid()); err == nil || !strings.Contains(err.Error(), "is not xlb run") {
		t.Errorf("SignalReload of this test: %v, want a refusal", err)
	}
	if err := SignalReload(1 << 30); err == nil || !strings.Contains(err.Error(), "no process") {
		t.Errorf("SignalReload of no process: %v, want a refusal", err)
	}
}

// TestRunFileArg: the -c FILE of an xlb run command line, in each form
// the flag package takes; none before "run", after "--", or without -c.
func TestRunFileArg(t *testing.T) {
	for _, tc := range []struct {
		argv []string
		want string
	}{
		{[]string{"xlb", "run", "-c", "/etc/xlb/xlb.toml"}, "/etc/xlb/xlb.toml"},
		{[]string{"/usr/local/bin/xlb", "run", "--log-level", "debug", "--c", "a.toml", "--pidfile", "/run/xlb.pid"}, "a.toml"},
		{[]string{"xlb", "run", "-c=b.toml"}, "b.toml"},
		{[]string{"xlb", "run", "--c=c.toml"}, "c.toml"},
		{[]string{"xlb", "run", "--pidfile", "p", "-c"}, ""},
		{[]string{"xlb", "-c", "x.toml", "run"}, ""},
		{[]string{"xlb", "run", "--", "-c", "x.toml"}, ""},
		{[]string{"xlb", "run", "--log-format", "console"}, ""},
		{[]string{"run", "-c", "x.toml"}, ""},
	} {
		if got := runFileArg(tc.argv); got != tc.want {
			t.Errorf("%q: %q, want %q", tc.argv, got, tc.want)
		}
	}
}

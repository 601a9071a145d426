package main

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"xlb/config"
)

// TestInstall runs `make install-check`: make install into a temporary
// DESTDIR (another PREFIX and SYSCONFDIR), the binary naming this
// checkout's commit, the example configuration valid, the unit's paths
// following PREFIX and SYSCONFDIR, an existing configuration kept.
func TestInstall(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("no make here: the install target cannot run")
	}
	if xlbBin == "" {
		t.Skip("no go command to build with")
	}
	cmd := exec.Command("make", "--no-print-directory", "install-check")
	cmd.Dir = moduleRoot(t)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("make install-check: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "install-check: ok") {
		t.Errorf("make install-check said: %s", out)
	}
}

// TestUnitFile: the systemd unit is Type=notify with a watchdog, reloads
// with `xlb reload --pid $MAINPID`, runs as the user xlb with the
// capabilities it is bounded to (TestRun_DropsPrivilegesEveryBuild starts
// xlb with them), /run/xlb its own, and every Exec line names a real xlb
// command with flags that command has.
func TestUnitFile(t *testing.T) {
	f, err := os.Open(filepath.Join(moduleRoot(t), "packaging", "xlb.service"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	keys := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if k, v, ok := strings.Cut(line, "="); ok && !strings.HasPrefix(line, "#") {
			keys[k] = v
		}
	}
	for k, want := range map[string]string{"Type": "notify", "NotifyAccess": "main", "WatchdogSec": "10s", "Restart": "on-failure",
		"LimitMEMLOCK": "infinity", "ExecReload": "/usr/local/bin/xlb reload -c /etc/xlb/xlb.toml --pid $MAINPID"} {
		if keys[k] != want {
			t.Errorf("%s=%q, want %q", k, keys[k], want)
		}
	}
	// Least privilege: never root; started with the capabilities it
	// bounds itself to; /run/xlb the user's and kept across restarts; the
	// example configuration names the same user (dataplane.user).
	if keys["User"] != "xlb" || keys["Group"] != "xlb" {
		t.Errorf("User=%q Group=%q, want xlb", keys["User"], keys["Group"])
	}
	if amb := keys["AmbientCapabilities"]; amb == "" || amb != keys["CapabilityBoundingSet"] || strings.Contains(amb, "CAP_SYS_ADMIN") {
		t.Errorf("AmbientCapabilities=%q CapabilityBoundingSet=%q: want the same list, without CAP_SYS_ADMIN", amb, keys["CapabilityBoundingSet"])
	}
	if keys["RuntimeDirectory"] != "xlb" || keys["RuntimeDirectoryMode"] != "0700" || keys["RuntimeDirectoryPreserve"] != "yes" {
		t.Errorf("RuntimeDirectory=%q RuntimeDirectoryMode=%q RuntimeDirectoryPreserve=%q, want xlb, 0700, yes",
			keys["RuntimeDirectory"], keys["RuntimeDirectoryMode"], keys["RuntimeDirectoryPreserve"])
	}
	example, err := config.Load(filepath.Join(moduleRoot(t), "testdata", "config", "example.toml"))
	if err != nil {
		t.Fatal(err)
	}
	if example.Dataplane.User != keys["User"] || example.Dataplane.StateDir != "/run/"+keys["RuntimeDirectory"] {
		t.Errorf("the example's dataplane.user %q, state_dir %q; want the unit's user %q and /run/%s",
			example.Dataplane.User, example.Dataplane.StateDir, keys["User"], keys["RuntimeDirectory"])
	}
	for _, k := range []string{"ExecStartPre", "ExecStart", "ExecReload"} {
		args := strings.Fields(keys[k])
		if len(args) < 2 || args[0] != "/usr/local/bin/xlb" {
			t.Errorf("%s=%q: want /usr/local/bin/xlb CMD ...", k, keys[k])
			continue
		}
		help := xlb("help", args[1])
		if help.code != 0 {
			t.Errorf("%s: xlb help %s: exit %d", k, args[1], help.code)
			continue
		}
		for _, a := range args[2:] {
			if !strings.HasPrefix(a, "-") {
				continue
			}
			name := strings.TrimLeft(a, "-")
			if !strings.Contains(help.stdout, "  -"+name+" ") && !strings.Contains(help.stdout, "  -"+name+"\n") {
				t.Errorf("%s: xlb %s has no flag %s", k, args[1], a)
			}
		}
	}
}

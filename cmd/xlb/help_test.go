package main

import (
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
)

// TestHelp_PerCommand: `xlb help CMD` and `xlb CMD -h` print the same
// text on stdout, exit 0: the command's synopsis and each of its flags
// with its default.
func TestHelp_PerCommand(t *testing.T) {
	for _, tc := range []struct {
		cmd     string
		want    []string
		notWant []string
	}{
		{"check", []string{"usage: xlb check -c FILE", "  -c string"}, nil},
		{"run", []string{"usage: xlb run -c FILE", "-log-format string", `(default "json")`, "-log-level string", `(default "info")`, "-pidfile", "-keep-privileges"}, nil},
		{"explain", []string{"usage: xlb explain", "-dport uint", "-proto string", `(default "tcp")`, "-frag string", `(default "none")`}, nil},
		{"sim", []string{"usage: xlb sim", "-summary"}, nil},
		{"reload", []string{"usage: xlb reload -c FILE [--socket PATH] [--allow-empty] [--dry-run]", "  -c string", "-socket string",
			"whose default is /run/xlb/admin.sock", "-allow-empty", "-dry-run", "-pidfile string", "-pid int"}, nil},
		{"drain", []string{"usage: xlb drain", "SERVICE/NAME", "-socket string", "-node"}, []string{"-admin", "refused"}},
		{"decap", []string{"usage: xlb decap", "-iface string", "-allow-from string", "-gue-port uint", "(default 5555)", "-detach", "-stats", "-pin-dir string"}, nil},
		{"capture", []string{"-w string", "-c int", "-verdict string"}, nil},
		{"undrain", []string{"usage: xlb undrain", "-node"}, nil},
		{"status", []string{"usage: xlb status", "-fleet string"}, nil},
		{"version", []string{"usage: xlb version", "no flags"}, nil},
	} {
		t.Run(tc.cmd, func(t *testing.T) {
			help := xlb("help", tc.cmd)
			help.wantCode(t, 0)
			for _, w := range tc.want {
				if !strings.Contains(help.stdout, w) {
					t.Errorf("xlb help %s: no %q in\n%s", tc.cmd, w, help.stdout)
				}
			}
			for _, w := range tc.notWant {
				if strings.Contains(help.stdout, w) {
					t.Errorf("xlb help %s lists %q:\n%s", tc.cmd, w, help.stdout)
				}
			}
			if !strings.Contains(help.stdout, "\nflags:\n") && !strings.Contains(help.stdout, "\nno flags\n") {
				t.Errorf("xlb help %s lists no flags:\n%s", tc.cmd, help.stdout)
			}
			if strings.Contains(help.stdout, "commands:") {
				t.Errorf("xlb help %s printed the general usage:\n%s", tc.cmd, help.stdout)
			}
			for _, flag := range []string{"-h", "--help"} {
				if o := xlb(tc.cmd, flag); o != help {
					t.Errorf("xlb %s %s differs from xlb help %s:\n%+v\n%+v", tc.cmd, flag, tc.cmd, o, help)
				}
			}
		})
	}
	if o := xlb("help", "nope"); o.code != 2 || !strings.Contains(o.stderr, `unknown command "nope"`) {
		t.Errorf("xlb help nope: %+v", o)
	}
}

// TestVersion_Text: the module version, the commit with its time and
// whether the tree was modified, and the Go version, from build info.
func TestVersion_Text(t *testing.T) {
	bi := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "xlb", Version: "v1.2.3"},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "abc123"}, {Key: "vcs.time", Value: "2026-12-01T10:00:00Z"},
			{Key: "vcs.modified", Value: "true"}}}
	want := "xlb v1.2.3\ncommit abc123 (2026-12-01T10:00:00Z), with uncommitted changes\ngo go1.26.8 " + runtime.GOOS + "/" + runtime.GOARCH + "\n"
	if got := versionText(bi); got != want {
		t.Errorf("got %q\nwant %q", got, want)
	}
	bi.Settings = bi.Settings[:1]
	if got := versionText(bi); !strings.Contains(got, "commit abc123\n") {
		t.Errorf("clean tree, no time: %q", got)
	}
	bi.Settings = nil
	if got := versionText(bi); !strings.Contains(got, "commit unknown (built without version control information)") {
		t.Errorf("no vcs: %q", got)
	}
	if got := versionText(nil); !strings.HasPrefix(got, "xlb unknown\n") || !strings.Contains(got, runtime.Version()) {
		t.Errorf("no build info: %q", got)
	}
}

// TestVersion_Binary: the binary prints its version, exit 0; an argument
// is a usage error. (That the binary `make build` makes names this
// checkout's commit is TestInstall's: scripts/install-check.sh compares it
// with git rev-parse HEAD; the test binary here is a plain go build.)
func TestVersion_Binary(t *testing.T) {
	o := xlbExec(t, "version")
	o.wantCode(t, 0)
	if !strings.HasPrefix(o.stdout, "xlb ") || !strings.Contains(o.stdout, "\ncommit ") || !strings.Contains(o.stdout, "\ngo "+runtime.Version()) {
		t.Errorf("xlb version: %q", o.stdout)
	}
	if o := xlbExec(t, "version", "extra"); o.code != 2 {
		t.Errorf("xlb version extra: exit %d, want 2", o.code)
	}
}

// TestRun_LogFormatFlag: --log-format takes json or console; anything
// else is a usage error before the file is read.
func TestRun_LogFormatFlag(t *testing.T) {
	o := xlb("run", "-c", cli("xlb.toml"), "--log-format", "xml")
	o.wantCode(t, 2)
	if !strings.Contains(o.stderr, `--log-format "xml": want json or console`) {
		t.Errorf("stderr %q", o.stderr)
	}
	// A valid format gets as far as the file (which has no [dataplane]).
	if o := xlb("run", "-c", cli("xlb.toml"), "--log-format", "console"); o.code != 1 || !strings.Contains(o.stderr, "dataplane.interface") {
		t.Errorf("--log-format console: %+v", o)
	}
}

package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCheck_SaysWhetherRunCanStart: for a valid file `xlb check` also
// says whether `xlb run` could start with it on this host, and
// `xlb check --run` (the unit's ExecStartPre, the upgrade procedure)
// fails when it could not: an empty file, one without
// dataplane.interface, an interface this namespace lacks, an unknown
// dataplane.user. A new user's empty file once passed with "ok".
func TestCheck_SaysWhetherRunCanStart(t *testing.T) {
	minimal, err := os.ReadFile("../../testdata/config/minimal.toml")
	if err != nil {
		t.Fatal(err)
	}
	onLo := strings.Replace(string(minimal), `interface = "eth1"`, `interface = "lo"`, 1)
	dir := t.TempDir()
	for _, tc := range []struct {
		name, text string
		canRun     bool
		says       string
	}{
		{"empty", "", false, "dataplane.interface: required by xlb run"},
		{"no interface", strings.Replace(string(minimal), `interface = "eth1"`, `queues = "all"`, 1), false, "dataplane.interface: required by xlb run"},
		{"missing interface", strings.Replace(string(minimal), `interface = "eth1"`, `interface = "xlbnosuch0"`, 1), false, `dataplane.interface "xlbnosuch0" does not exist`},
		{"unknown user", strings.Replace(onLo, "[dataplane]\n", "[dataplane]\nuser = \"xlb-no-such-user\"\n", 1), false, `dataplane.user "xlb-no-such-user"`},
		{"no rule", onLo[:strings.Index(onLo, "[[forwarding_rule]]")], true, "forwards nothing: the file has no forwarding rule"},
		{"runnable", onLo, true, "xlb run can start with it on this host"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-")+".toml")
			if err := os.WriteFile(path, []byte(tc.text), 0o644); err != nil {
				t.Fatal(err)
			}
			o := xlb("check", "-c", path)
			if o.code != 0 || !strings.HasPrefix(o.stdout, "ok: ") || !strings.Contains(o.stdout, tc.says) {
				t.Errorf("check: exit %d\n%s%s\nwant exit 0, ok and %q", o.code, o.stdout, o.stderr, tc.says)
			}
			if !tc.canRun && !strings.Contains(o.stdout, "xlb run cannot start with it: ") {
				t.Errorf("check does not say xlb run cannot start:\n%s", o.stdout)
			}
			o = xlb("check", "--run", "-c", path)
			switch {
			case tc.canRun && o.code != 0:
				t.Errorf("check --run: exit %d, want 0\n%s", o.code, o.stderr)
			case !tc.canRun && (o.code != 1 || !strings.Contains(o.stderr, tc.says) || !strings.Contains(o.stderr, "xlb run cannot start")):
				t.Errorf("check --run: exit %d\n%s%s\nwant exit 1 naming %q", o.code, o.stdout, o.stderr, tc.says)
			}
		})
	}
}

// TestUsageErrors_NoMarker: a usage error says what is wrong and where the
// flags are, without the literal "(usage)" it once ended with, and exits 2.
func TestUsageErrors_NoMarker(t *testing.T) {
	for _, args := range [][]string{{"reload"}, {"check", "-c"}, {"drain"}, {"check", "-c", "a", "b"}} {
		o := xlb(args...)
		if o.code != 2 || strings.Contains(o.stderr, "(usage)") || !strings.Contains(o.stderr, "(xlb help "+args[0]+" lists the flags)\n") {
			t.Errorf("xlb %s: exit %d, stderr %q; want 2, no (usage), a pointer to xlb help %s", strings.Join(args, " "), o.code, o.stderr, args[0])
		}
	}
}

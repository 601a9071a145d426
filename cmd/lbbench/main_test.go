package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"xlb/bench/report"
)

// runJSON runs lbbench with args (--json among them) as CI does and decodes
// what it prints: the report, and its data into data (a pointer to the
// command's own result type).
func runJSON(t *testing.T, data any, args ...string) report.Report {
	t.Helper()
	var out, errb bytes.Buffer
	if rc := run(args, &out, &errb); rc != 0 {
		t.Fatalf("lbbench %v: exit %d, stderr: %s", args, rc, errb.String())
	}
	r := report.Report{Data: data}
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatalf("output is not the report's JSON: %v\n%s", err, out.String())
	}
	return r
}

// TestUsage: no command is a usage error (exit 2), help is not, and an
// unknown command names itself and lists the real ones.
func TestUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		rc   int
		want string
	}{
		{nil, 2, "commands:"},
		{[]string{"help"}, 0, "commands:"},
		{[]string{"frobnicate"}, 2, `unknown command "frobnicate"`},
	} {
		var out, errb bytes.Buffer
		if rc := run(tc.args, &out, &errb); rc != tc.rc || !strings.Contains(errb.String(), tc.want) {
			t.Errorf("lbbench %v: exit %d, stderr %q; want exit %d with %q", tc.args, rc, errb.String(), tc.rc, tc.want)
		}
		for _, c := range []string{"core", "xdp", "maglev", "control"} {
			if tc.want == "commands:" && !strings.Contains(errb.String(), "\n  "+c+" ") {
				t.Errorf("usage does not list %s:\n%s", c, errb.String())
			}
		}
	}
}

// TestHelp_PerCommand: `lbbench help CMD` and `lbbench CMD -h` print the
// same help, exit 0: the command's flags with their defaults (on stderr,
// like lbbench's usage).
func TestHelp_PerCommand(t *testing.T) {
	for cmd, flags := range map[string][]string{
		"core":    {"-workers", "-flows"},
		"maglev":  {"-json"},
		"control": {"-vips", "-table-size"},
		"xdp":     {"-sizes", "-gen-iface"},
	} {
		var out, errb bytes.Buffer
		if rc := run([]string{"help", cmd}, &out, &errb); rc != 0 || out.Len() != 0 {
			t.Errorf("lbbench help %s: exit %d, stdout %q", cmd, rc, out.String())
		}
		for _, f := range append(flags, "usage: lbbench "+cmd, "(default ") {
			if !strings.Contains(errb.String(), f) {
				t.Errorf("lbbench help %s: no %q in\n%s", cmd, f, errb.String())
			}
		}
		var errb2 bytes.Buffer
		if rc := run([]string{cmd, "-h"}, &out, &errb2); rc != 0 || errb2.String() != errb.String() {
			t.Errorf("lbbench %s -h: exit %d, output differs from lbbench help %s:\n%s", cmd, rc, cmd, errb2.String())
		}
	}
}

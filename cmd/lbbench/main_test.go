package main

import (
	"bytes"
	"strings"
	"testing"
)

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
		for _, c := range []string{"core", "xdp", "maglev"} {
			if tc.want == "commands:" && !strings.Contains(errb.String(), "\n  "+c+" ") {
				t.Errorf("usage does not list %s:\n%s", c, errb.String())
			}
		}
	}
}

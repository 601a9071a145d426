package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCheck_BGPSection: `xlb check` accepts the [bgp] example of docs/config.md
// after the main example, and names file, line and field of a bad [bgp]
// value like any other.
func TestCheck_BGPSection(t *testing.T) {
	text := readFile(t, "../../testdata/config/example.toml") + readFile(t, "../../testdata/config/bgp.toml")
	dir := t.TempDir()
	good := filepath.Join(dir, "bgp.toml")
	if err := os.WriteFile(good, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	o := xlb("check", "-c", good)
	o.wantCode(t, 0)
	if first, _, _ := strings.Cut(o.stdout, "\n"); !strings.HasPrefix(first, "ok: ") || !strings.HasSuffix(first, ", BGP AS 65010 with 1 neighbor") {
		t.Errorf("stdout %q stderr %q", o.stdout, o.stderr)
	}

	const old, bad = "hold_time_sec = 9 ", "hold_time_sec = 2 "
	if !strings.Contains(text, old) {
		t.Fatalf("%q is not in the [bgp] example", old)
	}
	broken := strings.Replace(text, old, bad, 1)
	path := filepath.Join(dir, "broken.toml")
	if err := os.WriteFile(path, []byte(broken), 0o644); err != nil {
		t.Fatal(err)
	}
	o = xlb("check", "-c", path)
	o.wantCode(t, 1)
	want := fmt.Sprintf("%s:%d: bgp.hold_time_sec: 2 is outside [3, 65535]", path, lineOf(t, broken, bad))
	if !strings.Contains(o.stderr, want) {
		t.Errorf("stderr does not say %q:\n%s", want, o.stderr)
	}
}

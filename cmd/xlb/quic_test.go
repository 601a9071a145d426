package main

import (
	"strings"
	"testing"
)

// TestX4_ExplainQUICFlags: `xlb explain --quic-dcid` (and --quic-type)
// describe a QUIC packet; the report shows the configuration, the server
// ID and why the ID was used; misuse is a usage error (exit 2).
func TestX4_ExplainQUICFlags(t *testing.T) {
	cfg := "../../testdata/sim/quic_lb.toml"
	base := []string{"explain", "-c", cfg, "--src", "192.0.2.77", "--dst", "203.0.113.10", "--proto", "udp", "--sport", "6000", "--dport", "443"}
	o := xlb(append(base, "--quic-dcid", "280003b1b2b3b4b5b6")...)
	for _, want := range []string{"QUIC short packet to connection ID 280003b1b2b3b4b5b6", "quic           routed (short header)",
		"  server ID    0003", "plaintext", "forward to q3"} {
		if o.code != 0 || !strings.Contains(o.stdout, want) {
			t.Fatalf("exit %d, output lacks %q:\n%s%s", o.code, want, o.stdout, o.stderr)
		}
	}
	o = xlb(append(base, "--quic-dcid", "280003b1b2b3b4b5b6", "--quic-type", "initial")...)
	if o.code != 0 || !strings.Contains(o.stdout, "client_chosen") {
		t.Fatalf("initial: exit %d:\n%s%s", o.code, o.stdout, o.stderr)
	}
	for _, bad := range [][]string{{"--quic-type", "initial"}, {"--quic-dcid", "xyz"}} {
		if o := xlb(append(base, bad...)...); o.code != 2 || !strings.Contains(o.stderr, "quic") {
			t.Errorf("%v: exit %d, stderr %q; want 2 naming quic", bad, o.code, o.stderr)
		}
	}
}

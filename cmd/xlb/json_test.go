package main

import (
	"strings"
	"testing"
)

// TestJSON_NotHTMLEscaped: `xlb explain --json` writes "->" and ">=" as
// they are, not as \u003e (Go's HTML-safe default). (/status is checked
// by the admin tests' status helper.)
func TestJSON_NotHTMLEscaped(t *testing.T) {
	ex := xlb("explain", "-c", cli("xlb.toml"), "--json", "--src", "198.51.100.7", "--dst", "203.0.113.10",
		"--sport", "40000", "--dport", "80", "--flags", "S")
	ex.wantCode(t, 0)
	for _, o := range []struct{ name, out, want string }{
		{"explain --json", ex.stdout, `"packet": "tcp 198.51.100.7:40000 -> 203.0.113.10:80 flags S"`},
		{"explain --json", ex.stdout, `primaries >= failover_ratio`},
	} {
		if strings.Contains(o.out, `\u003e`) || strings.Contains(o.out, `\u003c`) || strings.Contains(o.out, `\u0026`) {
			t.Errorf("%s escapes < > & for HTML:\n%s", o.name, o.out)
		}
		if !strings.Contains(o.out, o.want) {
			t.Errorf("%s: no %q in\n%s", o.name, o.want, o.out)
		}
	}
}

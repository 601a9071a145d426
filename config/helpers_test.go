package config

import (
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/tools/txtar"
)

// Pieces of a small valid file. A case joins them with file(), adding or
// replacing lines, and marks the line an error must point at with "# <-".
const (
	hcHTTP = `
[[health_check]]
name = "hc"
type = "HTTP"`
	hcTCP = `
[[health_check]]
name = "tcp-hc"
type = "TCP"`
	svcWeb = `
[[backend_service]]
name = "web"
health_checks = ["hc"]`
	groupA = `
  [[backend_service.backend]]
  group = "a"
  endpoints = [ { ip = "10.0.0.1" } ]`
	ruleWeb = `
[[forwarding_rule]]
name = "r"
ip_address = "192.0.2.1"
ip_protocol = "TCP"
ports = ["80"]
backend_service = "web"`
)

func file(parts ...string) string { return strings.Join(parts, "\n") + "\n" }

// valid is the smallest file that passes.
var valid = file(hcHTTP, svcWeb, groupA, ruleWeb)

// markedLine is the 1-based line holding "# <-", or 0.
func markedLine(src string) int {
	for i, l := range strings.Split(src, "\n") {
		if strings.Contains(l, "# <-") {
			return i + 1
		}
	}
	return 0
}

// testdataArchive returns the named files of the txtar archive
// testdata/archive, in the order asked, or fails the test when the archive
// or one of them is missing.
func testdataArchive(tb testing.TB, archive string, names ...string) []string {
	tb.Helper()
	a, err := txtar.ParseFile(filepath.Join("testdata", archive))
	if err != nil {
		tb.Fatal(err)
	}
	out := make([]string, len(names))
	for i, name := range names {
		j := slices.IndexFunc(a.Files, func(f txtar.File) bool { return f.Name == name })
		if j < 0 {
			tb.Fatalf("testdata/%s has no file %s", archive, name)
		}
		out[i] = string(a.Files[j].Data)
	}
	return out
}

func mustParse(tb testing.TB, src string) *Config {
	tb.Helper()
	cfg, err := Parse("test.toml", []byte(src))
	if err != nil {
		tb.Fatalf("unexpected error:\n%v\nin:\n%s", err, src)
	}
	return cfg
}

// parseErrors parses src, which must fail, and returns its errors.
func parseErrors(tb testing.TB, src string) Errors {
	tb.Helper()
	cfg, err := Parse("test.toml", []byte(src))
	if err == nil {
		tb.Fatalf("no error; got %s from:\n%s", cfg.Summary(), src)
	}
	var es Errors
	if !errors.As(err, &es) || len(es) == 0 {
		tb.Fatalf("error is not a non-empty Errors: %#v", err)
	}
	return es
}

// wantError checks that src fails with an error at field, on the marked
// line, whose message contains msg; and, unless more is set, that it is the
// only error.
func wantError(tb testing.TB, src, field, msg string, more bool) {
	tb.Helper()
	es := parseErrors(tb, src)
	for _, e := range es {
		if e.Field != field {
			continue
		}
		if !strings.Contains(e.Msg, msg) {
			tb.Errorf("%s: message %q does not contain %q", field, e.Msg, msg)
		}
		if want := markedLine(src); e.Line != want {
			tb.Errorf("%s: line %d, want %d (%v)", field, e.Line, want, e)
		}
		if e.File != "test.toml" {
			tb.Errorf("%s: file %q", field, e.File)
		}
		if len(es) > 1 && !more {
			tb.Errorf("want only one error, got:\n%v", es)
		}
		return
	}
	tb.Errorf("no error at %s; got:\n%v\nfrom:\n%s", field, es, src)
}

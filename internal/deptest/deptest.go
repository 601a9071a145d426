// Package deptest is the one home of what the layering tests (deps_test.go
// of dataplane, controlplane/bgp, healthcheck, bench/report) share: the
// transitive, non-test dependencies of a package, as `go list -deps` gives
// them.
package deptest

import (
	"errors"
	"os/exec"
	"strings"
	"testing"
)

// Deps returns the import paths pkg depends on, itself included (last),
// skipping tb when there is no go command in PATH and failing it when go
// list does.
func Deps(tb testing.TB, pkg string) []string {
	tb.Helper()
	gobin, err := exec.LookPath("go")
	if err != nil {
		tb.Skip("no go command in PATH")
	}
	out, err := exec.Command(gobin, "list", "-deps", "-f", "{{.ImportPath}}", pkg).Output()
	if err != nil {
		if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
			tb.Fatalf("go list -deps %s: %v\n%s", pkg, err, ee.Stderr)
		}
		tb.Fatalf("go list -deps %s: %v", pkg, err)
	}
	deps := strings.Fields(string(out))
	if len(deps) == 0 || deps[len(deps)-1] != pkg {
		tb.Fatalf("go list -deps %s: unexpected output %q", pkg, out)
	}
	return deps
}

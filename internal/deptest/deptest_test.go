package deptest

import (
	"slices"
	"testing"
)

// TestDeps: this package's dependencies end with itself and include what
// it imports, transitively (os/exec imports syscall).
func TestDeps(t *testing.T) {
	const pkg = "xlb/internal/deptest"
	deps := Deps(t, pkg)
	if deps[len(deps)-1] != pkg {
		t.Errorf("last of %q is not %s", deps, pkg)
	}
	for _, want := range []string{"os/exec", "testing", "syscall"} {
		if !slices.Contains(deps, want) {
			t.Errorf("%s not among %q", want, deps)
		}
	}
}

package bgp

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDeps_Independent keeps the speaker independent of the appliance: of
// this module it uses only config (for Neighbors).
func TestDeps_Independent(t *testing.T) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command in PATH")
	}
	const pkg = "xlb/controlplane/bgp"
	out, err := exec.Command(gobin, "list", "-deps", "-f", "{{.ImportPath}}", pkg).Output()
	if err != nil {
		t.Fatalf("go list -deps %s: %v", pkg, err)
	}
	deps := strings.Fields(string(out))
	if len(deps) == 0 || deps[len(deps)-1] != pkg {
		t.Fatalf("go list -deps %s: unexpected output %q", pkg, out)
	}
	for _, dep := range deps {
		if dep != pkg && dep != "xlb/config" && (dep == "xlb" || strings.HasPrefix(dep, "xlb/")) {
			t.Errorf("%s depends on %s", pkg, dep)
		}
	}
}

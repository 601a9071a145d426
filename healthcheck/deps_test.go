package healthcheck

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDeps_NoControlOrDataPlane: the checker reports results; it knows
// neither the control plane it feeds nor the data plane (the caller
// converts). It reads the transitive, non-test dependencies from
// `go list -deps`, and sees what it looks for: config is one of them.
func TestDeps_NoControlOrDataPlane(t *testing.T) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command in PATH")
	}
	out, err := exec.Command(gobin, "list", "-deps", "-f", "{{.ImportPath}}", "xlb/healthcheck").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	deps := strings.Fields(string(out))
	sawConfig := false
	for _, d := range deps {
		sawConfig = sawConfig || d == "xlb/config"
		for _, f := range []string{"xlb/controlplane", "xlb/dataplane"} {
			if d == f || strings.HasPrefix(d, f+"/") {
				t.Errorf("healthcheck depends on %s", d)
			}
		}
	}
	if !sawConfig {
		t.Fatalf("go list -deps shows no xlb/config: %q", deps)
	}
}

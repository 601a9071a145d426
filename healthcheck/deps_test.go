package healthcheck

import (
	"strings"
	"testing"

	"xlb/internal/deptest"
)

// TestDeps_NoControlOrDataPlane: the checker reports results; it knows
// neither the control plane it feeds nor the data plane (the caller
// converts). It reads the transitive, non-test dependencies from
// `go list -deps`, and sees what it looks for: config is one of them.
func TestDeps_NoControlOrDataPlane(t *testing.T) {
	deps := deptest.Deps(t, "xlb/healthcheck")
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

package bgp

import (
	"strings"
	"testing"

	"xlb/internal/deptest"
)

// TestDeps_Independent keeps the speaker independent of the appliance: of
// this module it uses only config (for Neighbors).
func TestDeps_Independent(t *testing.T) {
	const pkg = "xlb/controlplane/bgp"
	for _, dep := range deptest.Deps(t, pkg) {
		if dep != pkg && dep != "xlb/config" && (dep == "xlb" || strings.HasPrefix(dep, "xlb/")) {
			t.Errorf("%s depends on %s", pkg, dep)
		}
	}
}

package bgp

import (
	"slices"
	"strings"
	"testing"

	"xlb/internal/deptest"
)

// TestDeps_Independent keeps the speaker independent of the appliance: of
// this module it uses only config (for Neighbors) and what config itself
// is built from (leaf codecs such as quiclb, whose limits config checks).
func TestDeps_Independent(t *testing.T) {
	const pkg = "xlb/controlplane/bgp"
	allowed := deptest.Deps(t, "xlb/config")
	for _, dep := range deptest.Deps(t, pkg) {
		if dep == pkg || slices.Contains(allowed, dep) {
			continue
		}
		if dep == "xlb" || strings.HasPrefix(dep, "xlb/") {
			t.Errorf("%s depends on %s", pkg, dep)
		}
	}
}

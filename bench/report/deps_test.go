package report_test

import (
	"slices"
	"strings"
	"testing"

	"xlb/internal/deptest"
)

// TestDeps_PlotOnlyInLbbench: the charts' library (gonum.org/v1/plot, its
// fonts and its SVG writer) is linked into lbbench, which draws with it,
// and never into the load balancer or the test server.
func TestDeps_PlotOnlyInLbbench(t *testing.T) {
	forbidden := []string{"gonum.org/", "codeberg.org/go-fonts/", "github.com/ajstarks/svgo"}
	// The check sees what it looks for: lbbench does link the plotter.
	if !slices.Contains(deptest.Deps(t, "xlb/cmd/lbbench"), "gonum.org/v1/plot") {
		t.Fatal("go list -deps xlb/cmd/lbbench does not show gonum.org/v1/plot")
	}
	for _, pkg := range []string{"xlb/cmd/xlb", "xlb/cmd/xlb-testserver"} {
		for _, dep := range deptest.Deps(t, pkg) {
			for _, f := range forbidden {
				if strings.HasPrefix(dep, f) {
					t.Errorf("%s links %s", pkg, dep)
				}
			}
		}
	}
}

package dataplane_test

import (
	"os/exec"
	"slices"
	"strings"
	"testing"

	"xlb/internal/deptest"
)

// TestDeps_HotPathStaysSmall guards the layering: the per-packet packages
// never depend on the control plane, logging, metrics or gopacket (craft,
// which uses gopacket, is for tests and tools), and maglev, conntrack and
// quiclb depend on no package of this module at all. It reads the transitive,
// non-test dependencies from `go list -deps`.
func TestDeps_HotPathStaysSmall(t *testing.T) {
	forbidden := []string{
		"xlb/controlplane", // and its subpackages
		"go.uber.org/zap",
		"github.com/prometheus/",
		"github.com/google/gopacket",
	}
	// The check sees what it looks for: craft does use gopacket.
	if !slices.Contains(deptest.Deps(t, "xlb/dataplane/craft"), "github.com/google/gopacket") {
		t.Fatal("go list -deps xlb/dataplane/craft does not show gopacket")
	}
	for _, pkg := range []string{"xlb/dataplane", "xlb/dataplane/packet", "xlb/dataplane/capture", "xlb/dataplane/worker"} {
		for _, dep := range deptest.Deps(t, pkg) {
			for _, f := range forbidden {
				if dep == f || strings.HasPrefix(dep, strings.TrimSuffix(f, "/")+"/") {
					t.Errorf("%s depends on %s", pkg, dep)
				}
			}
		}
	}
	for _, pkg := range []string{"xlb/maglev", "xlb/conntrack", "xlb/quiclb"} {
		for _, dep := range deptest.Deps(t, pkg) {
			if dep != pkg && (dep == "xlb" || strings.HasPrefix(dep, "xlb/")) {
				t.Errorf("%s depends on %s, a package of this module", pkg, dep)
			}
		}
	}
}

// TestDeps_AsavieOnlyInTests: github.com/asavie/xdp is the comparison in
// dataplane/afxdp's tests and never carries traffic (its Transmit panics on
// an unexpected errno and it cannot do need-wakeup), so no binary links it.
func TestDeps_AsavieOnlyInTests(t *testing.T) {
	const asavie = "github.com/asavie/xdp"
	// The check sees what it looks for: the comparison tests do import it.
	out, err := exec.Command("go", "list", "-test", "-deps", "-f", "{{.ImportPath}}", "xlb/dataplane/afxdp").Output()
	if err != nil {
		t.Fatalf("go list -test -deps xlb/dataplane/afxdp: %v", err)
	}
	if !slices.Contains(strings.Fields(string(out)), asavie) {
		t.Fatal("go list -test -deps xlb/dataplane/afxdp does not show " + asavie)
	}
	for _, pkg := range []string{"xlb/cmd/xlb", "xlb/cmd/lbbench", "xlb/cmd/xlb-testserver"} {
		for _, dep := range deptest.Deps(t, pkg) {
			if dep == asavie || strings.HasPrefix(dep, asavie+"/") {
				t.Errorf("%s links %s", pkg, dep)
			}
		}
	}
}

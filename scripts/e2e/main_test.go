package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"xlb/scripts/testbed"
)

// tcpPorts and udpPorts are the backends' HTTP and UDP echo ports: 80
// and 53 for L2 DSR, 8080-8083 for the decapCases.
const (
	tcpPorts = "80 8080 8081 8082 8083"
	udpPorts = "53 8080 8081 8082 8083"
)

// binDir holds the binaries built for the package's run.
var binDir string

func TestMain(m *testing.M) {
	os.Exit(func() int {
		dir, err := os.MkdirTemp("", "xlb-e2e-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(dir)
		binDir = dir
		return m.Run()
	}())
}

// Binaries built once, by the first test that needs them (a run of the
// benchmarks alone builds nothing).
var (
	buildOnce sync.Once
	buildErr  error
	xlbBin    string // cmd/xlb, with the race detector
	serverBin string // cmd/xlb-testserver: the backends' server and the probe
)

func build() error {
	xlbBin = filepath.Join(binDir, "xlb")
	serverBin = filepath.Join(binDir, "xlb-testserver")
	// xlb with the race detector: real traffic exercises its workers,
	// control plane and admin listener together (startXLB fails a test
	// whose xlb reported a race).
	for _, b := range [][]string{
		{"build", "-race", "-o", xlbBin, "xlb/cmd/xlb"},
		{"build", "-o", serverBin, "xlb/cmd/xlb-testserver"},
	} {
		if out, err := exec.Command("go", b...).CombinedOutput(); err != nil {
			return fmt.Errorf("go %v: %v\n%s", b, err, out)
		}
	}
	// testbed.sh starts this server instead of building one per bed.
	if err := os.Setenv("XLB_TESTSERVER", serverBin); err != nil {
		return err
	}
	if err := os.Setenv("TB_UDP_PORTS", udpPorts); err != nil {
		return err
	}
	return os.Setenv("TB_TCP_PORTS", tcpPorts)
}

// variantBuild is another build of cmd/xlb than xlbBin, made once, by the
// first test that asks for it.
type variantBuild struct {
	name string   // file name in binDir
	args []string // go build flags
	once sync.Once
	err  error
}

func (v *variantBuild) path(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(binDir, v.name)
	v.once.Do(func() {
		args := append(append([]string{"build"}, v.args...), "-o", bin, "xlb/cmd/xlb")
		if out, err := exec.Command("go", args...).CombinedOutput(); err != nil {
			v.err = fmt.Errorf("go %v: %v\n%s", args, err, out)
		}
	})
	if v.err != nil {
		t.Fatal(v.err)
	}
	return bin
}

var (
	// A plain build, without the race detector, for a test that measures
	// the rate xlb's workers keep up with (the detector slows them several
	// times over).
	plainBuild = &variantBuild{name: "xlb-plain"}
	// The test-only conntrack layout (tag xlb_ct_layout_alt: four slots
	// per bucket, layout 0x7e570002), with the race detector as xlbBin,
	// for a test that replaces the binary by one of another table layout.
	altBuild = &variantBuild{name: "xlb-ct-layout-alt", args: []string{"-race", "-tags", "xlb_ct_layout_alt"}}
)

func plainXLB(t *testing.T) string { return plainBuild.path(t) }

// buildAlt returns the alt-layout xlb's path.
func buildAlt(t *testing.T) string { return altBuild.path(t) }

// upBed builds the binaries if needed and brings a bed up for t.
func upBed(t *testing.T, opts testbed.Options) *testbed.Bed {
	t.Helper()
	buildOnce.Do(func() { buildErr = build() })
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return testbed.Up(t, opts)
}

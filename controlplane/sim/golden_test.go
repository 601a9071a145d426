package sim_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"xlb/controlplane/sim"
)

var update = flag.Bool("update", false, "rewrite testdata/sim/*.golden from the current output (review every line against SPEC before committing)")

// scenarioDir holds the golden scenarios: NAME.toml (the configuration),
// NAME.jsonl (the events; its # comments say what SPEC expects and why) and
// NAME.golden (the expected stdout of `xlb sim -c NAME.toml NAME.jsonl`).
// Other .toml files there are reload targets.
//
// A comment line "# stderr: TEXT" in NAME.jsonl says that the warnings must
// contain TEXT; a scenario without one must produce no warning.
const scenarioDir = "../../testdata/sim"

func TestGoldenScenarios(t *testing.T) {
	scenarios, err := filepath.Glob(filepath.Join(scenarioDir, "*.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	if len(scenarios) < 8 {
		t.Fatalf("%d scenarios in %s, want at least 8", len(scenarios), scenarioDir)
	}
	for _, path := range scenarios {
		base := strings.TrimSuffix(path, ".jsonl")
		t.Run(filepath.Base(base), func(t *testing.T) {
			var out, warn bytes.Buffer
			if _, err := sim.Run(base+".toml", path, sim.JSONLines(&out), &warn); err != nil {
				t.Fatalf("sim: %v", err)
			}
			checkWarnings(t, path, warn.String())
			if *update {
				if err := os.WriteFile(base+".golden", out.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(base + ".golden")
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			diffLines(t, want, out.Bytes())
		})
	}
}

// checkWarnings applies the "# stderr:" expectations of a scenario.
func checkWarnings(t *testing.T, path, warn string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var wants []string
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		if w, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "# stderr:"); ok {
			wants = append(wants, strings.TrimSpace(w))
		}
	}
	if len(wants) == 0 && warn != "" {
		t.Errorf("unexpected warnings:\n%s", warn)
	}
	for _, w := range wants {
		if !strings.Contains(warn, w) {
			t.Errorf("warnings lack %q:\n%s", w, warn)
		}
	}
}

// diffLines reports the first lines that differ, naming the packet id.
func diffLines(t *testing.T, want, got []byte) {
	t.Helper()
	wl := strings.Split(strings.TrimRight(string(want), "\n"), "\n")
	gl := strings.Split(strings.TrimRight(string(got), "\n"), "\n")
	bad := 0
	for i := 0; i < max(len(wl), len(gl)) && bad < 5; i++ {
		var w, g string
		if i < len(wl) {
			w = wl[i]
		}
		if i < len(gl) {
			g = gl[i]
		}
		if w != g {
			bad++
			var r struct{ ID string }
			if json.Unmarshal([]byte(w), &r) != nil {
				_ = json.Unmarshal([]byte(g), &r)
			}
			t.Errorf("output line %d (packet %q):\n got  %s\n want %s", i+1, r.ID, g, w)
		}
	}
	if bad > 0 {
		t.Log("if the change is intended, check each line against SPEC and rerun with -update")
	}
}

package main

import (
	"bufio"
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"

	"xlb/config"
)

// TestDemoSimScenario: what `make demo-sim` says before the table it
// prints is what the scenario does. Every packet is forwarded (its one
// drop was a client sent from the simulated balancer's own address); the
// 1000 connections before the failover go to the primaries in about the
// reported weights' shares (a sixth, a third, a half); the 100 after it go
// to b4; and the script's header gives those figures.
func TestDemoSimScenario(t *testing.T) {
	o := xlb("sim", "-c", "../../testdata/demo/xlb.toml", "../../testdata/demo/scenario.jsonl")
	if o.code != 0 {
		t.Fatalf("xlb sim: exit %d\n%s", o.code, o.stderr)
	}
	before, after := map[string]int{}, map[string]int{}
	sc := bufio.NewScanner(strings.NewReader(o.stdout))
	for sc.Scan() {
		var r struct{ ID, Verdict, Reason, Backend, Track string }
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("%s: %v", sc.Text(), err)
		}
		if r.Verdict != "forward" {
			t.Errorf("%s: %s %s, want every packet forwarded", r.ID, r.Verdict, r.Reason)
		}
		if r.Track != "new" {
			continue
		}
		switch {
		case strings.HasPrefix(r.ID, "c"):
			before[r.Backend]++
		case strings.HasPrefix(r.ID, "n"):
			after[r.Backend]++
		}
	}
	total := before["b1"] + before["b2"] + before["b3"]
	if total != 1000 || before["b4"] != 0 {
		t.Errorf("before the failover: %v, want 1000 new connections on b1-b3", before)
	}
	if len(after) != 1 || after["b4"] != 100 {
		t.Errorf("after the failover: %v, want 100 new connections, all on b4", after)
	}
	// Binomial spread at n = 1000: σ ≤ 16 connections; 4σ of slack.
	for b, share := range map[string]float64{"b1": 1.0 / 6, "b2": 1.0 / 3, "b3": 1.0 / 2} {
		if got, want := float64(before[b]), share*1000; got < want-64 || got > want+64 {
			t.Errorf("%s took %v of the first 1000, want about %.0f", b, got, want)
		}
	}
	script, err := os.ReadFile("../../scripts/demo-sim.sh")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"1000 new TCP connections", "100 new ones fail over to b4", "Of all 1100 new connections",
		"b1 15.2%, b2 30.3%, b3 45.5%", "b4 9.1% (the last 100)"} {
		if !strings.Contains(string(script), want) {
			t.Errorf("scripts/demo-sim.sh does not say %q", want)
		}
	}
}

// TestDemoBuildsAndConfiguresAsShipped: `make demo` builds xlb through
// `make build` (static, the commit stamped in), not a plain `go build` of
// its own, and its configuration's ring size is the example's.
func TestDemoBuildsAndConfiguresAsShipped(t *testing.T) {
	script, err := os.ReadFile("../../scripts/demo.sh")
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^make [^\n]*\bbuild\b`).Match(script) {
		t.Error("scripts/demo.sh does not build with make build")
	}
	if regexp.MustCompile(`go build[^\n]*-o bin/xlb\s`).Match(script) {
		t.Error("scripts/demo.sh builds bin/xlb with go build, not as make build does")
	}
	demo, err := config.Load("../../testdata/demo/testbed.toml")
	if err != nil {
		t.Fatal(err)
	}
	example, err := config.Load("../../testdata/config/example.toml")
	if err != nil {
		t.Fatal(err)
	}
	if demo.Dataplane.RingSize != example.Dataplane.RingSize {
		t.Errorf("the demo's ring_size %d, the example's %d", demo.Dataplane.RingSize, example.Dataplane.RingSize)
	}
}

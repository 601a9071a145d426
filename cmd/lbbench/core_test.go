package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"xlb/bench/core"
	"xlb/bench/report"
)

// TestCoreQuickJSON runs `lbbench core --quick --json` as CI does and
// decodes what it prints: the report, with the engine's result as its data.
func TestCoreQuickJSON(t *testing.T) {
	var data core.Result
	r := runJSON(t, &data, "core", "--quick", "--json")
	if r.Command != "core" || r.Machine.Cores == 0 || !data.Quick {
		t.Errorf("command %q, cores %d, quick %v", r.Command, r.Machine.Cores, data.Quick)
	}
	// Quick: no table of a million flows.
	if data.Headline != 100_000 || len(data.Prefills) != 3 {
		t.Errorf("headline %d, %d prefills", data.Headline, len(data.Prefills))
	}
	if !strings.HasPrefix(r.Tables[0].Title, "Engine against live flows") || len(r.Tables[0].Rows) != 3*5 {
		t.Errorf("first table %q with %d rows, want 15 (3 tables x 5 mixes)", r.Tables[0].Title, len(r.Tables[0].Rows))
	}
	if len(r.Charts) != 2 || len(r.Targets) != 8 || len(r.Notes) == 0 {
		t.Errorf("%d charts, %d targets, %d notes", len(r.Charts), len(r.Targets), len(r.Notes))
	}
	for _, c := range data.Cases {
		if !core.AllocFree(c.Allocs, c.Packets) || c.Packets == 0 || !(c.Mpps > 0) {
			t.Errorf("case %+v", c)
		}
	}
	// The Go map baseline, at the quick run's small sizes only.
	if len(data.Compares) != 2 || data.Compares[0].Flows != 1_000 || data.Compares[1].Flows != 10_000 {
		t.Errorf("Go map comparisons %+v, want at 1k and 10k", data.Compares)
	}
	for _, c := range data.Compares {
		if c.Allocs > uint64(c.Rounds) || !(c.GoMapNs > 0) || !(c.ConntrackNs > 0) || !(c.ConntrackBatchNs > 0) || !(c.LineNs > 0) || !(c.EngineNs > 0) {
			t.Errorf("comparison %+v", c)
		}
	}
	for _, tg := range r.Targets {
		if strings.Contains(tg.Name, "allocations") && !core.AllocTargetMet(&tg) {
			t.Errorf("target %+v", tg)
		}
	}
}

// TestCoreFlowSync: `lbbench core --flowsync` measures the headline's
// established-v4, realistic and syn cases with flow sync on too, in the
// same run, and reports them side by side.
func TestCoreFlowSync(t *testing.T) {
	var data core.Result
	r := runJSON(t, &data, "core", "--quick", "--json", "--flowsync", "--flows", "1k", "--workers", "1", "--duration", "10ms")
	on := 0
	for _, c := range data.Cases {
		if c.FlowSync {
			on++
			if !core.AllocFree(c.Allocs, c.Packets) || c.SyncDrops != 0 {
				t.Errorf("flow-sync case %+v", c)
			}
		}
	}
	found := false
	for _, tb := range r.Tables {
		found = found || (strings.HasPrefix(tb.Title, "Flow sync off and on") && len(tb.Rows) == 3)
	}
	if on != 3 || !found {
		t.Errorf("%d flow-sync cases, comparison table %v; want 3 and a table of 3 rows", on, found)
	}
}

func TestParseCounts(t *testing.T) {
	got, err := parseCounts("1k, 250,1M,4M")
	if err != nil || len(got) != 4 || got[0] != 1000 || got[1] != 250 || got[2] != 1_000_000 || got[3] != 4_000_000 {
		t.Errorf("parseCounts = %v, %v", got, err)
	}
	for _, bad := range []string{"", "0", "1G", "k", "-5"} {
		if _, err := parseCounts(bad); err == nil {
			t.Errorf("parseCounts(%q): no error", bad)
		}
	}
}

// TestReadBaseline: --baseline takes the in-cache engine cost (1k live
// flows) of a saved `lbbench core --json`, and says whether it came from
// this machine.
func TestReadBaseline(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, r report.Report) string {
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		f := filepath.Join(dir, name)
		if err := os.WriteFile(f, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return f
	}
	res := &core.Result{Compares: []core.Compare{{Flows: 100_000, EngineNs: 90}, {Flows: 1_000, EngineNs: 62}}}
	ref, err := readBaseline(write("here.json", report.Report{Command: "core", Machine: report.ThisMachine(), Data: res}))
	if err != nil || ref.EngineNs != 62 || !ref.SameMachine {
		t.Errorf("baseline %+v, %v; want 62 ns from this machine", ref, err)
	}
	other := report.ThisMachine()
	other.Hostname += "-other"
	ref, err = readBaseline(write("there.json", report.Report{Command: "core", Machine: other, Data: res}))
	if err != nil || ref.SameMachine {
		t.Errorf("baseline of another machine: %+v, %v", ref, err)
	}
	if _, err := readBaseline(write("maglev.json", report.Report{Command: "maglev", Data: res})); err == nil {
		t.Error("a maglev report accepted as a baseline")
	}
	if _, err := readBaseline(write("no1k.json", report.Report{Command: "core", Data: &core.Result{}})); err == nil {
		t.Error("a baseline without a 1k figure accepted")
	}
}

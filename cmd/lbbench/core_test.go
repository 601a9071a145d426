package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"xlb/bench/core"
)

// TestCoreQuickJSON runs `lbbench core --quick --json` as CI does and
// decodes what it prints: the report, with the engine's result as its data.
func TestCoreQuickJSON(t *testing.T) {
	var out, errb bytes.Buffer
	if rc := run([]string{"core", "--quick", "--json"}, &out, &errb); rc != 0 {
		t.Fatalf("exit %d, stderr: %s", rc, errb.String())
	}
	var r struct {
		Command string `json:"command"`
		Machine struct {
			Cores int `json:"cores"`
		} `json:"machine"`
		Tables []struct {
			Title   string     `json:"title"`
			Columns []string   `json:"columns"`
			Rows    [][]string `json:"rows"`
		} `json:"tables"`
		Targets []struct {
			Name     string  `json:"name"`
			Measured float64 `json:"measured"`
			Met      bool    `json:"met"`
		} `json:"targets"`
		Charts []struct {
			File string `json:"file"`
		} `json:"charts"`
		Notes []string    `json:"notes"`
		Data  core.Result `json:"data"`
	}
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatalf("output is not the report's JSON: %v\n%s", err, out.String())
	}
	if r.Command != "core" || r.Machine.Cores == 0 || !r.Data.Quick {
		t.Errorf("command %q, cores %d, quick %v", r.Command, r.Machine.Cores, r.Data.Quick)
	}
	// Quick: no table of a million flows.
	if r.Data.Headline != 100_000 || len(r.Data.Prefills) != 3 {
		t.Errorf("headline %d, %d prefills", r.Data.Headline, len(r.Data.Prefills))
	}
	if !strings.HasPrefix(r.Tables[0].Title, "Engine against live flows") || len(r.Tables[0].Rows) != 3*5 {
		t.Errorf("first table %q with %d rows, want 15 (3 tables x 5 mixes)", r.Tables[0].Title, len(r.Tables[0].Rows))
	}
	if len(r.Charts) != 2 || len(r.Targets) != 4 || len(r.Notes) == 0 {
		t.Errorf("%d charts, %d targets, %d notes", len(r.Charts), len(r.Targets), len(r.Notes))
	}
	for _, c := range r.Data.Cases {
		if c.Allocs != 0 || c.Packets == 0 || !(c.Mpps > 0) {
			t.Errorf("case %+v", c)
		}
	}
	for _, tg := range r.Targets {
		if strings.Contains(tg.Name, "allocations") && (!tg.Met || tg.Measured != 0) {
			t.Errorf("target %+v", tg)
		}
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

package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// TestMaglevQuickJSON runs `lbbench maglev --quick --json` as CI does and
// decodes what it prints.
func TestMaglevQuickJSON(t *testing.T) {
	var out, errb bytes.Buffer
	if rc := run([]string{"maglev", "--quick", "--json"}, &out, &errb); rc != 0 {
		t.Fatalf("exit %d, stderr: %s", rc, errb.String())
	}
	var r struct {
		Command string `json:"command"`
		Machine struct {
			Cores int `json:"cores"`
		} `json:"machine"`
		Tables []struct {
			Title string     `json:"title"`
			Rows  [][]string `json:"rows"`
		} `json:"tables"`
		Targets []struct {
			Name string `json:"name"`
			Met  bool   `json:"met"`
		} `json:"targets"`
		Charts []struct {
			File string `json:"file"`
		} `json:"charts"`
		Data struct {
			Quick      bool              `json:"quick"`
			Sizes      []uint32          `json:"sizes"`
			Builds     []json.RawMessage `json:"builds"`
			Disruption []struct {
				Change    string  `json:"change"`
				RatioMean float64 `json:"ratio_mean"`
			} `json:"disruption"`
			Lookup []struct {
				Ns float64 `json:"ns"`
			} `json:"lookup"`
		} `json:"data"`
	}
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatalf("output is not the report's JSON: %v\n%s", err, out.String())
	}
	if r.Command != "maglev" || r.Machine.Cores == 0 || !r.Data.Quick {
		t.Errorf("command %q, cores %d, quick %v", r.Command, r.Machine.Cores, r.Data.Quick)
	}
	if len(r.Tables) != 5 || len(r.Targets) == 0 || len(r.Charts) == 0 {
		t.Fatalf("%d tables, %d targets, %d charts", len(r.Tables), len(r.Targets), len(r.Charts))
	}
	if !strings.HasPrefix(r.Tables[0].Title, "Build time") || len(r.Tables[0].Rows) != len(r.Data.Builds) {
		t.Errorf("first table %q with %d rows for %d builds", r.Tables[0].Title, len(r.Tables[0].Rows), len(r.Data.Builds))
	}
	if len(r.Data.Disruption) == 0 || r.Data.Disruption[0].RatioMean < 1 || len(r.Data.Lookup) == 0 || r.Data.Lookup[0].Ns <= 0 {
		t.Errorf("data: %+v", r.Data)
	}
}

func TestMaglevFlags(t *testing.T) {
	var out, errb bytes.Buffer
	if rc := run([]string{"maglev", "-h"}, &out, &errb); rc != 0 || !strings.Contains(errb.String(), "-cpuprofile") {
		t.Errorf("maglev -h: exit %d, stderr %q", rc, errb.String())
	}
	errb.Reset()
	if rc := run([]string{"maglev", "--quick", "extra"}, &out, &errb); rc != 1 || !strings.Contains(errb.String(), "extra") {
		t.Errorf("maglev extra: exit %d, stderr %q", rc, errb.String())
	}
}

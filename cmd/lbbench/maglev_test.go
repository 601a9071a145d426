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
	var data struct {
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
	}
	r := runJSON(t, &data, "maglev", "--quick", "--json")
	if r.Command != "maglev" || r.Machine.Cores == 0 || !data.Quick {
		t.Errorf("command %q, cores %d, quick %v", r.Command, r.Machine.Cores, data.Quick)
	}
	if len(r.Tables) != 5 || len(r.Targets) == 0 || len(r.Charts) == 0 {
		t.Fatalf("%d tables, %d targets, %d charts", len(r.Tables), len(r.Targets), len(r.Charts))
	}
	if !strings.HasPrefix(r.Tables[0].Title, "Build time") || len(r.Tables[0].Rows) != len(data.Builds) {
		t.Errorf("first table %q with %d rows for %d builds", r.Tables[0].Title, len(r.Tables[0].Rows), len(data.Builds))
	}
	if len(data.Disruption) == 0 || data.Disruption[0].RatioMean < 1 || len(data.Lookup) == 0 || data.Lookup[0].Ns <= 0 {
		t.Errorf("data: %+v", data)
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

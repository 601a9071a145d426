package main

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"xlb/bench/report"
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

// TestMaglevPlot: --plot writes every chart of the report, each a whole
// SVG document (encoding/xml reads it to the end) with the chart's title,
// axis labels and every series' name in its text; the report is printed
// too.
func TestMaglevPlot(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "charts")
	var out, errb bytes.Buffer
	if rc := run([]string{"maglev", "--quick", "--json", "--plot", dir}, &out, &errb); rc != 0 {
		t.Fatalf("exit %d, stderr: %s", rc, errb.String())
	}
	var r report.Report
	if err := json.Unmarshal(out.Bytes(), &r); err != nil || len(r.Charts) != 4 {
		t.Fatalf("report: %v, %d charts", err, len(r.Charts))
	}
	for _, c := range r.Charts {
		path := filepath.Join(dir, c.File+".svg")
		if !strings.Contains(errb.String(), "wrote "+path+"\n") {
			t.Errorf("stderr does not name %s: %s", path, errb.String())
		}
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var text []string
		d := xml.NewDecoder(bytes.NewReader(data))
		for root := true; ; {
			tok, err := d.Token()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			switch e := tok.(type) {
			case xml.StartElement:
				if root && (e.Name.Local != "svg" || e.Name.Space != "http://www.w3.org/2000/svg") {
					t.Fatalf("%s: root %v", path, e.Name)
				}
				root = false
			case xml.CharData:
				text = append(text, strings.TrimSpace(string(e)))
			}
		}
		want := []string{c.Title, c.XLabel, c.YLabel}
		for _, s := range c.Series {
			want = append(want, s.Name)
		}
		for _, w := range want {
			if !slices.Contains(text, w) {
				t.Errorf("%s: no text %q", path, w)
			}
		}
	}
}

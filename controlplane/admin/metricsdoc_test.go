package admin_test

import (
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"xlb/controlplane/cptest"
)

// TestMetricsDocumented: every xlb_ family a full scrape exports is a row
// of METRICS.md with its type and labels, and every row is exported.
func TestMetricsDocumented(t *testing.T) {
	text, err := os.ReadFile("METRICS.md")
	if err != nil {
		t.Fatal(err)
	}
	type row struct{ typ, labels string }
	doc := map[string]row{}
	for line := range strings.Lines(string(text)) {
		if !strings.HasPrefix(line, "| `xlb_") {
			continue
		}
		cells := strings.Split(line, "|")
		if len(cells) != 6 {
			t.Fatalf("METRICS.md row with %d cells, want 4: %s", len(cells)-2, line)
		}
		name := strings.Trim(cells[1], " `")
		labels := strings.Fields(strings.NewReplacer("`", "", ",", " ").Replace(cells[3]))
		slices.Sort(labels)
		doc[name] = row{strings.TrimSpace(cells[2]), strings.Join(labels, ",")}
	}

	r, src := newRig(t)
	traffic(t, r, src)
	src.health.Observe("http", true, time.Millisecond) // histograms export from the first probe
	_, fams := scrape(t, startServer(t, src))
	// The weight-state families exist only for WEIGHTED_MAGLEV services.
	wr := cptest.New(t, weightedToml)
	_, wfams := scrape(t, startServer(t, &rigSources{rig: wr}))
	for _, name := range []string{"xlb_service_weight_fallback", "xlb_backend_weight_state"} {
		if f, ok := wfams[name]; ok {
			fams[name] = f
		}
	}
	for name, f := range fams {
		if !strings.HasPrefix(name, "xlb_") {
			continue
		}
		var labels []string
		for _, l := range f.GetMetric()[0].GetLabel() {
			labels = append(labels, l.GetName())
		}
		slices.Sort(labels)
		got := row{strings.ToLower(f.GetType().String()), strings.Join(labels, ",")}
		if d, ok := doc[name]; !ok {
			t.Errorf("%s is not documented in METRICS.md", name)
		} else if d != got {
			t.Errorf("%s: METRICS.md says %+v, exported %+v", name, d, got)
		}
	}
	for name := range doc {
		if _, ok := fams[name]; !ok {
			t.Errorf("METRICS.md documents %s, which is not exported", name)
		}
	}
}

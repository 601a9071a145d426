package admin_test

import (
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestGrafanaDashboard: the sample dashboard is valid JSON with panels,
// and every xlb_ metric its queries name is documented in METRICS.md
// (a histogram's _bucket, _sum and _count series by its family name).
func TestGrafanaDashboard(t *testing.T) {
	raw, err := os.ReadFile("grafana-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatalf("grafana-dashboard.json: %v", err)
	}
	doc, err := os.ReadFile("METRICS.md")
	if err != nil {
		t.Fatal(err)
	}
	name := regexp.MustCompile(`xlb_[a-z0-9_]+`)
	used := 0
	for _, p := range d.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, q := range p.Targets {
			for _, m := range name.FindAllString(q.Expr, -1) {
				used++
				family := m
				for _, suf := range []string{"_bucket", "_sum", "_count"} {
					if strings.HasSuffix(m, "_seconds"+suf) {
						family = strings.TrimSuffix(m, suf)
					}
				}
				if !strings.Contains(string(doc), "| `"+family+"` |") {
					t.Errorf("panel %q uses %s, which METRICS.md does not document", p.Title, m)
				}
			}
		}
	}
	if used == 0 {
		t.Error("the dashboard names no xlb_ metric")
	}
}

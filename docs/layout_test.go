package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestLayoutTable keeps the layout section of docs/architecture.md true to
// the tree:
// every top-level folder (but .ci and other dot folders, and build
// outputs) has a row, every row is a folder that exists, and each folder one level below
// is named (in backquotes) in its parent's row.
func TestLayoutTable(t *testing.T) {
	readme, err := os.ReadFile("architecture.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(readme), "\n## Layout\n")
	section, _, _ = strings.Cut(section, "\n## ")
	if !ok {
		t.Fatal("docs/architecture.md has no ## Layout section")
	}
	rows := map[string]string{}
	rowRE := regexp.MustCompile("(?m)^\\| `([^`]+)` \\|(.*)\\|$")
	for _, m := range rowRE.FindAllStringSubmatch(section, -1) {
		rows[m[1]] = m[2]
	}
	// The tree as a fresh clone has it: dot folders and what .gitignore
	// names (build outputs) left out.
	ignore := map[string]bool{}
	if gi, err := os.ReadFile("../.gitignore"); err == nil {
		for _, l := range strings.Fields(string(gi)) {
			ignore[strings.Trim(l, "/")] = true
		}
	}
	top := map[string]bool{}
	sub := map[string]map[string]bool{}
	ents, err := os.ReadDir("..")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if !e.IsDir() || strings.HasPrefix(e.Name(), ".") || ignore[e.Name()] {
			continue
		}
		top[e.Name()] = true
		subs, err := os.ReadDir(filepath.Join("..", e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range subs {
			// A package's testdata/ holds its tests' inputs (Go's
			// convention), no room of its own.
			if s.IsDir() && !ignore[s.Name()] && s.Name() != "testdata" {
				if sub[e.Name()] == nil {
					sub[e.Name()] = map[string]bool{}
				}
				sub[e.Name()][s.Name()] = true
			}
		}
	}
	for dir := range top {
		row, ok := rows[dir]
		if !ok {
			t.Errorf("docs/architecture.md layout: no row for %s/", dir)
			continue
		}
		for s := range sub[dir] {
			if !strings.Contains(row, "`"+s+"`") && !strings.Contains(row, "`"+s+"/`") {
				t.Errorf("docs/architecture.md layout: the %s row does not name %s/%s", dir, dir, s)
			}
		}
	}
	for dir := range rows {
		if !top[dir] {
			t.Errorf("docs/architecture.md layout: row %s names no folder of the tree", dir)
		}
	}
}

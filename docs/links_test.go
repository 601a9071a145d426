package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// linkRE matches a Markdown link's target: [text](target).
var linkRE = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// TestLinks: every relative link in the README, CONTRIBUTING.md and docs/
// names a file of the tree, and every #anchor a heading of the page it
// points into, so that moving a section cannot leave a link behind.
func TestLinks(t *testing.T) {
	pages, err := filepath.Glob("*.md")
	if err != nil {
		t.Fatal(err)
	}
	pages = append(pages, "../README.md", "../CONTRIBUTING.md", "../scripts/README.md", "../controlplane/admin/METRICS.md")
	for _, page := range pages {
		for _, p := range brokenLinks(t, page) {
			t.Error(p)
		}
	}
}

// TestLinksCatchBreaks: a link to a missing file and one to a missing
// heading are both reported.
func TestLinksCatchBreaks(t *testing.T) {
	dir := t.TempDir()
	page := filepath.Join(dir, "page.md")
	os.WriteFile(filepath.Join(dir, "other.md"), []byte("# Other\n\n## A section, with `code`\n"), 0o644)
	os.WriteFile(page, []byte("[ok](other.md#a-section-with-code) [self](#page)\n"+
		"[gone](missing.md) [no heading](other.md#no-such)\n# Page\n"), 0o644)
	got := strings.Join(brokenLinks(t, page), "\n")
	for _, want := range []string{"missing.md", "other.md#no-such"} {
		if !strings.Contains(got, want) {
			t.Errorf("%s not reported; got:\n%s", want, got)
		}
	}
	if strings.Contains(got, "a-section-with-code") || strings.Contains(got, "#page") {
		t.Errorf("a good link reported:\n%s", got)
	}
}

func brokenLinks(t *testing.T, page string) []string {
	t.Helper()
	raw, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	var bad []string
	for _, m := range linkRE.FindAllStringSubmatch(stripCode(string(raw)), -1) {
		target := m[1]
		if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
			continue
		}
		file, anchor, _ := strings.Cut(target, "#")
		path := page
		if file != "" {
			path = filepath.Join(filepath.Dir(page), file)
			if _, err := os.Stat(path); err != nil {
				bad = append(bad, page+": link to "+target+": no such file")
				continue
			}
		}
		if anchor == "" || !strings.HasSuffix(path, ".md") {
			continue
		}
		doc, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if !anchors(string(doc))[anchor] {
			bad = append(bad, page+": link to "+target+": no such heading")
		}
	}
	return bad
}

// stripCode removes fenced code blocks, whose brackets are not links.
func stripCode(s string) string {
	var out []string
	in := false
	for _, l := range strings.Split(s, "\n") {
		if strings.HasPrefix(l, "```") {
			in = !in
			continue
		}
		if !in {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// anchors are GitHub's heading IDs: lower case, spaces to hyphens,
// punctuation but hyphens and underscores dropped.
func anchors(doc string) map[string]bool {
	ids := map[string]bool{}
	for _, l := range strings.Split(stripCode(doc), "\n") {
		if !strings.HasPrefix(l, "#") {
			continue
		}
		h := strings.TrimSpace(strings.TrimLeft(l, "#"))
		var b strings.Builder
		for _, r := range strings.ToLower(h) {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r > 127 && isLetter(r):
				b.WriteRune(r)
			}
		}
		ids[b.String()] = true
	}
	return ids
}

func isLetter(r rune) bool { return strings.ToLower(string(r)) != strings.ToUpper(string(r)) }

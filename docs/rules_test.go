package docs

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/scanner"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
)

// rulesDoc is the page checked, relative to the module root.
const rulesDoc = "docs/rules.md"

// noneYet is how rules.md says that a rule has no proof yet; a reason must
// follow it on the same line.
const noneYet = "Proven by: none yet — "

// TestRulesDoc keeps docs/rules.md from drifting away from the code:
//
//	(a) every rule ID used in the repository (Go comments, string literals
//	    and test names; Markdown, scenario, shell, TOML files and the
//	    Makefile) is defined in rules.md as a "### ID — title" heading
//	    (a level-3 heading that starts with a digit is a numbered
//	    sub-section, "### 5.1 ...", any other must start with an ID);
//	(b) every test rules.md names as a proof (`TestName` in `dir`) exists as
//	    a func in a *_test.go file of that directory, every path under
//	    testdata/ it names exists, and every rule has a proof or says
//	    "Proven by: none yet — " and why;
//	(c) every test whose name starts with rule IDs (TestE1M3P1_...) is
//	    listed, with its directory, under each of those IDs.
//
// The set of rule-ID prefixes (FR, CT, A, ...) is derived from the headings
// of rules.md itself, so a new family of rules needs no change here.
//
// That it fails on a broken page is checked by TestRulesDocCatchesDrift
// below, on mutated copies of the page (a rule removed, a proof renamed, a
// proof left without its directory, a rule left without proofs, an
// ID-named test left out); it was also checked by hand by deleting the
// "### CT2" section from docs/rules.md and running this test, which then
// failed with "CT2 is used in README.md:12, README.md:173, README.md:186,
// controlplane/explain/explain.go:224, controlplane/explain/explain.go:226,
// and 16 more but not defined in docs/rules.md".
func TestRulesDoc(t *testing.T) {
	root := moduleRoot(t)
	doc, err := os.ReadFile(filepath.Join(root, rulesDoc))
	if err != nil {
		t.Fatal(err)
	}
	repo := scanRepo(t, root)
	for _, p := range checkRules(string(doc), repo, root) {
		t.Error(p)
	}
}

// TestRulesDocCatchesDrift runs the checks of TestRulesDoc on broken copies
// of rules.md and wants each break reported: a check that cannot fail proves
// nothing.
func TestRulesDocCatchesDrift(t *testing.T) {
	root := moduleRoot(t)
	raw, err := os.ReadFile(filepath.Join(root, rulesDoc))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	repo := scanRepo(t, root)
	section := func(id string) string { // the "### ID" section, heading included
		start := strings.Index(doc, "\n### "+id+" ")
		if start < 0 {
			t.Fatalf("no section %s in rules.md", id)
		}
		end := strings.Index(doc[start+1:], "\n#")
		return doc[start+1 : start+1+end+1]
	}
	ct2 := section("CT2")
	w2 := section("W2")
	for _, tc := range []struct {
		name, doc, want string
	}{
		{"RuleRemoved", strings.Replace(doc, ct2, "", 1), "CT2 is used in"},
		{"ProofRenamed", strings.Replace(doc, "`TestCT2_SynPerSession` in", "`TestCT2_SynPerSessionX` in", 1),
			"TestCT2_SynPerSessionX"},
		{"ProofWithoutDir", strings.Replace(doc, "`TestM2_FinAndRstKeepTheEntry` in `controlplane`", "`TestM2_FinAndRstKeepTheEntry`", 1),
			"name the directory"},
		{"ProofInWrongDir", strings.Replace(doc, "`TestM2_FinAndRstKeepTheEntry` in `controlplane`", "`TestM2_FinAndRstKeepTheEntry` in `dataplane`", 1),
			"no func TestM2_FinAndRstKeepTheEntry in dataplane"},
		{"NoProof", strings.Replace(doc, w2, "### W2 — weights\n\nText only.\n\n", 1), "W2 has no proof"},
		{"IDTestUnlisted", strings.Replace(doc, "- `TestE1M3P1_UnhealthyBackend` in `scripts/e2e`\n", "", 1),
			"TestE1M3P1_UnhealthyBackend (scripts/e2e) is named after M3"},
		{"MissingScenario", strings.Replace(doc, "`testdata/sim/icmp_ptb.jsonl`", "`testdata/sim/icmp_gone.jsonl`", 1),
			"testdata/sim/icmp_gone.jsonl does not exist"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.doc == doc {
				t.Fatal("the mutation changed nothing; update this test to the page")
			}
			ps := checkRules(tc.doc, repo, root)
			if !slices.ContainsFunc(ps, func(p string) bool { return strings.Contains(p, tc.want) }) {
				t.Errorf("no problem mentions %q; got %d:\n%s", tc.want, len(ps), strings.Join(ps, "\n"))
			}
		})
	}
}

// ----------------------------------------------------------------- rules.md

type rule struct {
	id      string
	line    int
	proofs  []proof
	noneYet bool
}

type proof struct {
	test, dir string
	line      int
}

var (
	headingRE = regexp.MustCompile(`^(#{1,6})\s+(.*)$`)
	ruleIDRE  = regexp.MustCompile(`^([A-Z]+)(\d+)([a-z]?)$`)
	// `TestName`, optionally followed by " in `dir`".
	proofRE = regexp.MustCompile("`(Test[A-Za-z0-9_]*)`(?: in `([^`]+)`)?")
	// A repository path under testdata/ in backquotes.
	pathRE = regexp.MustCompile("`(testdata/[^`\\s]+)`")
)

// parseRules reads the rule sections of rules.md: a section starts at a
// "### ID — title" heading and ends at the next heading.
func parseRules(doc string) (rules map[string]*rule, outside []proof, problems []string) {
	rules = map[string]*rule{}
	var cur *rule
	for i, line := range strings.Split(doc, "\n") {
		n := i + 1
		if m := headingRE.FindStringSubmatch(line); m != nil {
			cur = nil
			if len(m[1]) == 3 {
				id, _, _ := strings.Cut(m[2], " ")
				if id[0] >= '0' && id[0] <= '9' {
					continue // a numbered sub-section, "### 5.1 Eligible backends"
				}
				if !ruleIDRE.MatchString(id) {
					problems = append(problems, fmt.Sprintf("%s:%d: heading %q does not start with a rule ID", rulesDoc, n, line))
					continue
				}
				if prev, dup := rules[id]; dup {
					problems = append(problems, fmt.Sprintf("%s:%d: %s is defined twice (first at line %d)", rulesDoc, n, id, prev.line))
					continue
				}
				cur = &rule{id: id, line: n}
				rules[id] = cur
			}
			continue
		}
		for _, m := range proofRE.FindAllStringSubmatch(line, -1) {
			if m[2] == "" {
				problems = append(problems, fmt.Sprintf("%s:%d: `%s`: name the directory of its package: `%s` in `dir`", rulesDoc, n, m[1], m[1]))
				continue
			}
			p := proof{test: m[1], dir: m[2], line: n}
			if cur != nil {
				cur.proofs = append(cur.proofs, p)
			} else {
				outside = append(outside, p)
			}
		}
		if cur != nil && strings.Contains(line, noneYet) {
			if _, why, _ := strings.Cut(line, noneYet); strings.TrimSpace(why) == "" {
				problems = append(problems, fmt.Sprintf("%s:%d: %s: say why no proof exists yet", rulesDoc, n, cur.id))
			}
			cur.noneYet = true
		}
	}
	return rules, outside, problems
}

// idRegexp matches the IDs of the given prefixes as words. A match preceded
// by '.' is a Go selector (asm.R1, a.P50), not a rule; the caller skips it.
func idRegexp(prefixes []string) *regexp.Regexp {
	// Longest first, so that FR is not read as F.
	sort.Slice(prefixes, func(i, j int) bool {
		if len(prefixes[i]) != len(prefixes[j]) {
			return len(prefixes[i]) > len(prefixes[j])
		}
		return prefixes[i] < prefixes[j]
	})
	return regexp.MustCompile(`\b(?:` + strings.Join(prefixes, "|") + `)\d+[a-z]?\b`)
}

// testIDs returns the rule IDs a test name starts with, the project's
// convention being Test<ID><ID>..._Description; nil if it has none.
func testIDs(name string, one *regexp.Regexp) []string {
	rest, ok := strings.CutPrefix(name, "Test")
	if !ok {
		return nil
	}
	var ids []string
	for {
		loc := one.FindStringIndex(rest)
		if loc == nil || loc[0] != 0 {
			break
		}
		ids = append(ids, rest[:loc[1]])
		rest = rest[loc[1]:]
	}
	if len(ids) == 0 || !strings.HasPrefix(rest, "_") {
		return nil
	}
	return ids
}

// checkRules returns every problem of doc against the repository.
func checkRules(doc string, repo *repoIndex, root string) []string {
	rules, outside, problems := parseRules(doc)
	if len(rules) == 0 {
		return append(problems, rulesDoc+": defines no rule")
	}
	prefixSet := map[string]bool{}
	for id := range rules {
		prefixSet[ruleIDRE.FindStringSubmatch(id)[1]] = true
	}
	prefixes := make([]string, 0, len(prefixSet))
	for p := range prefixSet {
		prefixes = append(prefixes, p)
	}
	idRE := idRegexp(prefixes)
	oneRE := regexp.MustCompile(`^(?:` + strings.Join(prefixes, "|") + `)\d+[a-z]?`)

	// (a) Every ID used is defined.
	used := map[string][]string{} // ID -> where
	for _, txt := range repo.texts {
		for _, loc := range idRE.FindAllStringIndex(txt.text, -1) {
			if loc[0] > 0 && txt.text[loc[0]-1] == '.' {
				continue
			}
			id := txt.text[loc[0]:loc[1]]
			used[id] = append(used[id], txt.where)
		}
	}
	for dir, tests := range repo.tests {
		for name := range tests {
			for _, id := range testIDs(name, oneRE) {
				used[id] = append(used[id], dir+": "+name)
			}
		}
	}
	for _, id := range sortedKeys(used) {
		if rules[id] == nil {
			where := slices.Compact(slices.Sorted(slices.Values(used[id])))
			if len(where) > 5 {
				where = append(where[:5], fmt.Sprintf("and %d more", len(where)-5))
			}
			problems = append(problems, fmt.Sprintf("%s is used in %s but not defined in %s", id, strings.Join(where, ", "), rulesDoc))
		}
	}

	// (b) Every proof exists; every rule has one or says why not.
	for _, id := range sortedKeys(rules) {
		r := rules[id]
		for _, p := range r.proofs {
			if !repo.tests[filepath.ToSlash(filepath.Clean(p.dir))][p.test] {
				problems = append(problems, fmt.Sprintf("%s:%d: %s: no func %s in %s/*_test.go", rulesDoc, p.line, id, p.test, p.dir))
			}
		}
		switch {
		case len(r.proofs) == 0 && !r.noneYet:
			problems = append(problems, fmt.Sprintf("%s:%d: %s has no proof; name a test or write %q and why", rulesDoc, r.line, id, noneYet))
		case len(r.proofs) > 0 && r.noneYet:
			problems = append(problems, fmt.Sprintf("%s:%d: %s names proofs and says it has none", rulesDoc, r.line, id))
		}
	}
	for _, p := range outside {
		if !repo.tests[filepath.ToSlash(filepath.Clean(p.dir))][p.test] {
			problems = append(problems, fmt.Sprintf("%s:%d: no func %s in %s/*_test.go", rulesDoc, p.line, p.test, p.dir))
		}
	}
	for i, line := range strings.Split(doc, "\n") {
		for _, m := range pathRE.FindAllStringSubmatch(line, -1) {
			if _, err := os.Stat(filepath.Join(root, filepath.FromSlash(m[1]))); err != nil {
				problems = append(problems, fmt.Sprintf("%s:%d: %s does not exist", rulesDoc, i+1, m[1]))
			}
		}
	}

	// (c) Every test named after rules is listed under each of them.
	for _, dir := range sortedKeys(repo.tests) {
		for _, name := range sortedKeys(repo.tests[dir]) {
			for _, id := range testIDs(name, oneRE) {
				r := rules[id]
				if r == nil {
					continue // reported by (a)
				}
				if !slices.ContainsFunc(r.proofs, func(p proof) bool { return p.test == name && p.dir == dir }) {
					problems = append(problems, fmt.Sprintf("%s (%s) is named after %s but not listed under it in %s", name, dir, id, rulesDoc))
				}
			}
		}
	}
	return problems
}

func sortedKeys[V any](m map[string]V) []string {
	return slices.Sorted(func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	})
}

// ------------------------------------------------------------ repository

// repoIndex is what the checks read from the repository.
type repoIndex struct {
	// tests: directory (slash-separated, relative to the root) -> names of
	// the Test functions of its *_test.go files.
	tests map[string]map[string]bool
	// texts: where rule IDs may be written.
	texts []text
}

type text struct {
	where string // file:line
	text  string
}

// plainFiles are scanned as a whole for rule IDs.
func plainFile(name string) bool {
	switch filepath.Ext(name) {
	case ".md", ".jsonl", ".sh", ".toml":
		return true
	}
	return name == "Makefile"
}

// scanRepo indexes the module under root: the tests of every *_test.go
// file, and the comments and string literals of every .go file, whatever
// its build constraints. Hidden directories and build outputs are skipped,
// and so is rules.md, which defines the IDs rather than using them.
func scanRepo(t *testing.T, root string) *repoIndex {
	t.Helper()
	repo := &repoIndex{tests: map[string]map[string]bool{}}
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		name := d.Name()
		if d.IsDir() {
			if path != root && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") ||
				rel == "bin" || rel == "bench-out" || name == "vendor") {
				return filepath.SkipDir
			}
			return nil
		}
		if rel == rulesDoc || !d.Type().IsRegular() {
			return nil
		}
		switch {
		case strings.HasSuffix(name, ".go"):
			src, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			repo.texts = append(repo.texts, goTexts(rel, src)...)
			if strings.HasSuffix(name, "_test.go") {
				f, err := parser.ParseFile(fset, path, src, parser.SkipObjectResolution)
				if err != nil {
					return err
				}
				dir := filepath.ToSlash(filepath.Dir(rel))
				if repo.tests[dir] == nil {
					repo.tests[dir] = map[string]bool{}
				}
				for _, decl := range f.Decls {
					if fn, ok := decl.(*ast.FuncDecl); ok && fn.Recv == nil && strings.HasPrefix(fn.Name.Name, "Test") {
						repo.tests[dir][fn.Name.Name] = true
					}
				}
			}
		case plainFile(name):
			src, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			for i, line := range strings.Split(string(src), "\n") {
				repo.texts = append(repo.texts, text{fmt.Sprintf("%s:%d", rel, i+1), line})
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(repo.tests) < 5 {
		t.Fatalf("found tests in %d directories under %s; is that the module?", len(repo.tests), root)
	}
	return repo
}

// goTexts returns the comments and string literals of a Go file: where a
// rule ID can be written without being code (identifiers such as a.P50 or
// asm.R1 are not rules; test names are read from the syntax tree instead).
func goTexts(rel string, src []byte) []text {
	var out []text
	fset := token.NewFileSet()
	file := fset.AddFile(rel, -1, len(src))
	var s scanner.Scanner
	s.Init(file, src, nil, scanner.ScanComments)
	for {
		pos, tok, lit := s.Scan()
		if tok == token.EOF {
			return out
		}
		if tok == token.COMMENT || tok == token.STRING {
			out = append(out, text{fmt.Sprintf("%s:%d", rel, fset.Position(pos).Line), lit})
		}
	}
}

// moduleRoot is the directory above this package, where go.mod is.
func moduleRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("no go.mod above the docs package: %v", err)
	}
	return root
}

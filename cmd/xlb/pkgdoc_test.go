package main

import (
	"go/ast"
	"go/build/constraint"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// TestPackageDocs: every package of the module (tests aside) has a package
// doc comment, in the Go form "Package name ..." (a command may start its
// own way, "Command xlb ..."). It parses the source tree with go/parser, so
// a package added later is held to it as well.
func TestPackageDocs(t *testing.T) {
	root := moduleRoot(t)
	type pkg struct {
		dir, name string
		docs      []string // doc comments found, one per file that has one
	}
	pkgs := map[string]*pkg{} // dir + name
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != root && (name == "testdata" || name == "vendor" ||
				strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
				return filepath.SkipDir
			}
			if path != root {
				if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
					return filepath.SkipDir // another module
				}
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") ||
			strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.PackageClauseOnly|parser.ParseComments)
		if err != nil {
			return err
		}
		if ignored(f.Comments, f.Package) {
			return nil
		}
		dir, _ := filepath.Rel(root, filepath.Dir(path))
		key := dir + "\x00" + f.Name.Name
		p := pkgs[key]
		if p == nil {
			p = &pkg{dir: dir, name: f.Name.Name}
			pkgs[key] = p
		}
		if f.Doc != nil {
			p.docs = append(p.docs, f.Doc.Text())
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(pkgs) < 2 {
		t.Fatalf("found %d packages under %s; is that the module?", len(pkgs), root)
	}
	keys := make([]string, 0, len(pkgs))
	for k := range pkgs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		p := pkgs[k]
		switch {
		case len(p.docs) == 0:
			t.Errorf("%s: package %s has no package doc comment", p.dir, p.name)
		case p.name != "main" && !hasPrefix(p.docs, "Package "+p.name+" "):
			t.Errorf("%s: package doc does not start with %q: %q", p.dir, "Package "+p.name, p.docs[0])
		}
		if len(p.docs) > 1 {
			t.Logf("%s: package %s has %d package doc comments; keep one (doc.go)", p.dir, p.name, len(p.docs))
		}
	}
}

func hasPrefix(docs []string, prefix string) bool {
	for _, d := range docs {
		if strings.HasPrefix(d, prefix) {
			return true
		}
	}
	return false
}

// ignored reports a file excluded from every build by a "//go:build ignore"
// line (the convention for generators and examples).
func ignored(comments []*ast.CommentGroup, pkgPos token.Pos) bool {
	for _, g := range comments {
		if g.Pos() >= pkgPos {
			break
		}
		for _, c := range g.List {
			if !constraint.IsGoBuild(c.Text) {
				continue
			}
			expr, err := constraint.Parse(c.Text)
			if tag, ok := expr.(*constraint.TagExpr); err == nil && ok && tag.Tag == "ignore" {
				return true
			}
		}
	}
	return false
}

// moduleRoot finds the directory of go.mod above the test's directory.
func moduleRoot(tb testing.TB) string {
	tb.Helper()
	dir, err := os.Getwd()
	if err != nil {
		tb.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			tb.Fatal("no go.mod above the test directory")
		}
		dir = parent
	}
}

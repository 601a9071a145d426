package nettest

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// handSkip is a test that asks for root by itself and skips: RequireRoot
// and RequireRootTo are the one place for that, so that every such skip
// says the same thing the same way.
var handSkip = regexp.MustCompile(`os\.Get(e)?uid\(\) != 0 \{\s*\n\s*\w+\.Skip`)

// TestRootChecksUseTheHelper: no test file of the repository checks for
// root by hand before skipping.
func TestRootChecksUseTheHelper(t *testing.T) {
	root := filepath.Join("..", "..")
	var found []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, "_test.go") || strings.HasSuffix(path, "onehelper_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if handSkip.Match(b) {
			found = append(found, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range found {
		t.Errorf("%s checks for root by hand before skipping: use nettest.RequireRoot or RequireRootTo", f)
	}
}

// TestHandSkipPattern: the pattern above finds a hand-written check, so
// that the test above can fail.
func TestHandSkipPattern(t *testing.T) {
	hand := "\tif os.Geteuid() != 0 {\n\t\tt.Skip(\"needs root\")\n\t}\n"
	if !handSkip.MatchString(hand) {
		t.Error("the pattern misses a hand-written root check")
	}
	if handSkip.MatchString("\tnettest.RequireRootTo(t, \"chown\")\n") {
		t.Error("the pattern matches the helper")
	}
}

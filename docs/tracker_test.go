package docs

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
)

// trackerRE matches a reference to our own tracker (the word issue and a
// number), which means nothing in a clone. Built from parts so that this
// file does not match itself.
var trackerRE = regexp.MustCompile(`(?i)\b` + `issues?` + ` #?[0-9]+\b`)

// TestNoTrackerNumbers: no tracked text file of the repository names a
// tracker number; a clone must explain itself in its own words.
func TestNoTrackerNumbers(t *testing.T) {
	for _, hit := range trackerHits(t, "..") {
		t.Error(hit)
	}
}

// TestNoTrackerNumbersCatches: a file naming a tracker number is reported,
// one naming none is not.
func TestNoTrackerNumbersCatches(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "a.go"), []byte("// as Iss"+"ue 12 asks\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "b.md"), []byte("an issue of taste; 12 issues\n"), 0o644)
	hits := trackerHits(t, dir)
	if len(hits) != 1 || !bytes.Contains([]byte(hits[0]), []byte("a.go:1")) {
		t.Errorf("hits = %q, want one in a.go:1", hits)
	}
}

func trackerHits(t *testing.T, root string) []string {
	t.Helper()
	var hits []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if d.Name() == ".git" || d.Name() == "node_modules" {
				return filepath.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() || d.Name() == "go.sum" {
			return nil
		}
		raw, err := os.ReadFile(path)
		if err != nil || bytes.IndexByte(raw, 0) >= 0 {
			return nil // unreadable or binary: not text a reader scans
		}
		for i, line := range bytes.Split(raw, []byte("\n")) {
			if m := trackerRE.Find(line); m != nil {
				hits = append(hits, path+":"+strconv.Itoa(i+1)+": "+string(m))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return hits
}

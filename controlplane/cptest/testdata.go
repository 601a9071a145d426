package cptest

import (
	"os"
	"path/filepath"
	"testing"
)

// Testdata is the text of testdata/name in the directory of the package
// under test, where go test runs its tests, or fails the test. Tests keep
// their whole configurations there (Go's convention) rather than inline.
func Testdata(tb testing.TB, name string) string {
	tb.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		tb.Fatal(err)
	}
	return string(b)
}

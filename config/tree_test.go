package config

import (
	"fmt"
	"os"
	"reflect"
	"testing"
)

// treeCases are TOML texts that stress the rules on defining tables and
// keys once, and the values fastTree leaves to the library; fast says
// whether fastTree must build the tree itself (the rest it must leave to
// the library, which rejects the invalid ones).
var treeCases = []struct {
	src  string
	fast bool
}{
	{valid, true},
	{"a = 1\nb = -2\nc = +3\nd = 0\ne = true\nf = false\ng = 'lit'\nh = \"basic\"\n", true},
	{"a.b.c = 1\na.b.d = 2\n[x]\ny.z = 1\ny.w = 2\n", true},
	{"[a.b]\nc = 1\n[a]\nd = 2\n", true},
	{"[[a]]\nx = 1\n[a.b]\ny = 2\n[[a]]\nx = 3\n[a.b]\ny = 4\n[[a.c]]\nz = 1\n[[a.c]]\nz = 2\n", true},
	{"a = [1, [2, 3], {x = 1, y = {z = 'q'}}, []]\nb = {}\n", true},
	{"\"quoted key\" = 1\n'lit key' = 2\n\"\" = 3\n", true},
	{"a = 1 # comment\r\n# another\r\nb = 2\r\n", true},
	// Values the library decodes.
	{"a = 1.5\nb = 0x1F\nc = 1_000\nd = 1979-05-27\ne = 07:32:00\nf = 1979-05-27T07:32:00Z\ng = inf\nh = nan\n", true},
	{"a = \"tab\\there\"\nb = \"\"\"\nmulti\\\n  line\"\"\"\nc = '''\nraw'''\n", true},
	{"a = 9223372036854775807\nb = -9223372036854775808\nc = 012\n", false},
	{"\"esc\\u0061ped\" = 1\n", false},
	// Redefinitions: every one left to the library, which rejects them.
	{"a = 1\na = 2\n", false},
	{"[a]\n[a]\n", false},
	{"a.b = 1\n[a]\n", false},
	{"[a]\nb.c = 1\n[a.b]\n", false},
	{"[a.b.c]\n[a]\nb.d = 1\n", false},
	{"a = {b = 1}\n[a]\n", false},
	{"a = {b = 1}\na.c = 2\n", false},
	{"a = [1]\n[[a]]\n", false},
	{"[[a]]\n[a]\n", false},
	{"[a]\n[[a]]\n", false},
	{"a = {b.c = 1, b.d = 2}\n", false},
	{"a = {b = 1, b = 2}\n", false},
	// Text the library judges: syntax errors, control characters, a BOM,
	// TOML 1.1 forms.
	{"a = \n", false},
	{"a = 1 b = 2\n", false},
	{"a = \"\x01\"\n", false},
	{"\xef\xbb\xbfa = 1\n", false},
	{"a = 1\rb = 2\n", false},
	{"a = \"\xff\"\n", false},
	{"a = {\n b = 1,\n}\n", false},
}

// TestFastTree checks that fastTree builds the cases it should, and that
// whatever it builds, the library decodes to the same tree.
func TestFastTree(t *testing.T) {
	for _, tc := range treeCases {
		_, ok := fastTree([]byte(tc.src))
		if ok != tc.fast {
			t.Errorf("%q: fastTree ok %t, want %t", tc.src, ok, tc.fast)
		}
		checkSameTree(t, []byte(tc.src))
	}
	if _, ok := fastTree([]byte("a = 1\na = 2\n")); ok {
		t.Error("a duplicate key was accepted")
	}
}

// FuzzFastTree checks that any text fastTree accepts, the library accepts
// as the same tree.
func FuzzFastTree(f *testing.F) {
	for _, tc := range treeCases {
		f.Add([]byte(tc.src))
	}
	for _, p := range []string{examplePath, bgpExamplePath} {
		if data, err := os.ReadFile(p); err == nil {
			f.Add(data)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) { checkSameTree(t, data) })
}

func checkSameTree(t *testing.T, data []byte) {
	t.Helper()
	tree, ok := fastTree(data)
	if !ok {
		return
	}
	lib, errs := libraryTree("f.toml", string(data))
	if errs != nil {
		t.Fatalf("%q: fastTree accepts what the library rejects: %v", data, errs)
	}
	// NaN is unequal to itself: compare those trees as printed.
	if !reflect.DeepEqual(tree, lib) && fmt.Sprintf("%#v", tree) != fmt.Sprintf("%#v", lib) {
		t.Fatalf("%q: trees differ:\nfastTree %#v\nlibrary  %#v", data, tree, lib)
	}
}

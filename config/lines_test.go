package config

import (
	"testing"

	"github.com/BurntSushi/toml"
)

// TestLocate checks the line scanner on TOML that trips naive ones:
// brackets and quotes inside strings and comments, multi-line strings and
// arrays, dotted and quoted keys, and nested arrays of tables.
func TestLocate(t *testing.T) {
	src := `# [not = "a table"]
top = 'it"s' # 1 "
[a]
s = """
[x]
b = 1 """
t = '''
"'''
n = 1979-05-27 07:32:00Z
arr = [
  1, # ]
  [2, 3],
  "]",
]
"q.k" = { x = 1, "y" = [ { z = 2 } ] }
d . e = true
[[svc]]
name = "one"
[[svc.grp]]
ep = [ { ip = "1" },
       { ip = "2" } ]
[svc.pol]
r = 1
[[svc]] # second
[[svc.grp]]
[[svc.grp]]
ep = [{ip="3"}]
"n\u0061me" = "x"
`
	if _, err := toml.Decode(src, new(map[string]any)); err != nil {
		t.Fatal(err) // the scanner assumes valid TOML
	}
	ix := locate(src)
	for path, want := range map[string]int{
		"top":                     2,
		"a":                       3,
		"a.s":                     4,
		"a.t":                     7,
		"a.n":                     9,
		"a.arr":                   10,
		"a.arr[0]":                11,
		"a.arr[1]":                12,
		"a.arr[1][1]":             12,
		"a.arr[2]":                13,
		`a."q.k"`:                 15,
		`a."q.k".y[0].z`:          15,
		"a.d":                     16,
		"a.d.e":                   16,
		"svc":                     17,
		"svc[0]":                  17,
		"svc[0].name":             18,
		"svc[0].grp[0]":           19,
		"svc[0].grp[0].ep[0].ip":  20,
		"svc[0].grp[0].ep[1].ip":  21,
		"svc[0].pol.r":            23,
		"svc[1]":                  24,
		"svc[1].grp[0]":           25,
		"svc[1].grp[1]":           26,
		"svc[1].grp[1].ep[0].ip":  27,
		"svc[1].grp[1].name":      28,
		"svc[1].grp[1].missing":   26, // falls back to its table
		"svc[1].grp[1].ep[5].mac": 27,
		"nowhere":                 0,
	} {
		if got := ix.find(path); got != want {
			t.Errorf("%s: line %d, want %d", path, got, want)
		}
	}
	if _, ok := ix["x"]; ok {
		t.Error("a table header inside a string was taken for one")
	}
}

// TestLocateGivesUp checks that input the scanner does not follow ends the
// scan quietly, keeping what was found before.
func TestLocateGivesUp(t *testing.T) {
	for _, src := range []string{"a = 1\n= 2\nb = 3", "a = 1\nb = [1,\n", "a = 1\nb = \"open", "a = 1\n[b", "a = 1\nc = {x = 1"} {
		ix := locate(src)
		if ix.find("a") != 1 {
			t.Errorf("%q: a not found", src)
		}
	}
}

package config

import (
	"bytes"
	"reflect"
	"unicode/utf8"
	"unsafe"

	"github.com/BurntSushi/toml"
	"github.com/pelletier/go-toml/v2/unstable"
)

// The generic tree of a file (tables as map[string]any, [[x]] sections as
// []map[string]any, arrays as []any, and the values BurntSushi/toml
// decodes) is what checkKeys, fill and the converter read. The library
// takes ~0.6 s and ~350 MB of garbage to build it for a file of 20,000
// services, most of a reload. fastTree builds the same tree from the
// syntax tree of go-toml's parser, which reads such a file in ~20 ms
// without allocating, for the text configurations are made of: tables,
// arrays of tables, keys (dotted ones too), strings, booleans, integers,
// arrays and inline tables. It gives up (ok false) at anything else, and
// Parse then asks the library, which decides every error and every rarer
// form as before: a syntax error, a key or table defined twice, dotted
// keys that extend a table defined elsewhere, control characters or
// invalid UTF-8, TOML 1.1 forms go-toml does not know. Values other than
// the plain ones above (floats, dates, integers in hex or with
// underscores, strings with escapes or over several lines) are decoded by
// the library one at a time. FuzzFastTree checks that whatever fastTree
// accepts, the library accepts as the same tree.

// tableKind says how a table of the tree came to be, which decides what
// may still add to it (TOML's rules on defining a table once).
type tableKind uint8

const (
	// tableInline is the zero value: an inline table, or one below it,
	// which nothing may extend.
	tableInline tableKind = iota
	// tableImplicit is created as the parent of a header's table ([a.b]
	// creates a), and may still be defined by a header of its own.
	tableImplicit
	// tableDefined is named by a header.
	tableDefined
	// tableDotted is created by a dotted key (a.b = 1 creates a); more
	// dotted keys of the same section may add to it.
	tableDotted
)

// treeBuilder builds the tree of one file.
type treeBuilder struct {
	p    unstable.Parser
	root map[string]any
	// kinds holds the kind of every table a header or a dotted key may
	// still reach; elements of [[x]] are reached only as the last one,
	// and are never looked up here.
	kinds map[unsafe.Pointer]tableKind
	// keys interns key names: a file repeats a few dozen of them.
	keys map[string]string
}

// fastTree returns the tree of data, or ok false when the library must
// decide.
func fastTree(data []byte) (tree map[string]any, ok bool) {
	if !plainText(data) {
		return nil, false
	}
	b := &treeBuilder{root: map[string]any{}, kinds: map[unsafe.Pointer]tableKind{}, keys: map[string]string{}}
	b.p.Reset(data)
	cur := b.root
	for b.p.NextExpression() {
		e := b.p.Expression()
		switch e.Kind {
		case unstable.Table:
			cur, ok = b.table(e)
		case unstable.ArrayTable:
			cur, ok = b.arrayTable(e)
		case unstable.KeyValue:
			ok = b.keyValue(cur, e, tableDotted)
		default:
			ok = false
		}
		if !ok {
			return nil, false
		}
	}
	if b.p.Error() != nil {
		return nil, false
	}
	return b.root, true
}

// plainText reports whether data is UTF-8 without a byte order mark and
// without control characters other than tab and newline (CR only before
// LF): what both parsers agree on; the library judges anything else.
func plainText(data []byte) bool {
	if bytes.HasPrefix(data, []byte("\xef\xbb\xbf")) {
		return false
	}
	for i, c := range data {
		if c < 0x20 && c != '\t' && c != '\n' && !(c == '\r' && i+1 < len(data) && data[i+1] == '\n') || c == 0x7f {
			return false
		}
	}
	return utf8.Valid(data)
}

func mapID(m map[string]any) unsafe.Pointer { return reflect.ValueOf(m).UnsafePointer() }

// keyParts returns the names of a key's parts.
func (b *treeBuilder) keyParts(n *unstable.Node, into []string) ([]string, bool) {
	it := n.Key()
	for it.Next() {
		k := it.Node()
		raw := b.p.Raw(k.Raw)
		if len(raw) > 0 && raw[0] == '"' && bytes.IndexByte(raw, '\\') >= 0 {
			return nil, false // escapes: the library's to read
		}
		s, ok := b.keys[string(k.Data)]
		if !ok {
			s = string(k.Data)
			b.keys[s] = s
		}
		into = append(into, s)
	}
	return into, len(into) > 0
}

// parent walks a header's keys but the last from the root: tables that a
// header created or defined are entered, [[x]] at its last element.
func (b *treeBuilder) parent(keys []string) (map[string]any, bool) {
	t := b.root
	for _, k := range keys {
		switch v := t[k].(type) {
		case nil:
			nt := map[string]any{}
			b.kinds[mapID(nt)] = tableImplicit
			t[k] = nt
			t = nt
		case map[string]any:
			if k := b.kinds[mapID(v)]; k != tableImplicit && k != tableDefined {
				return nil, false
			}
			t = v
		case []map[string]any:
			t = v[len(v)-1]
		default:
			return nil, false
		}
	}
	return t, true
}

// header reads the key of a table header [a.b.c] or [[a.b.c]]: the table
// it goes into (a.b) and its last part (c).
func (b *treeBuilder) header(e *unstable.Node) (map[string]any, string, bool) {
	var buf [8]string
	keys, ok := b.keyParts(e, buf[:0])
	if !ok {
		return nil, "", false
	}
	t, ok := b.parent(keys[:len(keys)-1])
	return t, keys[len(keys)-1], ok
}

// table handles [a.b]: a new table, or one that an earlier header created
// as a parent.
func (b *treeBuilder) table(e *unstable.Node) (map[string]any, bool) {
	t, last, ok := b.header(e)
	if !ok {
		return nil, false
	}
	switch v := t[last].(type) {
	case nil:
		nt := map[string]any{}
		b.kinds[mapID(nt)] = tableDefined
		t[last] = nt
		return nt, true
	case map[string]any:
		if b.kinds[mapID(v)] != tableImplicit {
			return nil, false
		}
		b.kinds[mapID(v)] = tableDefined
		return v, true
	}
	return nil, false
}

// arrayTable handles [[a.b]]: a new element of an array of tables.
func (b *treeBuilder) arrayTable(e *unstable.Node) (map[string]any, bool) {
	t, last, ok := b.header(e)
	if !ok {
		return nil, false
	}
	nt := map[string]any{}
	switch v := t[last].(type) {
	case nil:
		t[last] = []map[string]any{nt}
	case []map[string]any:
		t[last] = append(v, nt)
	default:
		return nil, false
	}
	return nt, true
}

// keyValue sets a.b.c = v in table t; intermediate tables it creates are
// of kind dotted (below an inline table: inline, which only this key
// value may enter, as it creates them).
func (b *treeBuilder) keyValue(t map[string]any, e *unstable.Node, dotted tableKind) bool {
	var buf [8]string
	keys, ok := b.keyParts(e, buf[:0])
	if !ok {
		return false
	}
	for _, k := range keys[:len(keys)-1] {
		switch v := t[k].(type) {
		case nil:
			nt := map[string]any{}
			if dotted != tableInline {
				b.kinds[mapID(nt)] = dotted
			}
			t[k] = nt
			t = nt
		case map[string]any:
			// Below an inline table, a table of dotted keys is left to
			// the library: it cannot be told from an inline one here.
			if dotted == tableInline || b.kinds[mapID(v)] != tableDotted {
				return false
			}
			t = v
		default:
			return false
		}
	}
	last := keys[len(keys)-1]
	if _, dup := t[last]; dup {
		return false
	}
	v, ok := b.value(e.Value())
	if !ok {
		return false
	}
	t[last] = v
	return true
}

// value converts a value node.
func (b *treeBuilder) value(n *unstable.Node) (any, bool) {
	switch n.Kind {
	case unstable.String:
		raw := b.p.Raw(n.Raw)
		if len(raw) < 2 || bytes.HasPrefix(raw, []byte(`"""`)) || bytes.HasPrefix(raw, []byte(`'''`)) ||
			raw[0] == '"' && bytes.IndexByte(raw, '\\') >= 0 {
			return libraryValue(raw)
		}
		return string(n.Data), true
	case unstable.Bool:
		return n.Data[0] == 't', true
	case unstable.Integer:
		if v, ok := plainInt(n.Data); ok {
			return v, true
		}
		return libraryValue(n.Data)
	case unstable.Float, unstable.LocalDate, unstable.LocalTime, unstable.LocalDateTime, unstable.DateTime:
		return libraryValue(n.Data)
	case unstable.Array:
		count := 0
		for it := n.Children(); it.Next(); {
			count++
		}
		out := make([]any, 0, count)
		for it := n.Children(); it.Next(); {
			v, ok := b.value(it.Node())
			if !ok {
				return nil, false
			}
			out = append(out, v)
		}
		return out, true
	case unstable.InlineTable:
		m := map[string]any{}
		for it := n.Children(); it.Next(); {
			if !b.keyValue(m, it.Node(), tableInline) {
				return nil, false
			}
		}
		return m, true
	}
	return nil, false
}

// plainInt parses a decimal integer without underscores or leading zeros.
func plainInt(s []byte) (int64, bool) {
	neg := false
	if len(s) > 0 && (s[0] == '-' || s[0] == '+') {
		neg, s = s[0] == '-', s[1:]
	}
	if len(s) == 0 || len(s) > 18 || s[0] == '0' && len(s) > 1 {
		return 0, false // 18 digits cannot overflow; longer ones are the library's
	}
	var v int64
	for _, c := range s {
		if c < '0' || c > '9' {
			return 0, false
		}
		v = v*10 + int64(c-'0')
	}
	if neg {
		v = -v
	}
	return v, true
}

// libraryValue decodes one value, as written, with the library.
func libraryValue(raw []byte) (any, bool) {
	var m map[string]any
	if _, err := toml.Decode("v = "+string(raw), &m); err != nil {
		return nil, false
	}
	v, ok := m["v"]
	return v, ok
}

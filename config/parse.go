package config

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"math"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/BurntSushi/toml"
)

// Load reads and validates the configuration file at path. A file that does
// not parse or validate yields Errors; a file that cannot be read yields the
// error of os.ReadFile, wrapped.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return Parse(path, data)
}

// Parse validates data, a configuration read from path (used only in
// errors; it may be ""). It returns a Config with every default filled in and
// every reference resolved, or Errors listing every problem found.
func Parse(path string, data []byte) (*Config, error) {
	tree, ok := fastTree(data)
	if !ok {
		var errs Errors
		if tree, errs = libraryTree(path, string(data)); errs != nil {
			return nil, errs
		}
	}
	// A first pass only counts errors: a valid file does not pay for the
	// field paths, lines and messages that describe them. The tree is not
	// changed by a pass, so a file with errors is checked again, in full.
	if cfg := (&converter{file: path, quiet: true}).check(tree); cfg != nil {
		cfg.Path = path
		return cfg, nil
	}
	c := &converter{file: path, src: string(data)}
	c.check(tree)
	if len(c.errs) == 0 {
		// Cannot be: both passes run the same checks.
		c.errs = append(c.errs, &Error{File: path, Msg: "invalid configuration"})
	}
	return nil, c.sorted()
}

// check checks the decoded file and converts it: the Config when it is
// valid, else nil with the errors in c.errs.
func (c *converter) check(tree map[string]any) *Config {
	var raw rawFile
	if c.quiet {
		// Unknown keys and misshapen tables fail a strict fill, in the
		// same walk of the tree; the full pass names them.
		if err := fill(reflect.ValueOf(&raw).Elem(), tree, true); err != nil {
			c.add("", "%v", err)
			return nil
		}
		return c.converted(&raw)
	}
	if !c.checkKeys(tree, reflect.TypeFor[rawFile](), "") {
		return nil
	}
	if err := fill(reflect.ValueOf(&raw).Elem(), tree, false); err != nil {
		// The decoder matches field names case-insensitively, so a case
		// variant of a known key (reported above as unknown) can still fail
		// it; nothing else should.
		if len(c.errs) == 0 {
			c.errs = append(c.errs, decodeError(c.file, err))
		}
		return nil
	}
	return c.converted(&raw)
}

// converted is raw's Config, or nil when it has errors.
func (c *converter) converted(raw *rawFile) *Config {
	cfg := c.convert(raw)
	if len(c.errs) > 0 {
		return nil
	}
	return cfg
}

// libraryTree decodes src with BurntSushi/toml: one decoding, kept as one
// undecoded value per top-level key, each then turned into a generic tree,
// in which checkKeys finds unknown keys and misshapen tables, and then into
// the typed rawFile, without parsing the text again.
func libraryTree(path, src string) (map[string]any, Errors) {
	var top map[string]toml.Primitive
	md, err := toml.Decode(src, &top)
	if err != nil {
		return nil, Errors{decodeError(path, err)}
	}
	tree := make(map[string]any, len(top))
	for k, p := range top {
		var v any
		if err := md.PrimitiveDecode(p, &v); err != nil {
			return nil, Errors{decodeError(path, err)}
		}
		tree[k] = v
	}
	return tree, nil
}

// fill sets the fields of struct rv from table m as the TOML decoder would
// decode into it: each field takes the key of its tag or, when the table
// has no such key, one that differs only in case (the first in sorted
// order; the decoder's own choice among several is random); a val takes
// any value, a struct a table, a slice of structs an array of tables, a
// pointer to a struct a table. A value of another shape (possible only
// under a case variant of a key, which checkKeys reported as unknown) is an
// error, as it is for the decoder. strict fill fails at any key that is
// not a field's own (errUnknownKey) and at any value of the wrong shape:
// at the errors checkKeys would report.
func fill(rv reflect.Value, m map[string]any, strict bool) error {
	fs := fieldsOf(rv.Type())
	found := 0
	for i, tag := range fs.tags {
		if v, ok := m[tag]; ok {
			found++
			if err := fillValue(rv.Field(i), v, strict); err != nil {
				return fmt.Errorf("%s: %w", tag, err)
			}
		}
	}
	if found == len(m) {
		return nil
	}
	// The other keys are case variants or unknown (reported by
	// checkKeys): a field without its own key takes a case variant.
	if strict {
		return errUnknownKey
	}
	keys := slices.Sorted(maps.Keys(m))
	for i, tag := range fs.tags {
		if _, ok := m[tag]; ok {
			continue
		}
		for _, k := range keys {
			if strings.EqualFold(k, tag) {
				if err := fillValue(rv.Field(i), m[k], strict); err != nil {
					return fmt.Errorf("%s: %w", tag, err)
				}
				break
			}
		}
	}
	return nil
}

var (
	errShape      = errors.New("value of the wrong shape")
	errUnknownKey = errors.New("unknown key")
)

func fillValue(f reflect.Value, v any, strict bool) error {
	switch {
	case f.Type() == valType:
		*f.Addr().Interface().(*val) = val{v: v, set: true}
	case f.Kind() == reflect.Struct:
		sub, ok := v.(map[string]any)
		if !ok {
			return errShape
		}
		return fill(f, sub, strict)
	case f.Kind() == reflect.Pointer:
		sub, ok := v.(map[string]any)
		if !ok {
			return errShape
		}
		p := reflect.New(f.Type().Elem())
		if err := fill(p.Elem(), sub, strict); err != nil {
			return err
		}
		f.Set(p)
	case f.Kind() == reflect.Slice:
		// [[x]] sections decode as []map[string]any, inline arrays as
		// []any (see tables).
		var n int
		var elem func(i int) (map[string]any, bool)
		switch v := v.(type) {
		case []map[string]any:
			n, elem = len(v), func(i int) (map[string]any, bool) { return v[i], true }
		case []any:
			n = len(v)
			elem = func(i int) (map[string]any, bool) { m, ok := v[i].(map[string]any); return m, ok }
		default:
			return errShape
		}
		s := reflect.MakeSlice(f.Type(), n, n)
		for i := range n {
			e, ok := elem(i)
			if !ok {
				return errShape
			}
			if err := fill(s.Index(i), e, strict); err != nil {
				return err
			}
		}
		f.Set(s)
	default:
		return errShape
	}
	return nil
}

// sorted returns the errors in file order, those of unknown line last.
func (c *converter) sorted() Errors {
	line := func(e *Error) int {
		if e.Line == 0 {
			return math.MaxInt
		}
		return e.Line
	}
	slices.SortStableFunc(c.errs, func(a, b *Error) int { return cmp.Compare(line(a), line(b)) })
	return c.errs
}

// decodeError turns an error of the TOML library into an Error, keeping the
// line the parser gives.
func decodeError(path string, err error) *Error {
	var pe toml.ParseError
	if errors.As(err, &pe) {
		return &Error{File: path, Line: pe.Position.Line, Msg: endOfFile(pe.Message)}
	}
	return &Error{File: path, Msg: strings.TrimPrefix(err.Error(), "toml: ")}
}

// endOfFile words the library's "but got '\x00' instead", its way of
// saying that the file ended (a truncated file), as a reader would.
func endOfFile(msg string) string {
	if strings.HasSuffix(msg, `, but got '\x00' instead`) {
		return strings.TrimSuffix(msg, `, but got '\x00' instead`) + ", but the file ends there (truncated?)"
	}
	return msg
}

// converter turns a rawFile into a Config, collecting every error.
type converter struct {
	file  string
	src   string
	lines lineIndex // of src, made by the first error
	errs  Errors
	// quiet counts errors without describing them: at and index build no
	// paths, and add records errQuiet.
	quiet bool

	// primeOf and prime are the last table size isPrime tested (0: none)
	// and its answer.
	primeOf int64
	prime   bool

	// What was converted so far, by name: for uniqueness and references.
	checkByName   map[string]int
	serviceByName map[string]int
	endpointNames map[string]endpointRef
	// runAs is dataplane.user, who may own key files.
	runAs string
}

// errQuiet stands for every error of a quiet pass.
var errQuiet = &Error{Msg: "invalid configuration"}

// add records an error at a field path, locating it in the file.
func (c *converter) add(path, format string, args ...any) {
	if c.quiet {
		c.errs = append(c.errs, errQuiet)
		return
	}
	if c.lines == nil {
		c.lines = locate(c.src)
	}
	c.errs = append(c.errs, &Error{
		File:  c.file,
		Line:  c.lines.find(path),
		Field: path,
		Msg:   fmt.Sprintf(format, args...),
	})
}

// at is the path of field (".name") of the table at path p; "" in a quiet
// pass.
func (c *converter) at(p, field string) string {
	if c.quiet {
		return ""
	}
	return p + field
}

// index is the path of element i of the array at path p; "" in a quiet
// pass.
func (c *converter) index(p string, i int) string {
	if c.quiet {
		return ""
	}
	return p + "[" + strconv.Itoa(i) + "]"
}

// joinPath appends key to a field path, quoting keys that are not bare TOML
// keys so the path stays readable and unambiguous.
func joinPath(path, key string) string {
	if !isBareKey(key) {
		key = strconv.Quote(key)
	}
	if path == "" {
		return key
	}
	return path + "." + key
}

func isBareKey(k string) bool {
	if k == "" {
		return false
	}
	for _, r := range k {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-') {
			return false
		}
	}
	return true
}

// show describes a decoded value for an error message: its TOML type, and
// the value itself when it is short.
func show(v any) string {
	switch v := v.(type) {
	case string:
		return fmt.Sprintf("string %q", v)
	case int64:
		return fmt.Sprintf("integer %d", v)
	case float64:
		return "float " + formatFloat(v)
	case bool:
		return fmt.Sprintf("boolean %t", v)
	case []any:
		return "array"
	case []map[string]any:
		return "array of tables"
	case map[string]any:
		return "table"
	}
	return "date/time"
}

func formatFloat(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

func (c *converter) wrongType(path, want string, got any) {
	c.add(path, "expected %s, got %s", want, show(got))
}

// required reports whether v was written, recording an error if not.
func (c *converter) required(path string, v val) bool {
	if !v.set {
		c.add(path, "required")
	}
	return v.set
}

// text returns a string value; ok is false when absent or of another type.
func (c *converter) text(path string, v val) (s string, ok bool) {
	if !v.set {
		return "", false
	}
	s, ok = v.v.(string)
	if !ok {
		c.wrongType(path, "a string", v.v)
	}
	return s, ok
}

// str returns a string value, or def when absent or wrong.
func (c *converter) str(path string, v val, def string) string {
	if s, ok := c.text(path, v); ok {
		return s
	}
	return def
}

// integer returns an integer in [lo, hi], or def when absent or wrong.
func (c *converter) integer(path string, v val, def, lo, hi int64) int64 {
	if !v.set {
		return def
	}
	n, ok := v.v.(int64)
	if !ok {
		c.wrongType(path, "an integer", v.v)
		return def
	}
	if n < lo || n > hi {
		c.add(path, "%d is outside [%d, %d]", n, lo, hi)
		return def
	}
	return n
}

// boolean returns a boolean, or def when absent or wrong.
func (c *converter) boolean(path string, v val, def bool) bool {
	if !v.set {
		return def
	}
	b, ok := v.v.(bool)
	if !ok {
		c.wrongType(path, "a boolean", v.v)
		return def
	}
	return b
}

// ratio returns a number in [0.0, 1.0] (an integer is accepted), or def.
func (c *converter) ratio(path string, v val, def float64) float64 {
	if !v.set {
		return def
	}
	var f float64
	switch n := v.v.(type) {
	case float64:
		f = n
	case int64:
		f = float64(n)
	default:
		c.wrongType(path, "a number", v.v)
		return def
	}
	if !(f >= 0 && f <= 1) { // also rejects NaN
		c.add(path, "%s is outside [0.0, 1.0]", formatFloat(f))
		return def
	}
	return f
}

// enum returns the index of a string value in names (matched exactly), or
// def when absent or not one of them; def -1 lets a caller tell.
func (c *converter) enum(path string, v val, names []string, def int) int {
	if !v.set {
		return def
	}
	s, ok := v.v.(string)
	if !ok {
		c.wrongType(path, "a string", v.v)
		return def
	}
	for i, n := range names {
		if s == n {
			return i
		}
	}
	c.add(path, "%q is not one of %s", s, strings.Join(names, ", "))
	return def
}

// list returns an array value; ok is false when absent or not an array.
func (c *converter) list(path string, v val) (elems []any, ok bool) {
	if !v.set {
		return nil, false
	}
	a, ok := v.v.([]any)
	if !ok {
		c.wrongType(path, "an array", v.v)
	}
	return a, ok
}

// name checks a name: required, and printable without blanks because names
// appear in logs, metrics labels and command lines.
func (c *converter) name(path string, v val) string {
	if !c.required(path, v) {
		return ""
	}
	s, ok := c.text(path, v)
	if !ok {
		return ""
	}
	if s == "" {
		c.add(path, "must not be empty")
		return ""
	}
	if !printable(s) {
		c.add(path, "%q must not contain blanks or control characters", s)
	}
	return s
}

// printable reports whether s has no blanks and no control characters.
func printable(s string) bool {
	for _, r := range s {
		if r <= ' ' || r == 0x7f || r == '\u00a0' || r == '\uFFFD' {
			return false
		}
	}
	return true
}

// seconds converts a count of seconds that callers have bounded far below
// overflow.
func seconds(n int64) time.Duration { return time.Duration(n) * time.Second }

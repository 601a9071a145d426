package config

import (
	"fmt"
	"strings"

	"github.com/BurntSushi/toml"
)

// BurntSushi/toml v1.6.0 gives positions only in a ParseError (syntax errors
// and failed decodes). MetaData keeps key positions unexported, and keyed
// without array indexes, so the second [[backend_service]] would be located
// at the last one. Lines of valid files are therefore found here, by a small
// scanner that knows just enough TOML to follow keys, table headers and
// values across lines. It runs only on text the library has already parsed,
// and gives up quietly (leaving the rest unlocated) on anything it does not
// expect.

// lineIndex maps a field path, as in Error.Field, to the line that writes it:
// the line of the key, of an array element, or of a table header.
type lineIndex map[string]int

// find returns the line of path or, when path is not written (a missing
// required key, a default), of the closest enclosing table or array that is;
// 0 when none is.
func (ix lineIndex) find(path string) int {
	for path != "" {
		if l, ok := ix[path]; ok {
			return l
		}
		path = parentPath(path)
	}
	return 0
}

// parentPath drops the last key or index of a path.
func parentPath(p string) string {
	if strings.HasSuffix(p, "]") {
		if i := strings.LastIndexByte(p, '['); i >= 0 {
			return p[:i]
		}
	}
	if i := strings.LastIndexByte(p, '.'); i >= 0 {
		return p[:i]
	}
	return ""
}

// locate indexes the lines of src, which must be valid TOML.
func locate(src string) lineIndex {
	s := &scanner{src: src, line: 1, lines: lineIndex{}, count: map[string]int{}}
	s.document()
	return s.lines
}

type scanner struct {
	src   string
	pos   int
	line  int
	lines lineIndex
	// count holds the number of elements seen so far of each array of
	// tables, by path: [[x]] opens element count["x"], and [x.y] or
	// [[x.y]] below it refer to the last one.
	count map[string]int
}

func (s *scanner) document() {
	table := "" // path of the current table
	for s.skip(true) {
		line := s.line
		if s.peek() == '[' {
			path, ok := s.header()
			if !ok {
				return
			}
			s.mark(path, line)
			table = path
			continue
		}
		path, ok := s.keyPath(table, line)
		if !ok || !s.value(path) {
			return
		}
	}
}

// header reads [a.b] or [[a.b]] and returns the path of the table it opens.
func (s *scanner) header() (string, bool) {
	double := strings.HasPrefix(s.src[s.pos:], "[[")
	s.pos++
	if double {
		s.pos++
	}
	keys, ok := s.key()
	if !ok {
		return "", false
	}
	s.skip(false)
	end := "]"
	if double {
		end = "]]"
	}
	if !strings.HasPrefix(s.src[s.pos:], end) {
		return "", false
	}
	s.pos += len(end)
	if !double {
		return s.resolve(keys), true
	}
	array := joinPath(s.resolve(keys[:len(keys)-1]), keys[len(keys)-1])
	n := s.count[array]
	s.count[array] = n + 1
	s.mark(array, s.line)
	return fmt.Sprintf("%s[%d]", array, n), true
}

// resolve turns the keys of a header into a path, indexing each array of
// tables on the way by its last element.
func (s *scanner) resolve(keys []string) string {
	path := ""
	for _, k := range keys {
		path = joinPath(path, k)
		if n, ok := s.count[path]; ok {
			path = fmt.Sprintf("%s[%d]", path, n-1)
		}
	}
	return path
}

// keyPath reads `a.b =` below table and marks a, a.b on line.
func (s *scanner) keyPath(table string, line int) (string, bool) {
	keys, ok := s.key()
	if !ok {
		return "", false
	}
	s.skip(false)
	if s.peek() != '=' {
		return "", false
	}
	s.pos++
	path := table
	for _, k := range keys {
		path = joinPath(path, k)
		s.mark(path, line)
	}
	return path, true
}

// key reads a dotted key of bare and quoted parts.
func (s *scanner) key() ([]string, bool) {
	var keys []string
	for {
		s.skip(false)
		start := s.pos
		switch s.peek() {
		case '"', '\'':
			if !s.str() {
				return nil, false
			}
			keys = append(keys, unquoteKey(s.src[start:s.pos]))
		default:
			for s.pos < len(s.src) && isBareKey(s.src[s.pos:s.pos+1]) {
				s.pos++
			}
			if s.pos == start {
				return nil, false
			}
			keys = append(keys, s.src[start:s.pos])
		}
		s.skip(false)
		if s.peek() != '.' {
			return keys, true
		}
		s.pos++
	}
}

// unquoteKey returns the name a quoted key stands for. Escapes are rare in
// keys, so the library decodes those.
func unquoteKey(q string) string {
	inner := q[1 : len(q)-1]
	if q[0] == '\'' || !strings.Contains(inner, `\`) {
		return inner
	}
	var m map[string]any
	if _, err := toml.Decode(q+" = 0", &m); err == nil {
		for k := range m {
			return k
		}
	}
	return inner
}

// value skips one value, marking the lines of array elements and of keys in
// inline tables below path.
func (s *scanner) value(path string) bool {
	s.skip(false)
	switch s.peek() {
	case '"', '\'':
		return s.str()
	case '[':
		s.pos++
		for i := 0; ; i++ {
			if !s.skip(true) {
				return false
			}
			if s.peek() == ']' {
				s.pos++
				return true
			}
			elem := fmt.Sprintf("%s[%d]", path, i)
			s.mark(elem, s.line)
			if !s.value(elem) || !s.skip(true) {
				return false
			}
			if s.peek() == ',' {
				s.pos++
			} else if s.peek() != ']' {
				return false
			}
		}
	case '{':
		s.pos++
		for {
			if !s.skip(true) {
				return false
			}
			if s.peek() == '}' {
				s.pos++
				return true
			}
			key, ok := s.keyPath(path, s.line)
			if !ok || !s.value(key) || !s.skip(true) {
				return false
			}
			if s.peek() == ',' {
				s.pos++
			} else if s.peek() != '}' {
				return false
			}
		}
	}
	// A number, boolean or date: up to the next delimiter.
	start := s.pos
	for s.pos < len(s.src) && !strings.ContainsRune(",]}#\r\n", rune(s.src[s.pos])) {
		s.pos++
	}
	return s.pos > start
}

// str skips a basic or literal string, single- or multi-line.
func (s *scanner) str() bool {
	q := s.src[s.pos]
	delim := string(q)
	if strings.HasPrefix(s.src[s.pos:], strings.Repeat(delim, 3)) {
		delim = strings.Repeat(delim, 3)
	}
	s.pos += len(delim)
	for s.pos < len(s.src) {
		switch {
		case q == '"' && s.src[s.pos] == '\\':
			s.advance(2)
		case strings.HasPrefix(s.src[s.pos:], delim):
			s.pos += len(delim)
			// A multi-line string may end with one or two quotes of its own.
			for n := 0; len(delim) == 3 && n < 2 && s.peek() == q; n++ {
				s.pos++
			}
			return true
		default:
			s.advance(1)
		}
	}
	return false
}

// advance moves over n bytes, counting lines.
func (s *scanner) advance(n int) {
	for ; n > 0 && s.pos < len(s.src); n-- {
		if s.src[s.pos] == '\n' {
			s.line++
		}
		s.pos++
	}
}

// skip moves over blanks and comments, and over newlines too when newlines
// is true; it reports whether any input is left.
func (s *scanner) skip(newlines bool) bool {
	for s.pos < len(s.src) {
		switch c := s.src[s.pos]; {
		case c == ' ' || c == '\t' || c == '\r':
			s.pos++
		case c == '\n' && newlines:
			s.advance(1)
		case c == '#' && newlines:
			for s.pos < len(s.src) && s.src[s.pos] != '\n' {
				s.pos++
			}
		default:
			return true
		}
	}
	return false
}

func (s *scanner) peek() byte {
	if s.pos < len(s.src) {
		return s.src[s.pos]
	}
	return 0
}

// mark records the first line a path is written on.
func (s *scanner) mark(path string, line int) {
	if _, ok := s.lines[path]; !ok {
		s.lines[path] = line
	}
}

package config

import (
	"fmt"
	"strings"
)

// Error is one problem found in a configuration file.
type Error struct {
	File string // the path given to Load or Parse; may be ""
	// Line is 1-based; 0 when the line is unknown.
	Line int
	// Field is the path of the offending value, such as
	// backend_service[1].failover_policy.failover_ratio (0-based indexes);
	// "" for TOML syntax errors.
	Field string
	Msg   string
}

// Error prints FILE:LINE: FIELD: MSG, leaving out the parts that are unknown.
func (e *Error) Error() string {
	where := e.File
	if e.Line > 0 {
		if where == "" {
			where = fmt.Sprintf("line %d", e.Line)
		} else {
			where = fmt.Sprintf("%s:%d", where, e.Line)
		}
	}
	parts := make([]string, 0, 3)
	for _, s := range []string{where, e.Field, e.Msg} {
		if s != "" {
			parts = append(parts, s)
		}
	}
	return strings.Join(parts, ": ")
}

// Errors is every problem found in one file. Parse and Load return it (never
// empty) when a file is invalid, so that a user can fix everything at once.
type Errors []*Error

// Error prints one error per line.
func (es Errors) Error() string {
	lines := make([]string, len(es))
	for i, e := range es {
		lines[i] = e.Error()
	}
	return strings.Join(lines, "\n")
}

// Unwrap lets errors.As find the individual *Error values.
func (es Errors) Unwrap() []error {
	out := make([]error, len(es))
	for i, e := range es {
		out[i] = e
	}
	return out
}

// Package config reads the TOML file users write (docs/config.md), fills in
// defaults and validates it into a Config that nothing downstream can get
// wrong. Load and Parse return every problem at once as Errors; each names
// the file, the line and the field path, such as
// backend_service[1].failover_policy.failover_ratio.
//
// Lines: syntax errors carry the line of the TOML parser. BurntSushi/toml
// exposes no positions for keys of a valid file, so those come from a small
// scanner (lines.go) that indexes the line of every key, array element and
// table header, arrays of tables included. An error about a key that is not
// written (a missing required key) points at its enclosing table header or
// inline table. Errors of ValidateForRun carry no line.
package config

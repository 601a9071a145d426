// Package config reads the TOML file users write (shared/CONFIG.md), fills in
// defaults and validates it into a Config that nothing downstream can get
// wrong. Every error names the file, the line when the decoder gives it, and
// the field path.
package config

// Package maglev builds weighted, deterministic Maglev lookup tables
// (SPEC S1–S5). Two processes given the same backends and weights build
// bit-identical tables.
package maglev

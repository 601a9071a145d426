// Package controlplane turns configuration, health and weights into the
// immutable snapshots the data plane reads: per service the eligible set and
// its side (SPEC E1–E6), the Maglev table, the QUIC-LB configurations and
// server IDs, backend states and draining deadlines (M5). Reloads are
// applied as one atomic step (X2). Backend references and service IDs keep
// what conntrack entries recorded across reloads and, through State (kept
// in state_dir), across a restart.
package controlplane

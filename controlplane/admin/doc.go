// Package admin is the appliance's admin listener: Prometheus /metrics,
// /status as JSON and /healthz, on a loopback address by default, and the
// client side that `xlb status`, `drain` and `undrain` use (Call,
// WriteTables).
//
// The listener reads one Source: whatever runs it (the appliance, a test
// rig) reports its state as a typed Report at request time. Nothing here
// touches the hot path. Workers already keep their counters in atomics
// (dataplane.Stats); Gather reads them, the current snapshot and the
// conntrack table, sums the workers' counters and labels them. The
// exported metrics are documented in METRICS.md beside this file.
package admin

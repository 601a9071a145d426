// Package admin is the appliance's admin listeners and their client side.
// The TCP listener (loopback by default) serves what changes nothing:
// Prometheus /metrics, /status as JSON, /healthz, and /debug/pprof when
// asked. A Unix socket, mode 0600, serves the first three too, and every
// endpoint that changes state or reads traffic (drain, undrain, node
// drain, reload and its dry run, capture), which the TCP listener refuses:
// only root reaches them, and no browser can. Both are bounded (connections,
// header size and time, no bodies) so that no local user can exhaust the
// process's descriptors or memory. `xlb status` reads the TCP listener
// (Call, WriteTables); `drain`, `undrain`, `reload` and `capture` use the
// socket (SocketClient), and send nothing until its peer credentials say
// that root or the user xlb runs as listens there.
//
// The listeners read one Source: whatever runs them (the appliance, a test
// rig) reports its state as a typed Report at request time. Nothing here
// touches the hot path. Workers already keep their counters in atomics
// (dataplane.Stats); Gather reads them, the current snapshot and the
// conntrack table, sums the workers' counters and labels them. The
// exported metrics are documented in METRICS.md beside this file.
package admin

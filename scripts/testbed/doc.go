// Package testbed brings the namespace topology of scripts/testbed.sh up for
// a test and down again when it ends, failed or not: clients, a one-armed
// balancer whose interface carries the VIP traffic, and backends holding the
// VIPs on lo and running cmd/xlb-testserver, all on one bridge; or, with
// Options.Instances (1 to 8), the fleet bed: a router running BIRD between
// the clients and that many balancer instances (the diagrams are in
// scripts/testbed.sh, the first also in scripts/README.md).
//
// The script is the single description of the topology; this package runs
// it, mirrors its fixed addresses, and gives tests ways to act inside a
// namespace: Exec (a command under `ip netns exec`) and the client helpers
// built on internal/nsx's Do (a function on an OS thread moved into the
// namespace), which tests use directly too.
//
// Tests using it need root, as CI has; each picks its own prefix so that
// packages testing in parallel never share a namespace.
package testbed

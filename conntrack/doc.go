// Package conntrack is the connection-tracking table shared by all workers:
// sharded, lock-free lookups, exact keys (SPEC T3), fixed capacity (X3) and
// lazy expiry (M1).
package conntrack

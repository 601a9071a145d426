//go:build race

package conntrack

// raceBuild: the race detector slows the table's atomics tenfold; stress
// tests do less under it.
const raceBuild = true

//go:build !race

package conntrack

// raceBuild: see race_on_test.go.
const raceBuild = false

//go:build !linux

package dataplane_test

import "time"

// benchThreadCPU is not measured outside Linux; benchmarks then report wall
// time only.
func benchThreadCPU() time.Duration { return 0 }

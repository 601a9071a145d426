//go:build !linux

package core

import "time"

// threadCPU is unknown off Linux: CPU figures are then reported as 0.
func threadCPU() time.Duration { return 0 }

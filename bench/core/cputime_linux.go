//go:build linux

package core

import (
	"syscall"
	"time"
)

// threadCPU returns the CPU time the calling OS thread has used (user and
// system), or 0 when it cannot tell. Workers lock their goroutine to their
// thread and report the difference, a figure that time slices given to
// other processes of a busy machine do not inflate.
func threadCPU() time.Duration {
	const rusageThread = 1 // RUSAGE_THREAD, Linux 2.6.26+
	var ru syscall.Rusage
	if err := syscall.Getrusage(rusageThread, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

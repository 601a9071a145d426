package worker

import (
	"time"

	"golang.org/x/sys/unix"
)

// epoch is the zero of nowNs. time.Since reads the monotonic clock (vDSO,
// no syscall), so wall-clock steps never move it.
var epoch = time.Now()

// monoBase is CLOCK_MONOTONIC at epoch, in ns: NowMs adds it so that its
// readings are the system's monotonic clock, shared by every process of
// this boot. A conntrack table kept across a restart (state_dir) carries
// last-use times on it that the next process compares with its own.
var monoBase = func() int64 {
	var ts unix.Timespec
	if unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts) != nil {
		return 0
	}
	return ts.Nano() - int64(time.Since(epoch))
}()

// NowMs is the data plane's clock: CLOCK_MONOTONIC milliseconds (since
// boot, the same in every process). Conntrack timestamps and the control
// plane's drain deadlines are on it, so the control plane must be driven
// with it too.
func NowMs() int64 { return msOf(nowNs()) }

// msOf is a reading of nowNs on NowMs's clock: what a worker hands the
// engine, so that its conntrack timestamps and the control plane's
// deadlines are on one clock.
func msOf(ns int64) int64 { return (monoBase + ns) / 1e6 }

// nowNs is process-relative monotonic nanoseconds, for the spin bound and
// the capture's timestamps.
func nowNs() int64 { return int64(time.Since(epoch)) }

// Epoch is the wall time at the zero of nowNs (a capture's timestamps are
// on it).
func Epoch() time.Time { return epoch }

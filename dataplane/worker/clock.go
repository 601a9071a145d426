package worker

import "time"

// epoch is the zero of NowMs. time.Since reads the monotonic clock (vDSO,
// no syscall), so wall-clock steps never move it.
var epoch = time.Now()

// NowMs is the data plane's clock: monotonic milliseconds since the process
// started. Conntrack timestamps and the control plane's drain deadlines are
// on it, so the control plane must be driven with it too.
func NowMs() int64 { return time.Since(epoch).Milliseconds() }

// nowNs is the same clock in nanoseconds, for the spin bound and the
// capture's timestamps.
func nowNs() int64 { return int64(time.Since(epoch)) }

// Epoch is the wall time at the zero of the workers' clock (a capture's
// timestamps are on it).
func Epoch() time.Time { return epoch }

package admin

import (
	"xlb/conntrack"
	"xlb/dataplane"
)

// Sources is what the admin listener reads, each time it serves a request.
// Every method may be called from any goroutine, concurrently with the
// workers and the control plane.
type Sources interface {
	// Snapshot is the current published snapshot (nil before the first).
	Snapshot() *dataplane.Snapshot
	// Workers are the running workers with their rx queue numbers.
	Workers() []QueueStats
	// Conntrack is the shared tracking table (nil when there is none).
	Conntrack() *conntrack.Table
	// Now is the control plane's clock in ms, the clock that
	// dataplane.Backend.DrainUntil is on.
	Now() int64
	// Info is run-time information shown as is under "runtime" in /status:
	// interface, XDP mode, bind mode, queues... (nil for none).
	Info() map[string]any
}

// QueueStats is one worker's counters and the rx queue it serves.
type QueueStats struct {
	Queue int
	Stats *dataplane.Stats
}

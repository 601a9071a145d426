package admin

import (
	"xlb/conntrack"
	"xlb/dataplane"
)

// Source is what the listener serves: the state of whatever it sits in
// front of (the appliance, a test rig), read at each request, and the
// operator's drain. Every method may be called from any goroutine,
// concurrently with the workers and the control plane.
type Source interface {
	// Status is the state at this instant: what /status serves and
	// /metrics exports (Gather builds most of it).
	Status() *Report
	// Drain and Undrain take a backend out of service and back (POST
	// /drain, /undrain): an endpoint's name or address, in every service
	// that has it, or SERVICE/NAME; they return the backends changed as
	// "service/name". A name that is no current backend is
	// ErrUnknownBackend.
	Drain(name string) ([]string, error)
	Undrain(name string) ([]string, error)
	// DrainNode withdraws (true) or announces again (false) this
	// instance's routes while it keeps forwarding (POST /drain-node,
	// /undrain-node).
	DrainNode(drained bool) error
}

// Inputs are what Gather reads, once per request.
type Inputs struct {
	// Snapshot is the current published snapshot (nil before the first).
	Snapshot *dataplane.Snapshot
	// Workers are the running workers with their rx queue numbers.
	Workers []QueueStats
	// Conntrack is the shared tracking table (nil when there is none).
	Conntrack *conntrack.Table
	// ConntrackFaults counts the faults contained in the mapping of a
	// table kept in a file (dataplane.Engine.ConntrackFaults).
	ConntrackFaults uint64
	// Now is the control plane's clock in ms, the clock that
	// dataplane.Backend.DrainUntil is on.
	Now int64
	// Switches counts each service's failover switches: [0] to failover,
	// [1] back to primary (nil: none counted).
	Switches map[string][2]uint64
	// Reloads, from a source that reloads its configuration (nil: none).
	Reloads *ReloadReport
	// Runtime is served as is under "runtime" (nil: left out).
	Runtime *Runtime
	// BGP is served as is under "bgp" (nil: left out).
	BGP *BGPReport
	// FlowSync is served as is under "flow_sync" (nil: left out).
	FlowSync *FlowSyncReport
}

// QueueStats is one worker's counters and the rx queue it serves.
type QueueStats struct {
	Queue int
	Stats *dataplane.Stats
}

package healthcheck

import (
	"net/netip"
	"time"

	"xlb/config"
)

// WeightState is what a probe's reply said about the backend's weight. It
// mirrors the control plane's states (W1a) and adds WeightNone for checks
// that carry no weight (TCP).
type WeightState uint8

const (
	// WeightNone: the check reports no weight (TCP checks).
	WeightNone WeightState = iota
	// WeightValid: a 200 reply carried a weight 0..1000.
	WeightValid
	// WeightMissing: a 200 reply without the weight header.
	WeightMissing
	// WeightInvalid: a 200 reply whose weight header is not an integer
	// 0..1000.
	WeightInvalid
	// WeightUnavailable: no 200 reply (timeout, refused, another status);
	// the last valid weight is kept.
	WeightUnavailable
)

var weightStateNames = [...]string{"NONE", "VALID", "MISSING_WEIGHT", "INVALID_WEIGHT", "UNAVAILABLE_WEIGHT"}

func (w WeightState) String() string {
	if int(w) < len(weightStateNames) {
		return weightStateNames[w]
	}
	return "UNKNOWN"
}

// WeightHeader is the response header an HTTP check reads the weight from.
const WeightHeader = "X-Load-Balancing-Endpoint-Weight"

// MaxWeight is the largest weight a backend may report (W1).
const MaxWeight = 1000

// Target is one backend to probe with one check.
type Target struct {
	// Key names the target uniquely and stably: Set keeps the state of a
	// target whose key it sees again.
	Key   string
	Addr  netip.Addr
	Check config.HealthCheck
	// Weighted: a service this target speaks for uses the weights
	// (WEIGHTED_MAGLEV). Only then is its weight report logged; the
	// header is read either way.
	Weighted bool
}

// Result is the outcome of one probe of a target.
type Result struct {
	Key string
	// Healthy is the target's state after this probe, thresholds applied;
	// Changed says this probe changed it.
	Healthy bool
	Changed bool
	// Weight and WeightState are this probe's weight report. With
	// WeightUnavailable, Weight is the last valid weight (0 if none).
	// WeightChanged says the report differs from the previous one (or is
	// the first).
	Weight        uint32
	WeightState   WeightState
	WeightChanged bool
	// Pass is this probe's own verdict, before thresholds; Reason says
	// why ("HTTP 200", "connection refused", "timed out after 1s", ...).
	Pass   bool
	Reason string
	// Latency is how long the probe took (waiting for a free worker
	// excluded); Time is when it ended.
	Latency time.Duration
	Time    time.Time
}

// Status is a target's current state, for reports.
type Status struct {
	Target
	Healthy bool
	// Probes is how many probes completed; Last is the latest (zero before
	// the first).
	Probes uint64
	Last   Result
}

package healthcheck

// health is a target's thresholded state. It starts unhealthy: a backend
// that never answered is not sent traffic on trust.
type health struct {
	healthy   bool
	passes    int // consecutive
	failures  int // consecutive
	probes    uint64
	weight    uint32 // last valid weight
	lastState WeightState
	lastW     uint32
}

// record adds one probe's verdict and returns whether the state changed:
// to healthy after healthyAfter consecutive passes, to unhealthy after
// unhealthyAfter consecutive failures (thresholds below 1 count as 1).
func (h *health) record(pass bool, healthyAfter, unhealthyAfter int) bool {
	h.probes++
	if pass {
		h.passes, h.failures = h.passes+1, 0
		if !h.healthy && h.passes >= max(1, healthyAfter) {
			h.healthy = true
			return true
		}
		return false
	}
	h.passes, h.failures = 0, h.failures+1
	if h.healthy && h.failures >= max(1, unhealthyAfter) {
		h.healthy = false
		return true
	}
	return false
}

// report records a probe's weight report and returns the weight to report
// with it (the last valid one when unavailable) and whether the report
// differs from the previous one.
func (h *health) report(w uint32, s WeightState) (uint32, bool) {
	switch s {
	case WeightValid:
		h.weight = w
	case WeightUnavailable:
		w = h.weight
	case WeightMissing, WeightInvalid, WeightNone:
		w = 0
	}
	changed := h.probes == 1 || s != h.lastState || w != h.lastW
	h.lastState, h.lastW = s, w
	return w, changed
}

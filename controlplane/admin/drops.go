package admin

import (
	"encoding/json"
	"sync/atomic"

	"xlb/dataplane"
)

// Drops are dropped-frame counts by reason (indexed by dataplane.Reason).
// In JSON they are an object of reason words to counts, zeros left out:
// {"no-rule": 3}.
type Drops [dataplane.NumReasons]uint64

// reasons are the reasons a frame can be dropped for: every Reason but None.
func reasons() []dataplane.Reason {
	rs := make([]dataplane.Reason, 0, dataplane.NumReasons-1)
	for r := dataplane.Reason(1); int(r) < dataplane.NumReasons; r++ {
		rs = append(rs, r)
	}
	return rs
}

// add adds a worker's or a service's drop counters.
func (d *Drops) add(c *[dataplane.NumReasons]atomic.Uint64) {
	for i := range c {
		d[i] += c[i].Load()
	}
}

// MarshalJSON writes the non-zero counts by reason word.
func (d Drops) MarshalJSON() ([]byte, error) {
	m := map[string]uint64{}
	for _, r := range reasons() {
		if d[r] != 0 {
			m[r.String()] = d[r]
		}
	}
	return json.Marshal(m)
}

// UnmarshalJSON reads what MarshalJSON writes (for `xlb status` and
// tests). Reasons it does not know are skipped, so an older client can read
// a newer server.
func (d *Drops) UnmarshalJSON(b []byte) error {
	var m map[string]uint64
	if err := json.Unmarshal(b, &m); err != nil {
		return err
	}
	*d = Drops{}
	for _, r := range reasons() {
		d[r] = m[r.String()]
	}
	return nil
}

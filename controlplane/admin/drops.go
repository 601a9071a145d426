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

// QUICCounts are the packets of services with QUIC-LB by what routing by
// connection ID made of them (indexed by dataplane.CIDOutcome): Routed,
// the rest fallbacks to the usual path. In JSON: {"routed": 9, "fallback":
// {"client_chosen": 2}}, zeros left out.
type QUICCounts [dataplane.NumCIDOutcomes]uint64

// cidFallbacks are the outcomes that are fallbacks, in order.
func cidFallbacks() []dataplane.CIDOutcome {
	var out []dataplane.CIDOutcome
	for o := dataplane.CIDRouted + 1; int(o) < dataplane.NumCIDOutcomes; o++ {
		out = append(out, o)
	}
	return out
}

// Routed is the count of packets routed by connection ID.
func (q *QUICCounts) Routed() uint64 { return q[dataplane.CIDRouted] }

func (q *QUICCounts) add(c *[dataplane.NumCIDOutcomes]atomic.Uint64) {
	for i := range c {
		q[i] += c[i].Load()
	}
}

type quicJSON struct {
	Routed   uint64            `json:"routed"`
	Fallback map[string]uint64 `json:"fallback,omitempty"`
}

// MarshalJSON writes the routed count and the non-zero fallbacks by reason.
func (q QUICCounts) MarshalJSON() ([]byte, error) {
	j := quicJSON{Routed: q.Routed()}
	for _, o := range cidFallbacks() {
		if q[o] != 0 {
			if j.Fallback == nil {
				j.Fallback = map[string]uint64{}
			}
			j.Fallback[o.String()] = q[o]
		}
	}
	return json.Marshal(j)
}

// UnmarshalJSON reads what MarshalJSON writes; unknown reasons are skipped.
func (q *QUICCounts) UnmarshalJSON(b []byte) error {
	var j quicJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	*q = QUICCounts{}
	q[dataplane.CIDRouted] = j.Routed
	for _, o := range cidFallbacks() {
		q[o] = j.Fallback[o.String()]
	}
	return nil
}

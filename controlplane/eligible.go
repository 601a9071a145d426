package controlplane

import (
	"xlb/dataplane"
)

// member is a backend as the eligibility rules see it.
type member struct {
	ref      dataplane.BackendRef
	failover bool
	healthy  bool
	weight   uint32 // effective weight (already equalised when not weighted)
}

// policy is the part of a service the eligibility rules read.
type policy struct {
	weighted bool
	ratio    float64
	drop     bool // drop_traffic_if_unhealthy
}

// failoverEnabled: at least one primary and one failover backend (SPEC §0).
func failoverEnabled(ms []member) bool {
	var p, f bool
	for _, m := range ms {
		if m.failover {
			f = true
		} else {
			p = true
		}
	}
	return p && f
}

// pick returns the members that satisfy keep.
func pick(ms []member, keep func(m *member) bool) []member {
	var out []member
	for i := range ms {
		if keep(&ms[i]) {
			out = append(out, ms[i])
		}
	}
	return out
}

// eligibleSet applies E1–E4 and returns the set, its side (E5) and the rule
// that produced it (for explain and logs).
func eligibleSet(pol policy, ms []member) ([]member, dataplane.Side, string) {
	primary, failover := dataplane.SidePrimary, dataplane.SideFailover
	if !failoverEnabled(ms) {
		if !pol.weighted { // E1
			if h := pick(ms, func(m *member) bool { return m.healthy }); len(h) > 0 {
				return h, primary, "E1: healthy backends"
			}
			return ms, primary, "E1: no backend healthy, all backends"
		}
		// E2
		steps := []struct {
			why  string
			keep func(m *member) bool
		}{
			{"E2: healthy, weight > 0", func(m *member) bool { return m.healthy && m.weight > 0 }},
			{"E2: no healthy backend with weight > 0; unhealthy, weight > 0", func(m *member) bool { return !m.healthy && m.weight > 0 }},
			{"E2: no backend with weight > 0; healthy, weight 0", func(m *member) bool { return m.healthy && m.weight == 0 }},
			{"E2: no backend with weight > 0 and none healthy; unhealthy, weight 0", func(m *member) bool { return !m.healthy && m.weight == 0 }},
		}
		for _, s := range steps {
			if set := pick(ms, s.keep); len(set) > 0 {
				return set, primary, s.why
			}
		}
		return nil, primary, "E2: no backends"
	}

	nPrimary := len(pick(ms, func(m *member) bool { return !m.failover }))
	var hp, hf []member
	rule := "E3"
	if !pol.weighted {
		hp = pick(ms, func(m *member) bool { return !m.failover && m.healthy })
		hf = pick(ms, func(m *member) bool { return m.failover && m.healthy })
	} else { // E4: P+ and F+
		rule = "E4"
		hp = pick(ms, func(m *member) bool { return !m.failover && m.healthy && m.weight > 0 })
		hf = pick(ms, func(m *member) bool { return m.failover && m.healthy && m.weight > 0 })
	}
	if len(hp)+len(hf) > 0 {
		switch {
		case len(hp) == 0:
			return hf, failover, rule + ".1: no healthy primary, healthy failover backends"
		case len(hf) == 0:
			return hp, primary, rule + ".2: no healthy failover backend, healthy primaries"
		case pol.ratio == 0:
			return hp, primary, rule + ".3: failover_ratio 0, healthy primaries"
		case float64(len(hp))/float64(nPrimary) >= pol.ratio:
			return hp, primary, rule + ".4: healthy primaries / primaries >= failover_ratio"
		default:
			return hf, failover, rule + ".5: healthy primaries / primaries < failover_ratio, healthy failover backends"
		}
	}
	if pol.drop {
		return nil, primary, rule + ": no healthy backend and drop_traffic_if_unhealthy"
	}
	if !pol.weighted {
		return pick(ms, func(m *member) bool { return !m.failover }), primary, "E3: no healthy backend, all primaries"
	}
	steps := []struct {
		why  string
		side dataplane.Side
		keep func(m *member) bool
	}{
		{"unhealthy primaries, weight > 0", primary, func(m *member) bool { return !m.failover && !m.healthy && m.weight > 0 }},
		{"unhealthy failover backends, weight > 0", failover, func(m *member) bool { return m.failover && !m.healthy && m.weight > 0 }},
		{"healthy primaries, weight 0", primary, func(m *member) bool { return !m.failover && m.healthy && m.weight == 0 }},
		{"healthy failover backends, weight 0", failover, func(m *member) bool { return m.failover && m.healthy && m.weight == 0 }},
		{"unhealthy primaries, weight 0", primary, func(m *member) bool { return !m.failover && !m.healthy && m.weight == 0 }},
		{"unhealthy failover backends, weight 0", failover, func(m *member) bool { return m.failover && !m.healthy && m.weight == 0 }},
	}
	for _, s := range steps {
		if set := pick(ms, s.keep); len(set) > 0 {
			return set, s.side, "E4: no healthy backend with weight > 0; " + s.why
		}
	}
	return nil, primary, "E4: no backends"
}

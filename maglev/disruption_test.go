package maglev

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// disruption compares two tables of the same size, given as slot owners, when
// only backend changed was added, removed or re-weighted. Slots that move to
// or from changed must move; the others should not (S4). It returns the
// fraction of the slots held by the other backends before that now belong to
// yet another backend, and the fraction of all slots that changed owner.
func disruption(before, after []string, changed string) (others, total float64) {
	var held, moved, changes int
	for i := range before {
		if before[i] != after[i] {
			changes++
		}
		if before[i] == changed {
			continue
		}
		held++
		if after[i] != before[i] && after[i] != changed {
			moved++
		}
	}
	return float64(moved) / float64(held), float64(changes) / float64(len(before))
}

// s4Case is one S4 scenario: a set before and after a change of one backend.
type s4Case struct {
	name          string
	before, after []Backend
	changed       string
	raisesMax     bool // the change raises the largest weight
}

// s4Cases returns, for base, the removal, addition and re-weighting of a few
// backends (positions spread over the Key order).
func s4Cases(base []Backend) []s4Case {
	var cs []s4Case
	n := len(base)
	var maxW uint32
	for _, b := range base {
		maxW = max(maxW, b.Weight)
	}
	for _, at := range []int{0, n / 3, n / 2, n - 1} {
		k := base[at].Key
		cs = append(cs,
			s4Case{name: "remove " + k, before: base, after: slices.Delete(slices.Clone(base), at, at+1), changed: k},
			s4Case{name: "add " + k, before: slices.Delete(slices.Clone(base), at, at+1), after: base, changed: k},
		)
		w0 := base[at].Weight
		for _, w := range []uint32{w0 / 2, 0, w0 + w0/2, 1000} {
			rw := slices.Clone(base)
			rw[at].Weight = w
			cs = append(cs, s4Case{
				name: fmt.Sprintf("reweight %s %d->%d", k, w0, w), before: base, after: rw, changed: k,
				raisesMax: w > maxW,
			})
		}
	}
	return cs
}

// s4Limit is the asserted bound on the fraction of the other backends' slots
// that move. Maglev does not guarantee a bound; these are what it achieves at
// M=65537 with margin. Removing or adding one backend: < 1% up to N=100. At
// N=1000 each backend holds only ~65 slots and random weighted sets measured
// up to ~1.1%, so 2%. Raising the largest weight changes the rhythm in which
// every other backend claims slots (they now claim less often per round), so
// it moves more: measured up to ~2.3% at N=1000; 3% is asserted.
func s4Limit(n int, c s4Case) float64 {
	switch {
	case c.raisesMax:
		return 0.03
	case n >= 1000:
		return 0.02
	default:
		return 0.01
	}
}

func TestS4_MinimalDisruption(t *testing.T) {
	rng := rand.New(rand.NewPCG(4, 4))
	for _, n := range []int{10, 100, 1000} {
		random := backendsN(n, 0)
		for i := range random {
			random[i].Weight = uint32(rng.IntN(1000) + 1)
		}
		for _, set := range []struct {
			name string
			base []Backend
		}{{"equal", backendsN(n, 100)}, {"random", random}} {
			worst := map[string]float64{}
			for _, c := range s4Cases(set.base) {
				others, total := disruption(
					owners(build(t, DefaultSize, c.before), c.before),
					owners(build(t, DefaultSize, c.after), c.after),
					c.changed)
				t.Logf("N=%d %s weights, %-34s others moved %6.3f%%  all slots changed %6.3f%%",
					n, set.name, c.name, 100*others, 100*total)
				if limit := s4Limit(n, c); others >= limit {
					t.Errorf("N=%d %s weights, %s: %.3f%% of the other backends' slots moved, limit %.0f%%",
						n, set.name, c.name, 100*others, 100*limit)
				}
				kind := c.name[:3]
				if c.raisesMax {
					kind = "max"
				}
				worst[kind] = max(worst[kind], others)
			}
			t.Logf("N=%d %s weights, worst: remove %.3f%% add %.3f%% reweight %.3f%% reweight above max %.3f%%",
				n, set.name, 100*worst["rem"], 100*worst["add"], 100*worst["rew"], 100*worst["max"])
		}
	}
}

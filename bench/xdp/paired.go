package xdp

import (
	"math"
	"slices"

	"xlb/bench/report"
)

// The paired search compares xlb-ct's lossless rate with xlb's robustly on
// a machine whose load comes and goes (each variant's own search has given
// ratios from 0.55 to 1.4 in back-to-back runs of one build): both
// variants are searched in lock-step, their trials interleaved (xlb, xlb-ct,
// xlb, xlb-ct, ...) so that a disturbance of the machine falls on both
// alike, and each rate step is judged by the majority of pairedTrials
// trials rather than by one.
const (
	// pairedTrials are the trials per variant and rate step; a step
	// passes when most of them pass.
	pairedTrials = 3
	// pairedSteps are the most rate steps per variant (quick: fewer).
	pairedSteps, pairedStepsQuick = 8, 3
	// pairedStep is the factor a rate goes up by after a pass, down by
	// after a failure, until a pass and a failure bracket it.
	pairedStep = 1.2
)

// Paired is one variant's result of the paired search (a case with Load
// "paired"; its RatePPS is Lo).
type Paired struct {
	// Lo is the highest rate whose step passed (0: none), Hi the lowest
	// whose step failed (0: none, up to what the generator sent).
	Lo float64 `json:"lo_pps"`
	Hi float64 `json:"hi_pps,omitempty"`
	// Steps are the rate steps in order, each with its trials' losses.
	Steps []PairedStep `json:"steps"`
}

// PairedStep is one rate step of one variant.
type PairedStep struct {
	RatePPS float64   `json:"rate_pps"`
	Losses  []float64 `json:"losses"`
	Pass    bool      `json:"pass"`
}

// pairedState is one variant's bracket while the search runs.
type pairedState struct {
	Paired
	rate, top float64
	done      bool
}

// next moves s after a step at s.rate that passed or not.
func (s *pairedState) next(pass bool, resolution float64) {
	if pass {
		s.Lo = s.rate
	} else {
		s.Hi = s.rate
	}
	switch {
	case s.Lo > 0 && s.Hi > 0:
		if s.Hi/s.Lo-1 <= resolution {
			s.done = true
			return
		}
		s.rate = (s.Lo + s.Hi) / 2
	case s.Hi == 0:
		if s.rate >= s.top {
			s.done = true // no loss up to what the generator sends
			return
		}
		s.rate = min(s.rate*pairedStep, s.top)
	default:
		s.rate /= pairedStep
	}
}

// pairedRun runs one trial of variant i (0: xlb, 1: xlb-ct) at rate.
type pairedRun func(i int, rate float64) (Case, error)

// pairedSearch searches both variants' lossless rates together from one
// starting rate (the same for both, so that their first steps are at the
// same rate): per step, pairedTrials rounds of one trial of each variant
// still searching, in turn. top are the rates the generator sent at full
// load (the most a step tries). steps bounds the steps per variant.
func pairedSearch(cfg *Config, start float64, top [2]float64, steps int, run pairedRun, progress *report.Progress) ([2]Paired, error) {
	var st [2]pairedState
	for i := range st {
		st[i].top = top[i]
		st[i].rate = min(start, top[i])
		st[i].done = st[i].rate <= 0
	}
	step := 0
	for ; step < steps && !(st[0].done && st[1].done); step++ {
		var losses [2][]float64
		var passes [2]int
		for range pairedTrials {
			for i := range st {
				if st[i].done {
					continue
				}
				c, err := run(i, st[i].rate)
				if err != nil {
					return [2]Paired{}, err
				}
				losses[i] = append(losses[i], c.Loss)
				if c.Loss <= cfg.LossMax && c.Sent > 0 {
					passes[i]++
				}
			}
		}
		progress.Add(1)
		for i := range st {
			if st[i].done {
				continue
			}
			pass := 2*passes[i] > pairedTrials
			st[i].Steps = append(st[i].Steps, PairedStep{RatePPS: st[i].rate, Losses: losses[i], Pass: pass})
			st[i].next(pass, cfg.Resolution)
		}
	}
	progress.Add(steps - step)
	return [2]Paired{st[0].Paired, st[1].Paired}, nil
}

// pairedRatio is xlb-ct's paired lossless rate over xlb's, with the range
// the two brackets allow (lo: xlb-ct's pass over xlb's failure, hi: xlb-ct's
// failure over xlb's pass; a missing bound is the rate itself). ok false
// when either found no passing rate.
func pairedRatio(x, ct Paired) (ratio, lo, hi float64, ok bool) {
	if x.Lo <= 0 || ct.Lo <= 0 {
		return 0, 0, 0, false
	}
	or := func(v, d float64) float64 {
		if v > 0 {
			return v
		}
		return d
	}
	return ct.Lo / x.Lo, ct.Lo / or(x.Hi, x.Lo), or(ct.Hi, ct.Lo) / x.Lo, true
}

// medianLoss is the median of a step's losses.
func medianLoss(ls []float64) float64 {
	if len(ls) == 0 {
		return math.NaN()
	}
	s := slices.Clone(ls)
	slices.Sort(s)
	return s[len(s)/2]
}

// Package core is `lbbench core`: the decision engine (parse, rules, keys,
// shared conntrack, Maglev, rewrite, counters) over in-memory frame ports
// (dataplane.MemFramePort), with 1..N workers each polling its own port and
// one conntrack table shared by all of them, as in production. Traffic comes
// from bench/flows, built before the clock starts; a measured loop only
// feeds the port and polls.
//
// What is measured, per case: packets per second (all workers, and per
// worker), nanoseconds per packet in wall time and in the worker thread's
// own CPU time (which time slices given to other processes do not inflate),
// heap allocations during the measured window (the process's, while only
// the workers run), and the share of packets forwarded as new connections.
// Beside the cases: a Go map hit against a conntrack hit and the engine
// (CompareFlows, the ratio targets), the cases again with flow sync on
// (FlowSync), and routing by QUIC-LB connection ID against plain UDP
// (QUIC).
package core

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"time"

	"xlb/bench/flows"
	"xlb/conntrack"
)

// Options say what Run measures.
type Options struct {
	// Workers is the most workers: the scaling sweep runs 1..Workers.
	Workers int
	// Flows are the live-flow counts of the sweep over table sizes. The
	// largest of them up to 1M is the headline, where workers, frame
	// sizes, the targets and the profile are measured.
	Flows []int
	// Duration is the measured window of each case.
	Duration time.Duration
	// LookupEntries is the table of the direct conntrack lookup case (0:
	// not measured).
	LookupEntries int
	// CompareFlows are the live-flow counts (each one of Flows) at which a
	// Go map hit, a conntrack hit and the engine per established-v4 packet
	// are measured interleaved, CompareRounds rounds each (medians).
	CompareFlows  []int
	CompareRounds int
	// Replay bounds the frames (distinct flows) a case replays; SizeReplay
	// those of the frame-size cases.
	Replay, SizeReplay int
	// Profile takes a CPU profile of established-v4 at the headline and
	// summarises its top functions with `go tool pprof` when there is one.
	Profile bool
	// ProfileFile keeps that profile there (implies Profile); otherwise it
	// goes to a temporary file, removed after.
	ProfileFile string
	// Progress, when set, advances by one per step.
	Progress Progress
	// Quick marks a quick run's defaults (reported).
	Quick bool
	// FlowSync measures established-v4, realistic and syn at the
	// headline again with flow sync on (a ring per worker's decider, a
	// goroutine draining them as the sync goroutine would), right after
	// the same case with it off.
	FlowSync bool
	// QUIC measures the QUIC-LB cases: plain UDP, and short-header
	// packets routed by a plaintext, a one-pass and a four-pass AES
	// connection ID (one worker, 4096 client tuples).
	QUIC bool
}

// Progress is report.Progress as Run uses it.
type Progress interface {
	Add(n int)
	Done()
}

// Defaults are the options of a full run (a few minutes on two cores) and
// of a quick one (seconds; no 1M prefill).
func Defaults(quick bool) Options {
	if quick {
		return Options{Workers: runtime.NumCPU(), Flows: []int{1_000, 10_000, 100_000},
			Duration: 40 * time.Millisecond, LookupEntries: 100_000, Replay: 1 << 14, SizeReplay: 1 << 13, Quick: true,
			CompareFlows: []int{1_000, 10_000}, CompareRounds: 3, QUIC: true}
	}
	return Options{Workers: runtime.NumCPU(), Flows: []int{1_000, 10_000, 100_000, 1_000_000, 4_000_000},
		Duration: 400 * time.Millisecond, LookupEntries: 1_000_000, Replay: fullReplay, SizeReplay: fullSizeReplay, Profile: true,
		CompareFlows: []int{1_000, 10_000, 100_000, 1_000_000}, CompareRounds: 5, QUIC: true}
}

// Replay sizes of a full run: a sweep case replays up to fullReplay
// distinct flows (half the live flows: each family's), so that at 1M live
// flows the table lines touched (256k buckets, 32 MiB with their slots)
// exceed the last-level cache and each lookup pays the miss it pays in
// production. The frame-size cases replay fullSizeReplay flows in both
// sizes (1500-byte frames of 256k flows would be 400 MB). A quick run
// replays fewer: each case's warm-up is a pass over its frames.
const (
	fullReplay     = 1 << 18
	fullSizeReplay = 1 << 15
	minReplay      = 256
)

// replayFor is the number of frames a sweep case replays for live flows.
func replayFor(live, most int) int { return min(max(live/2, minReplay), most) }

// Frame sizes: the sweep's and the large one of the size comparison.
const (
	smallFrame = 64
	largeFrame = 1500
)

// Case is one measured configuration.
type Case struct {
	// Engine false is the baseline ("ring only"): the frame ports alone
	// (copy and completion of each frame), no engine.
	Engine     bool    `json:"engine"`
	Mix        string  `json:"mix"`
	Flows      int     `json:"live_flows"`
	Capacity   int     `json:"capacity"`
	Workers    int     `json:"workers"`
	FrameSize  int     `json:"frame_size"`  // asked for
	FrameBytes float64 `json:"frame_bytes"` // mean of the frames replayed
	Replay     int     `json:"replay_frames"`
	Packets    uint64  `json:"packets"`
	Seconds    float64 `json:"seconds"`
	// Mpps is all workers together, MppsPerCore per worker.
	Mpps        float64 `json:"mpps"`
	MppsPerCore float64 `json:"mpps_per_core"`
	// NsPerPkt is wall time per packet and worker; CPUNsPerPkt the worker
	// threads' CPU time per packet.
	NsPerPkt     float64 `json:"ns_per_pkt"`
	CPUNsPerPkt  float64 `json:"cpu_ns_per_pkt"`
	Allocs       uint64  `json:"allocs"`
	AllocsPerPkt float64 `json:"allocs_per_pkt"`
	// NewPct is the share of packets forwarded as new connections.
	NewPct float64 `json:"new_pct"`
	// FlowSync: the deciders pushed to flow-sync rings; SyncRecords
	// were pushed and SyncDrops dropped (ring full) in the window.
	FlowSync    bool   `json:"flow_sync,omitempty"`
	SyncRecords uint64 `json:"sync_records,omitempty"`
	SyncDrops   uint64 `json:"sync_drops,omitempty"`
	// CIDRouted: the packets routed by QUIC connection ID (QUIC cases).
	CIDRouted uint64 `json:"cid_routed,omitempty"`
}

// Result is everything Run measured.
type Result struct {
	Quick      bool      `json:"quick"`
	Workers    int       `json:"workers"`
	Flows      []int     `json:"live_flows"`
	Headline   int       `json:"headline_flows"`
	Duration   float64   `json:"case_seconds"`
	Replay     int       `json:"replay"`      // most frames a case replays
	SizeReplay int       `json:"size_replay"` // frames of the frame-size cases
	Prefills   []Prefill `json:"prefills"`
	Cases      []Case    `json:"cases"`
	Lookups    []Lookup  `json:"conntrack_lookups,omitempty"`
	// QUIC are the QUIC-LB cases (Options.QUIC), plain UDP first.
	QUIC     []Case    `json:"quic,omitempty"`
	Compares []Compare `json:"gomap_compare,omitempty"`
	// InCacheBaseline, when set (lbbench core --baseline), is the saved
	// run the in-cache target compares with.
	InCacheBaseline *InCacheRef `json:"in_cache_baseline,omitempty"`
	Profile         *Profile    `json:"profile,omitempty"`
}

type caseKey struct {
	engine                      bool
	mix                         string
	flows, workers, size, frame int
}

// step is one unit of the plan.
type step struct {
	kind  stepKind
	flows int
	c     caseKey
}

type stepKind uint8

const (
	stepPrefill stepKind = iota
	stepCase
	stepProfile
	stepLookup
	stepCompare
	stepSync // c again, flow sync on
	stepQUIC
)

// workerCounts is the scaling sweep: every count up to 4, then powers of
// two, then n.
func workerCounts(n int) []int {
	var out []int
	for w := 1; w <= n; w++ {
		if w <= 4 || w&(w-1) == 0 || w == n {
			out = append(out, w)
		}
	}
	return out
}

func headline(fl []int) int {
	h := 0
	for _, f := range fl {
		if f <= 1_000_000 && f > h {
			h = f
		}
	}
	if h == 0 && len(fl) > 0 {
		h = slices.Min(fl)
	}
	return h
}

// plan orders the steps. Per table, the mixes that only read it come
// first; SYNs, which add keys, last. Each case is measured once even when
// several tables show it.
func plan(o *Options) []step {
	var steps []step
	seen := map[caseKey]bool{}
	add := func(c caseKey) {
		if !seen[c] {
			seen[c] = true
			steps = append(steps, step{kind: stepCase, flows: c.flows, c: c})
		}
	}
	head := headline(o.Flows)
	for _, f := range o.Flows {
		steps = append(steps, step{kind: stepPrefill, flows: f})
		r := replayFor(f, o.Replay)
		if slices.Contains(o.CompareFlows, f) && o.CompareRounds > 0 {
			// First, while the table holds the prefill's flows alone.
			steps = append(steps, step{kind: stepCompare, flows: f,
				c: caseKey{engine: true, mix: flows.EstablishedV4.Name, flows: f, workers: 1, size: smallFrame, frame: r}})
		}
		for _, m := range flows.Mixes() {
			base := caseKey{engine: true, mix: m.Name, flows: f, workers: 1, size: smallFrame, frame: r}
			add(base)
			if f != head {
				continue
			}
			if o.FlowSync && (m == flows.EstablishedV4 || m == flows.Realistic || m == flows.AllSYN) {
				// Right after the same case without: the same table.
				steps = append(steps, step{kind: stepSync, flows: f, c: base})
			}
			if m == flows.EstablishedV4 || m == flows.Realistic {
				for _, w := range workerCounts(o.Workers) {
					add(caseKey{engine: true, mix: m.Name, flows: f, workers: w, size: smallFrame, frame: r})
				}
			}
			rs := min(r, o.SizeReplay)
			for _, size := range []int{smallFrame, largeFrame} {
				add(caseKey{engine: true, mix: m.Name, flows: f, workers: 1, size: size, frame: rs})
			}
			if m == flows.EstablishedV4 {
				for _, size := range []int{smallFrame, largeFrame} {
					add(caseKey{engine: false, mix: m.Name, flows: f, workers: 1, size: size, frame: rs})
				}
				if o.Profile || o.ProfileFile != "" {
					steps = append(steps, step{kind: stepProfile, flows: f,
						c: caseKey{engine: true, mix: m.Name, flows: f, workers: 1, size: smallFrame, frame: r}})
				}
			}
		}
	}
	if o.QUIC {
		steps = append(steps, step{kind: stepQUIC})
	}
	if o.LookupEntries > 0 {
		steps = append(steps, step{kind: stepLookup})
	}
	return steps
}

// Steps is how many steps Run will take (for a progress bar).
func Steps(o Options) int { return len(plan(&o)) }

// Run measures what o asks for.
func Run(o Options) (*Result, error) {
	if o.Workers < 1 {
		return nil, errors.New("workers must be at least 1")
	}
	if o.Duration <= 0 {
		return nil, errors.New("duration must be positive")
	}
	if o.Replay < minReplay || o.SizeReplay < 1 {
		return nil, fmt.Errorf("replay %d, size replay %d: want at least %d and 1", o.Replay, o.SizeReplay, minReplay)
	}
	for _, f := range o.Flows {
		if f < 1 || f > conntrack.MaxCapacity/2 || f+o.Replay > flows.MaxFlows {
			return nil, fmt.Errorf("live flows %d out of range", f)
		}
	}
	res := &Result{Quick: o.Quick, Workers: o.Workers, Flows: o.Flows, Headline: headline(o.Flows), Duration: o.Duration.Seconds(),
		Replay: o.Replay, SizeReplay: o.SizeReplay}
	mixes := map[string]flows.Mix{}
	for _, m := range flows.Mixes() {
		mixes[m.Name] = m
	}
	spareThreads(o.Workers + runtime.GOMAXPROCS(0) + 2)
	var b *bed
	type setKey struct {
		mix               string
		flows, size, nfrm int
	}
	sets := map[setKey]*flows.Set{}
	getSet := func(c caseKey) (*flows.Set, error) {
		k := setKey{c.mix, c.flows, c.size, c.frame}
		if s := sets[k]; s != nil {
			return s, nil
		}
		s, err := flows.Generate(flows.Spec{Mix: mixes[c.mix], Live: c.flows, Frames: c.frame, Size: c.size, Seed: uint64(c.flows)})
		if err != nil {
			return nil, err
		}
		sets[k] = s
		return s, nil
	}
	for _, st := range plan(&o) {
		switch st.kind {
		case stepPrefill:
			b, sets = nil, map[setKey]*flows.Set{}
			runtime.GC() // the previous table and frames go before the next are built
			var err error
			if b, err = newBed(max(2*st.flows, conntrack.MinCapacity)); err != nil {
				return nil, err
			}
			p, err := b.prefill(st.flows, o.Workers)
			if err != nil {
				return nil, fmt.Errorf("prefill %d flows: %w", st.flows, err)
			}
			res.Prefills = append(res.Prefills, p)
		case stepCase, stepSync:
			c, err := measureCase(b, st.c, getSet, o.Duration, st.kind == stepSync)
			if err != nil {
				return nil, err
			}
			res.Cases = append(res.Cases, c)
		case stepProfile:
			res.Profile = profileCase(b, st.c, getSet, o)
		case stepCompare:
			c, err := measureCompare(b, st.flows, o.CompareRounds, st.c, getSet, o.Duration)
			if err != nil {
				return nil, fmt.Errorf("comparison with the Go map, %s flows: %w", count(st.flows), err)
			}
			res.Compares = append(res.Compares, c)
		case stepQUIC:
			runtime.GC()
			q, err := measureQUIC(&o)
			if err != nil {
				return nil, err
			}
			res.QUIC = q
		case stepLookup:
			l, err := measureLookups(o.LookupEntries, o.Duration)
			if err != nil {
				return nil, err
			}
			res.Lookups = l
		}
		if o.Progress != nil {
			o.Progress.Add(1)
		}
	}
	if o.Progress != nil {
		o.Progress.Done()
	}
	return res, nil
}

func caseName(c caseKey) string {
	e := "engine"
	if !c.engine {
		e = "ring only"
	}
	w := "1 worker"
	if c.workers > 1 {
		w = fmt.Sprintf("%d workers", c.workers)
	}
	return fmt.Sprintf("%s %s, %s live flows, %s, %d-byte frames, %s flows replayed", e, c.mix, count(c.flows), w, c.size, count(c.frame))
}

func measureCase(b *bed, c caseKey, getSet func(caseKey) (*flows.Set, error), dur time.Duration, sync bool) (Case, error) {
	set, err := getSet(c)
	if err != nil {
		return Case{}, err
	}
	workers := min(c.workers, len(set.Frames))
	r := &run{frames: set.Split(workers), dur: dur, sync: sync && c.engine}
	if c.engine {
		r.bed = b
	}
	s, err := r.measure()
	if err != nil {
		name := caseName(c)
		if r.sync {
			name += ", flow sync on"
		}
		return Case{}, fmt.Errorf("%s: %w", name, err)
	}
	pk := float64(s.packets)
	return Case{
		Engine: c.engine, Mix: c.mix, Flows: c.flows, Capacity: b.capacity, Workers: workers,
		FrameSize: c.size, FrameBytes: float64(set.Bytes) / float64(len(set.Frames)), Replay: len(set.Frames),
		Packets: s.packets, Seconds: dur.Seconds(),
		Mpps: s.mpps, MppsPerCore: s.mpps / float64(workers), NsPerPkt: s.wallNs, CPUNsPerPkt: s.cpuNs,
		Allocs: s.allocs, AllocsPerPkt: float64(s.allocs) / pk, NewPct: 100 * float64(s.newConn) / pk,
		FlowSync: r.sync, SyncRecords: s.syncRecords, SyncDrops: s.syncDrops,
	}, nil
}

// Profile is where the time of one case goes.
type Profile struct {
	Case    string  `json:"case"`
	Seconds float64 `json:"seconds"`
	File    string  `json:"file,omitempty"` // kept where asked
	// Top are the functions with the most samples of their own (flat).
	Top []ProfileLine `json:"top,omitempty"`
	// Error says why there is no summary.
	Error string `json:"error,omitempty"`
}

// ProfileLine is one function of the profile.
type ProfileLine struct {
	Function string  `json:"function"`
	FlatPct  float64 `json:"flat_pct"`
	CumPct   float64 `json:"cum_pct"`
}

// profileCase runs c again, longer, under the CPU profiler and summarises
// the profile. Failing to profile is reported in the result, not an error.
func profileCase(b *bed, c caseKey, getSet func(caseKey) (*flows.Set, error), o Options) *Profile {
	dur := max(3*time.Second, 4*o.Duration) // 300 samples at least
	p := &Profile{Case: caseName(c), Seconds: dur.Seconds()}
	set, err := getSet(c)
	if err != nil {
		p.Error = err.Error()
		return p
	}
	var f *os.File
	if o.ProfileFile != "" {
		f, err = os.Create(o.ProfileFile)
		p.File = o.ProfileFile
	} else {
		f, err = os.CreateTemp("", "lbbench-core-*.pprof")
		if f != nil {
			defer os.Remove(f.Name())
		}
	}
	if err != nil {
		p.Error = err.Error()
		return p
	}
	defer f.Close()
	var profErr error
	r := &run{bed: b, frames: set.Split(1), dur: dur, onStart: func() { profErr = pprof.StartCPUProfile(f) }}
	_, err = r.measure()
	if profErr == nil {
		pprof.StopCPUProfile()
	}
	switch {
	case profErr != nil:
		p.Error = profErr.Error()
	case err != nil:
		p.Error = err.Error()
	default:
		p.Top, err = pprofTop(f.Name())
		if err != nil {
			p.Error = err.Error()
		}
	}
	return p
}

// count formats a number of flows: 1k, 100k, 1M, 4M.
func count(n int) string {
	switch {
	case n >= 1_000_000 && n%1_000_000 == 0:
		return fmt.Sprintf("%dM", n/1_000_000)
	case n >= 1_000 && n%1_000 == 0:
		return fmt.Sprintf("%dk", n/1_000)
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%dMi", n>>20)
	}
	return fmt.Sprint(n)
}

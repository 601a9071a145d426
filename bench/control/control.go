// Package control measures the control plane for `lbbench control`: how
// validating a configuration, building the first snapshot (Maglev tables
// included), rebuilding it, and a whole reload (validate, VIP list, health
// check targets, control plane) grow with the number of VIPs and backends,
// what they keep in memory beyond the Maglev tables, and whether health
// checks of many targets keep their interval.
package control

import (
	"context"
	"fmt"
	"net/netip"
	"runtime"
	"slices"
	"sync"
	"time"

	"xlb/config"
	"xlb/controlplane"
	"xlb/controlplane/appliance"
	"xlb/healthcheck"
)

// Config says what to measure.
type Config struct {
	Quick bool
	// VIPs are the configuration sizes: each VIP has one service of
	// Backends endpoints and two rules (ports 80 and 443).
	VIPs     []int
	Backends int
	// TableSize is every service's maglev_table_size.
	TableSize uint32
	// Reps is how many times validation, snapshot rebuild and reload are
	// timed per size (the median is kept); the first build is timed once.
	Reps int
	// HealthTargets probed every HealthInterval by a checker whose probe
	// answers at once, for HealthRounds intervals after the last target's
	// first probe; 0 skips the health-check measurement.
	HealthTargets  int
	HealthInterval time.Duration
	HealthRounds   int
}

// Full is the full run: sizes 1k to 20k VIPs at the default table size.
func Full() Config {
	return Config{
		VIPs: []int{1000, 2000, 5000, 10000, 20000}, Backends: 4, TableSize: 65537, Reps: 3,
		HealthTargets: 80000, HealthInterval: 2 * time.Second, HealthRounds: 2,
	}
}

// Quick is CI's run: small sizes that still show the growth, small tables.
func Quick() Config {
	return Config{
		Quick: true, VIPs: []int{500, 2000}, Backends: 4, TableSize: 1021, Reps: 3,
		HealthTargets: 2000, HealthInterval: time.Second, HealthRounds: 1,
	}
}

// Steps is the number of progress steps Run reports.
func Steps(cfg Config) int {
	n := len(cfg.VIPs)
	if cfg.HealthTargets > 0 {
		n++
	}
	return n
}

// Point is the measurement of one configuration size.
type Point struct {
	VIPs     int `json:"vips"`
	Backends int `json:"backends"`
	Rules    int `json:"rules"`
	// ConfigBytes is the size of the generated file.
	ConfigBytes int `json:"config_bytes"`
	// ValidateMs: config.Parse (decode, every check, defaults).
	Validate Timing `json:"validate"`
	// FirstBuildMs: controlplane.New, every Maglev table built.
	FirstBuild Timing `json:"first_build"`
	// SnapshotMs: a publish with the tables reused (what every health
	// change costs).
	Snapshot Timing `json:"snapshot"`
	// ReloadMs: a whole reload that replaces one backend in 1 % of the
	// services and moves 1 % of the VIPs: validate, VIP map, health-check
	// Set, control plane Apply (their tables rebuilt), stale VIPs.
	Reload Timing `json:"reload"`
	// HealthSetMs: the checker's Set of every target alone, all kept.
	HealthSet Timing `json:"health_set"`
	// VIPMapSet: the VIP map's SetVIPs of every VIP alone, 1 % of them
	// moved (a reload sets it twice: the union of old and new VIPs, then
	// the new).
	VIPMapSet Timing `json:"vip_map_set"`
	// VIPMap says what the VIP map of the reload was: the XDP program's,
	// or a stand-in and why.
	VIPMap string `json:"vip_map"`
	// HeapBeyondTablesMB: heap and goroutine stacks held by the running
	// configuration, control plane, snapshot and checker, minus the tables.
	HeapBeyondTablesMB float64 `json:"heap_beyond_tables_mb"`
	// TablesMB: the heap the Maglev tables of the snapshot take (each
	// rounded up as the allocator rounds it), TableEntriesMB their entries
	// alone; TableEntryBytes the width of one entry.
	TablesMB        float64 `json:"tables_mb"`
	TableEntriesMB  float64 `json:"table_entries_mb"`
	TableEntryBytes int     `json:"table_entry_bytes"`
}

// Health is the drift of probe start times of many targets from their
// schedule: a target's k-th probe is due k intervals after its first.
type Health struct {
	Targets    int     `json:"targets"`
	IntervalMs float64 `json:"interval_ms"`
	Probes     int     `json:"probes"`
	// Late are percentiles of (start - due), in ms, over every probe
	// after each target's first.
	LateP50Ms float64 `json:"late_p50_ms"`
	LateP99Ms float64 `json:"late_p99_ms"`
	LateMaxMs float64 `json:"late_max_ms"`
	// Missed counts intervals in which a target was not probed.
	Missed int `json:"missed"`
	// CPUShare is the process's CPU time over the wall-clock time of the
	// run (2 = two cores busy): how much of the machine the checker, the
	// control plane it feeds and the collector took, or could get.
	CPUShare float64 `json:"cpu_share"`
}

// Result is one run.
type Result struct {
	Quick     bool    `json:"quick"`
	TableSize uint32  `json:"table_size"`
	Points    []Point `json:"points"`
	Health    *Health `json:"health,omitempty"`
}

// Run measures cfg; progress hears of each finished step.
func Run(cfg Config, progress func(int)) (*Result, error) {
	res := &Result{Quick: cfg.Quick, TableSize: cfg.TableSize}
	// Health checks first, on a heap that the large configurations have
	// not grown yet.
	if cfg.HealthTargets > 0 {
		h, err := measureHealth(cfg.HealthTargets, cfg.HealthInterval, cfg.HealthRounds)
		if err != nil {
			return nil, err
		}
		res.Health = h
		progress(1)
	}
	for _, n := range cfg.VIPs {
		p, err := measure(cfg, n)
		if err != nil {
			return nil, fmt.Errorf("%d VIPs: %w", n, err)
		}
		res.Points = append(res.Points, p)
		progress(1)
	}
	return res, nil
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

// Timing is one step's median wall-clock and CPU time.
type Timing struct {
	WallMs float64 `json:"wall_ms"`
	// CPUMs is the process's CPU time (every thread, the garbage
	// collector's included): what the step costs whatever else the
	// machine runs.
	CPUMs float64 `json:"cpu_ms"`
}

// timed runs fn reps times and returns the medians. Each run starts after
// a collection, so that the collector's work in it is its own garbage's.
func timed(reps int, fn func() error) (Timing, error) {
	var ws, cs []float64
	for range max(reps, 1) {
		runtime.GC()
		t, c := time.Now(), cpuTime()
		if err := fn(); err != nil {
			return Timing{}, err
		}
		ws, cs = append(ws, ms(time.Since(t))), append(cs, ms(cpuTime()-c))
	}
	return Timing{WallMs: median(ws), CPUMs: median(cs)}, nil
}

// inUse is the heap and the goroutine stacks after a collection.
func inUse() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc + m.StackInuse
}

// tableAlloc is the heap one table of m entries takes: the allocator
// rounds a size up to its size class or, above 32 KiB, to whole 8 KiB
// pages (runtime/sizeclasses.go).
func tableAlloc(m int) uint64 {
	n := uint64(m * tableEntryBytes)
	if n > 32768 {
		return (n + 8191) &^ 8191
	}
	for _, c := range sizeClasses {
		if n <= c {
			return c
		}
	}
	return n
}

// sizeClasses are the Go allocator's small size classes.
var sizeClasses = []uint64{8, 16, 24, 32, 48, 64, 80, 96, 112, 128, 144, 160, 176, 192, 208, 224, 240, 256,
	288, 320, 352, 384, 416, 448, 480, 512, 576, 640, 704, 768, 896, 1024, 1152, 1280, 1408, 1536, 1792, 2048,
	2304, 2688, 3072, 3200, 3456, 4096, 4864, 5376, 6144, 6528, 6784, 6912, 8192, 9472, 9728, 10240, 10880,
	12288, 13568, 14336, 16384, 18432, 19072, 20480, 21760, 24576, 27264, 28672, 32768}

// vipSetter is the XDP program's VIP map, or a stand-in.
type vipSetter interface {
	SetVIPs([]netip.Addr) error
}

// vipSet stands in for the XDP program's VIP map where it cannot be
// loaded: the set of keys it would hold, rebuilt on every call as
// xdpprog.SetVIPs builds its own.
type vipSet struct{ m map[netip.Addr]struct{} }

func (v *vipSet) SetVIPs(as []netip.Addr) error {
	m := make(map[netip.Addr]struct{}, len(as))
	for _, a := range as {
		m[a] = struct{}{}
	}
	v.m = m
	return nil
}

// vipMap returns the XDP program's VIP map when it can be loaded (root or
// CAP_BPF), else the stand-in; what says which, and why.
func vipMap() (v vipSetter, closeMap func(), what string) {
	v, closeMap, what, err := openVIPMap()
	if err != nil {
		return &vipSet{}, func() {}, "a stand-in that builds the set of keys (" + err.Error() + ")"
	}
	return v, closeMap, what
}

func measure(cfg Config, n int) (Point, error) {
	gen := Gen{VIPs: n, Backends: cfg.Backends, TableSize: cfg.TableSize, CheckIntervalSec: 300}
	changed := gen
	changed.Changed = max(1, n/100)
	changed.MovedVIPs = changed.Changed
	data, data2 := gen.Config(), changed.Config()
	p := Point{VIPs: n, Backends: gen.TotalBackends(), ConfigBytes: len(data)}
	base := inUse()

	var cfg1 *config.Config
	var err error
	p.Validate, err = timed(cfg.Reps, func() error {
		cfg1, err = config.Parse("gen.toml", data)
		return err
	})
	if err != nil {
		return p, err
	}
	p.Rules = len(cfg1.Rules)

	var cp *controlplane.ControlPlane
	p.FirstBuild, err = timed(1, func() error {
		cp, err = controlplane.New(cfg1, nil, controlplane.Options{InitialWeight: 1}, 0)
		return err
	})
	if err != nil {
		return p, err
	}
	p.Snapshot, _ = timed(cfg.Reps, func() error { cp.Publish(0); return nil })

	// A checker that runs, so that Set starts every target's loop, with a
	// probe that needs no network; the interval (300 s) keeps it quiet.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	hc := healthcheck.New(nil, healthcheck.Options{Probe: func(context.Context, healthcheck.Target) bool { return true }})
	var wg sync.WaitGroup
	wg.Go(func() { _ = hc.Run(ctx) })
	defer wg.Wait()
	defer cancel()
	targets := appliance.HealthTargets(cfg1)
	if err := hc.Set(targets); err != nil {
		return p, err
	}
	p.HealthSet, err = timed(cfg.Reps, func() error { return hc.Set(targets) })
	if err != nil {
		return p, err
	}

	vips, closeMap, what := vipMap()
	defer closeMap()
	p.VIPMap = what
	allVIPs := make([]netip.Addr, 0, n)
	seen := make(map[netip.Addr]bool, n)
	for _, r := range cfg1.Rules {
		if !seen[r.VIP] {
			seen[r.VIP] = true
			allVIPs = append(allVIPs, r.VIP)
		}
	}
	if err := vips.SetVIPs(allVIPs); err != nil {
		return p, err
	}
	// Each timed Set moves 1 % of the VIPs, or moves them back.
	moved := make([]netip.Addr, n)
	for i := range moved {
		moved[i] = changed.VIP(i)
	}
	k := 0
	p.VIPMapSet, err = timed(cfg.Reps, func() error {
		k++
		if k%2 == 1 {
			return vips.SetVIPs(moved)
		}
		return vips.SetVIPs(allVIPs)
	})
	if err != nil {
		return p, err
	}
	if err := vips.SetVIPs(allVIPs); err != nil {
		return p, err
	}
	steps := appliance.NewReloadSteps(cfg1, vips, hc, cp, func() int64 { return 0 })
	i := 0
	p.Reload, err = timed(cfg.Reps, func() error {
		d := data2
		if i%2 == 1 {
			d = data
		}
		i++
		return steps.Reload(func() (*config.Config, error) { return config.Parse("gen.toml", d) })
	})
	if err != nil {
		return p, err
	}

	used := inUse()
	snap := cp.Snapshot()
	var entries, ntables uint64
	for _, s := range snap.Services {
		if s != nil && len(s.Table) > 0 {
			entries += uint64(len(s.Table))
			ntables++
		}
	}
	p.TableEntryBytes = tableEntryBytes
	p.TableEntriesMB = float64(entries*uint64(tableEntryBytes)) / (1 << 20)
	// What the tables take from the heap: a table of 65537 2-byte entries
	// is a large object, rounded up to whole 8 KiB pages.
	tables := ntables * tableAlloc(int(cfg.TableSize))
	p.TablesMB = float64(tables) / (1 << 20)
	p.HeapBeyondTablesMB = (float64(used) - float64(base) - float64(tables)) / (1 << 20)
	runtime.KeepAlive(cp)
	runtime.KeepAlive(vips)
	return p, nil
}

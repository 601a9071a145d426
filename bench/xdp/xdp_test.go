package xdp

import (
	"encoding/json"
	"math"
	"os"
	"reflect"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"xlb/bench/report"
	"xlb/bench/xdp/sink"
	"xlb/bench/xdp/topo"
	"xlb/config"
)

// testTopo is a topology description without namespaces (no root needed).
func testTopo(n int) *topo.Topo {
	t := &topo.Topo{Prefix: "lbx", GenNS: "lbx-gen", MidNS: "lbx-mid", GenDev: "lbxg", MidDev: "lbxm"}
	for i := range n {
		t.Backends = append(t.Backends, topo.Backend{Name: "b" + string(rune('1'+i)), IP: topo.BackendIP(i), MAC: topo.BackendMAC(i)})
	}
	return t
}

// TestXLBConfigValid: the configuration xlb runs with passes xlb's own
// validation, with the untracked and the tracked service on the VIP.
func TestXLBConfigValid(t *testing.T) {
	for _, cpu := range []int{-1, 1} {
		text := xlbConfig(testTopo(4), cpu)
		c, err := config.Parse("xlb.toml", []byte(text))
		if err != nil {
			t.Fatalf("cpu %d: %v\n%s", cpu, err, text)
		}
		if c.Dataplane.Interface != "lbxm" || len(c.Services) != 2 || len(c.Rules) != 2 {
			t.Fatalf("interface %q, %d services, %d rules", c.Dataplane.Interface, len(c.Services), len(c.Rules))
		}
		if want := map[bool][]int{true: {1}, false: nil}[cpu >= 0]; !reflect.DeepEqual(c.Dataplane.CPUs, want) {
			t.Errorf("cpus %v, want %v", c.Dataplane.CPUs, want)
		}
		for _, s := range c.Services {
			if n := len(s.Groups[0].Endpoints); n != 4 {
				t.Errorf("service %s: %d endpoints", s.Name, n)
			}
		}
	}
}

func TestConfigDefaults(t *testing.T) {
	c := Config{Quick: true}
	if err := c.defaults(); err != nil {
		t.Fatal(err)
	}
	if c.Duration != 300*time.Millisecond || c.Trial != 200*time.Millisecond || c.Trials != 5 || c.LossMax != 0.001 ||
		c.Resolution != 0.05 || c.Coalesce != DefaultCoalesce || !reflect.DeepEqual(c.Sizes, []int{64}) || len(c.Variants) != 5 ||
		c.Backends != 4 || c.Sources*c.Ports != 65536 || c.Prefix != "lbx" {
		t.Fatalf("quick defaults %+v", c)
	}
	f := Config{}
	if err := f.defaults(); err != nil {
		t.Fatal(err)
	}
	if f.Duration != 2*time.Second || f.Trial != 500*time.Millisecond || f.Trials != 10 || f.Resolution != 0.02 ||
		!reflect.DeepEqual(f.Sizes, []int{64, 1500}) {
		t.Fatalf("full defaults %+v", f)
	}
	for name, bad := range map[string]Config{
		"tiny frame":  {Sizes: []int{sink.MinFrame + 3}},
		"jumbo frame": {Sizes: []int{1519}},
		"forwarder":   {Variants: []string{"haproxy"}},
		"loss":        {LossMax: 0.6},
		"coalesce":    {Coalesce: 2 * time.Millisecond},
	} {
		if err := bad.defaults(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if even := (Config{Coalesce: -1}); even.defaults() != nil || even.Coalesce != 0 {
		t.Errorf("negative coalescing window: %v, want 0 (evenly spaced)", even.Coalesce)
	}
}

// model is a forwarder for searchRate: no loss up to capacity pps; above
// it, it forwards livelock x capacity (receive livelock). The first
// lossyChecks "lossless" runs and the first lossyTrials trials below the
// capacity lose checkLoss whatever the rate (the machine disturbed them).
type model struct {
	capacity, livelock       float64
	lossyChecks, lossyTrials int
	checkLoss                float64
	runs                     []string
}

func (m *model) run(load string, rate float64, d time.Duration) (Case, error) {
	m.runs = append(m.runs, load)
	c := Case{Load: load, RatePPS: rate, SentPPS: rate, FwdPPS: rate, Sent: uint64(rate * d.Seconds()), MiddleFaults: 2, WorkerFaults: 1}
	if rate > m.capacity {
		c.FwdPPS = m.livelock * m.capacity
	}
	if load == "lossless" && m.lossyChecks > 0 {
		m.lossyChecks--
		c.FwdPPS = (1 - m.checkLoss) * rate
	}
	if load == "trial" && rate <= m.capacity && m.lossyTrials > 0 {
		m.lossyTrials--
		c.FwdPPS = 0.995 * rate
	}
	c.Forwarded = uint64(c.FwdPPS * d.Seconds())
	c.Loss = 1 - c.FwdPPS/c.SentPPS
	return c, nil
}

// TestSearchRate: the lossless-rate search finds a model forwarder's
// capacity within its resolution and trials, from a full-load run that
// forwarded less than the capacity (livelock); says when the generator was
// the limit; lowers the result when the longer check loses; and reports a
// forwarder that always loses as lossy.
func TestSearchRate(t *testing.T) {
	cfg := Config{Quick: false}
	if err := cfg.defaults(); err != nil {
		t.Fatal(err)
	}
	full := func(m *model, gen float64) Case {
		c, _ := m.run("full", gen, time.Second)
		c.Load = "full"
		m.runs = nil
		return c
	}

	m := &model{capacity: 300e3, livelock: 0.6}
	c, err := searchRate(&cfg, full(m, 800e3), m.run, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.Load != "lossless" || c.RatePPS > m.capacity || c.RatePPS < m.capacity/(1+cfg.Resolution) || c.Loss != 0 || c.GenLimited {
		t.Errorf("capacity 300k: found %+v", c)
	}
	if n := len(c.Trials); n == 0 || n > cfg.Trials || len(m.runs) != n+1 || m.runs[n] != "lossless" {
		t.Errorf("capacity 300k: %d trials, runs %v", n, m.runs)
	}
	if len(c.Checks) != 1 || !c.Checks[0].Pass || c.Checks[0].RatePPS != c.RatePPS {
		t.Errorf("checks %+v", c.Checks)
	}
	// Page faults: those of every run of the search, trials and checks.
	if c.WorkerFaults != uint64(len(m.runs)) || c.MiddleFaults != 2*uint64(len(m.runs)) {
		t.Errorf("faults %d (worker %d) over %d runs, want 2 (1) a run", c.MiddleFaults, c.WorkerFaults, len(m.runs))
	}
	if !c.Trials[0].Pass || c.Trials[0].RatePPS != 0.6*m.capacity {
		t.Errorf("first trial %+v, want a pass at the full-load forwarded rate", c.Trials[0])
	}

	// Nothing lost at full speed: the generator is the limit; no trials.
	m = &model{capacity: 2e6, livelock: 1}
	if c, _ = searchRate(&cfg, full(m, 700e3), m.run, nil); !c.GenLimited || c.RatePPS != 700e3 || len(m.runs) != 0 || c.WorkerFaults != 0 {
		t.Errorf("generator-limited: %+v, runs %v", c, m.runs)
	}

	// Loss at full speed (say, a disturbance), none paced up to the
	// generator's rate: the generator is the limit.
	m = &model{capacity: 2e6, livelock: 1}
	f := full(m, 700e3)
	f.FwdPPS, f.Loss = 690e3, 0.014
	if c, _ = searchRate(&cfg, f, m.run, nil); !c.GenLimited || c.RatePPS != 700e3 || c.Loss != 0 {
		t.Errorf("no loss paced up to the generator: %+v", c)
	}

	// A check that loses much is run again 5 % lower; one that loses
	// little, again at the same rate.
	m = &model{capacity: 300e3, livelock: 0.6, lossyChecks: 1, checkLoss: 0.02}
	if c, _ = searchRate(&cfg, full(m, 800e3), m.run, nil); c.Loss != 0 || c.RatePPS > 0.95*m.capacity || c.RatePPS < 0.95*m.capacity/(1+cfg.Resolution) {
		t.Errorf("lossy first check: %+v, runs %v", c, m.runs)
	}
	m = &model{capacity: 300e3, livelock: 0.6, lossyChecks: 1, checkLoss: 0.005}
	if c, _ = searchRate(&cfg, full(m, 800e3), m.run, nil); c.Loss != 0 || c.RatePPS > m.capacity || c.RatePPS < m.capacity/(1+cfg.Resolution) ||
		!slices.Equal(m.runs[len(m.runs)-2:], []string{"lossless", "lossless"}) ||
		len(c.Checks) != 2 || c.Checks[0].Pass || !c.Checks[1].Pass || c.Checks[0].RatePPS != c.Checks[1].RatePPS {
		t.Errorf("slightly lossy first check: %+v, runs %v", c, m.runs)
	}

	// A trial below the capacity that loses a little is run again, and
	// the search still finds the capacity.
	m = &model{capacity: 300e3, livelock: 0.6, lossyTrials: 1}
	c, _ = searchRate(&cfg, full(m, 800e3), m.run, nil)
	if c.RatePPS > m.capacity || c.RatePPS < m.capacity/(1+cfg.Resolution) || c.Trials[0].Pass || !c.Trials[1].Pass || c.Trials[0].RatePPS != c.Trials[1].RatePPS {
		t.Errorf("disturbed trial: %+v", c)
	}

	// Always 1 % lost: every trial fails, the result says it lost.
	m = &model{capacity: 0, livelock: 0}
	lossy := func(load string, rate float64, d time.Duration) (Case, error) {
		m.runs = append(m.runs, load)
		return Case{Load: load, RatePPS: rate, SentPPS: rate, FwdPPS: 0.99 * rate, Sent: 1000, Forwarded: 990, Loss: 0.01}, nil
	}
	c, _ = searchRate(&cfg, Case{Load: "full", Sent: 1000, SentPPS: 500e3, FwdPPS: 495e3, Loss: 0.01}, lossy, nil)
	if c.Loss <= cfg.LossMax || len(c.Trials) != cfg.Trials || c.GenLimited || len(m.runs) != cfg.Trials+1 {
		t.Errorf("always lossy: %+v, runs %v", c, m.runs)
	}
}

func TestCPUReadings(t *testing.T) {
	a := readCPUTimes()
	if len(a.busy) == 0 || len(a.busy) != len(a.total) {
		t.Fatalf("/proc/stat: %d busy, %d total", len(a.busy), len(a.total))
	}
	// Spin until this thread has used spin of CPU by the kernel's own
	// per-thread clock, however long that takes on a loaded machine: the
	// readings must then show at least most of it.
	const spin = 100 * time.Millisecond
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	tid := unix.Gettid()
	start := threadCPU(t)
	for threadCPU(t)-start < spin {
	}
	b := readCPUTimes()
	for i, f := range busyFrac(a, b) {
		if f < 0 || f > 1 {
			t.Errorf("cpu %d busy %v", i, f)
		}
	}
	if d := pidCPU(tid); d < spin/2 {
		t.Errorf("this thread used %v by /proc, after spinning %v of CPU", d, spin)
	}
	if d := processCPU(os.Getpid()); d < spin/2 {
		t.Errorf("this process used %v by /proc, after a thread spun %v of CPU", d, spin)
	}
}

// threadCPU is the calling thread's CPU time (CLOCK_THREAD_CPUTIME_ID).
func threadCPU(t *testing.T) time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		t.Fatalf("clock_gettime: %v", err)
	}
	return time.Duration(ts.Nano())
}

// synthetic cases: lossless xlb at 0.85 Mpps and 1 Mpps per core, the
// reflector at 1 Mpps, nftlb at 0.5 Mpps and 0.4 per core, xdpfwd limited
// by the generator; latency runs (xlb from 30 µs, the floor from 12 µs,
// the busy floor from 20 µs); a floor for xlb and the reflector, none for
// nftlb.
func synthetic() []Case {
	mk := func(v string, size int, load string, pps, perCore float64, lat uint64) Case {
		c := Case{Variant: v, Size: size, Load: load, Sent: 1000, Forwarded: 990, Out: 990, SentPPS: pps, OutPPS: pps, FwdPPS: pps,
			PPSPerCore: perCore, PerBackend: []uint64{495, 495}}
		for i := range 100 {
			c.latency.Add(lat + uint64(i)*100)
		}
		c.LatP50, c.LatP99 = float64(c.latency.Quantile(0.5))/1e3, float64(c.latency.Quantile(0.99))/1e3
		return c
	}
	var cs []Case
	for _, size := range []int{64, 1500} {
		fl := func(load, v string, lat uint64) Case {
			c := mk("xdpfwd", size, load, 0.4e6, 1e6, lat)
			c.FloorFor = v
			return c
		}
		xf := mk("xdpfwd", size, "lossless", 1.5e6, 2e6, 0)
		xf.GenLimited = true
		cs = append(cs,
			mk("xlb", size, "full", 0.3e6, 0.3e6, 50000), mk("xlb", size, "lossless", 0.85e6, 1e6, 0),
			mk("reflector", size, "lossless", 1e6, 1.1e6, 0), mk("nftlb", size, "lossless", 0.5e6, 0.4e6, 0), xf,
			mk("xlb", size, "half", 0.4e6, 0, 30000), mk("reflector", size, "half", 0.5e6, 0, 25000),
			mk("nftlb", size, "half", 0.25e6, 0, 15000), mk("xdpfwd", size, "half", 0.75e6, 0, 11000),
			fl("floor", "xlb", 12000), fl("floor-busy", "xlb", 20000), fl("floor", "reflector", 12000))
	}
	return cs
}

// TestReportFromCases: added latencies come from the floor at the same rate
// (the xdpfwd's own run for itself, none where no floor ran); targets
// compare the right cases; the ratios table has a row per (size, xlb
// variant, baseline measured); charts have a line per forwarder; the JSON
// encodes (no NaN).
func TestReportFromCases(t *testing.T) {
	b := &bench{cfg: Config{}, genCPU: 0, midCPU: 1}
	if err := b.cfg.defaults(); err != nil {
		t.Fatal(err)
	}
	b.note("nftlb: skipped for the test")
	cs := synthetic()
	addFloors(cs)
	xlbHalf, xfHalf, nftHalf := find(cs, "xlb", 64, "half"), find(cs, "xdpfwd", 64, "half"), find(cs, "nftlb", 64, "half")
	floor, busy := cs[9], cs[10]
	if a := xlbHalf.Added; a == nil || a.P50 != xlbHalf.LatP50-floor.LatP50 || a.P99 != xlbHalf.LatP99-floor.LatP99 ||
		a.FloorP50 != floor.LatP50 || a.BusyFloorP50 != busy.LatP50 || a.P50 < 17 || a.P50 > 19 {
		t.Errorf("xlb added %+v (latency p50 %v, floor %v, busy floor %v)", xlbHalf.Added, xlbHalf.LatP50, floor.LatP50, busy.LatP50)
	}
	if a := xfHalf.Added; a == nil || a.P50 != 0 || a.P99 != 0 || a.FloorP50 != xfHalf.LatP50 {
		t.Errorf("xdpfwd added %+v, want 0 over itself", a)
	}
	if nftHalf.Added != nil {
		t.Errorf("nftlb added %+v without a floor run", nftHalf.Added)
	}

	r := b.report(cs)
	got := map[string]report.Target{}
	for _, tg := range r.Targets {
		got[tg.Name] = tg
		if math.IsNaN(tg.Measured) {
			t.Errorf("%s: NaN", tg.Name)
		}
	}
	checks := map[string]struct {
		v   float64
		met bool
	}{
		"xlb / (a) AF_XDP reflector, lossless pps, 64 B":                        {0.85, false},
		"xlb / (c) nftables DNAT, pps per busy core at the lossless rate, 64 B": {2.5, true},
		"xlb added latency p50 at half the lossless rate, 64 B":                 {xlbHalf.Added.P50, false},
		"xlb added latency p99 at half the lossless rate, 1500 B":               {xlbHalf.Added.P99, true},
	}
	for name, want := range checks {
		tg, ok := got[name]
		if !ok || math.Abs(tg.Measured-want.v) > 0.01*want.v || tg.Met != want.met {
			t.Errorf("target %q = %+v (present %v), want about %v, met %v", name, tg, ok, want.v, want.met)
		}
	}
	if len(r.Targets) != 6 {
		t.Errorf("%d targets, want 6 (2 throughput, 2 latency per size)", len(r.Targets))
	}
	for _, tg := range r.Targets {
		if strings.HasPrefix(tg.Name, "xlb-ct") {
			t.Errorf("target %q without xlb-ct cases", tg.Name)
		}
	}
	tables := map[string]*[][]string{}
	for i := range r.Tables {
		tables[strings.Fields(r.Tables[i].Title)[0]] = &r.Tables[i].Rows
	}
	ratios := tables["xlb"]
	if ratios == nil || len(*ratios) != 6 {
		t.Fatalf("ratio rows: %v", ratios)
	}
	if row := (*ratios)[1]; row[2] != "(b) xdpfwd (>=)" || row[3] != "0.57x" {
		t.Errorf("ratio row %v", row)
	}
	if row := (*ratios)[2]; row[2] != "(c) nftlb" || row[4] != "2.50x" {
		t.Errorf("ratio row %v", row)
	}
	if ll := tables["Maximum"]; ll == nil || len(*ll) != 8 || (*ll)[3][2] != ">=1.500" {
		t.Errorf("lossless rows %v", ll)
	}
	lat := tables["Latency"]
	if lat == nil || len(*lat) != 8 {
		t.Fatalf("latency rows %v", lat)
	}
	for _, row := range *lat {
		if row[1] == "nftlb" && row[10] != "-" {
			t.Errorf("nftlb shows an added latency without a floor: %v", row)
		}
	}
	if len(r.Charts) != 2 || len(r.Charts[0].Series) != 4 || len(r.Charts[0].Series[0].Y) != 199 {
		t.Fatalf("charts %+v", r.Charts)
	}
	if y := r.Charts[0].Series[0].Y; y[0] > y[len(y)-1] {
		t.Error("CDF samples not sorted")
	}
	if !strings.Contains(strings.Join(r.Notes, "\n"), "nftlb: skipped for the test") {
		t.Error("the run's own notes are missing")
	}
	if _, err := json.Marshal(r); err != nil {
		t.Fatalf("JSON: %v", err)
	}
}

// TestTrackedTargets: xlb-ct's lossless rate against xlb's (>= 0.9x) and
// the worker's page faults over both variants' cases but xlb's warm-up
// (WorkerFaults, <= FaultSlack), as targets; the faults not without
// xlb-ct's warm-up.
func TestTrackedTargets(t *testing.T) {
	b := &bench{cfg: Config{Sizes: []int{64}}, genCPU: 0, midCPU: 1}
	if err := b.cfg.defaults(); err != nil {
		t.Fatal(err)
	}
	mk := func(v, load string, pps float64, faults uint64) Case {
		return Case{Variant: v, Size: 64, Load: load, SentPPS: pps, WorkerFaults: faults}
	}
	for _, tc := range []struct {
		name          string
		ctPPS         float64
		ctWarm, xFull uint64 // the worker's faults in xlb-ct's warm-up and xlb's full-load case
		ratioMet      bool
		faults        uint64
		faultsMet     bool
	}{
		{"populated", 0.46e6, 1, 3, true, 1 + 3 + 2, true},
		// Unpopulated: the faults of xlb-ct's first inserts, some in the
		// next case, xlb's, while the stalled worker catches up.
		{"first-touch faults", 0.3e6, 98, 52, false, 98 + 52 + 2, false},
	} {
		cs := []Case{mk("xlb", "warm", 0.8e6, 9), mk("xlb-ct", "warm", 0.8e6, tc.ctWarm), mk("xlb", "full", 0.8e6, tc.xFull),
			mk("xlb", "lossless", 0.5e6, 0), mk("xlb-ct", "lossless", tc.ctPPS, 2), mk("reflector", "warm", 1e6, 40)}
		if n, ok := WorkerFaults(cs); !ok || n != tc.faults {
			t.Errorf("%s: WorkerFaults = %d, %v; want %d, true", tc.name, n, ok, tc.faults)
		}
		got := map[string]report.Target{}
		for _, tg := range b.targets(cs) {
			got[tg.Name] = tg
		}
		ratio, ok := got["xlb-ct / xlb, lossless pps, 64 B"]
		if !ok || math.Abs(ratio.Measured-tc.ctPPS/0.5e6) > 1e-9 || ratio.Met != tc.ratioMet {
			t.Errorf("%s: ratio target %+v (present %v)", tc.name, ratio, ok)
		}
		flt, ok := got["page faults of xlb's worker over the xlb and xlb-ct cases, its first frames excepted"]
		if !ok || flt.Measured != float64(tc.faults) || flt.Met != tc.faultsMet {
			t.Errorf("%s: faults target %+v (present %v)", tc.name, flt, ok)
		}
	}
	// xlb-ct alone: its warm-up counts (the worker's first frames with it).
	if n, ok := WorkerFaults([]Case{mk("xlb-ct", "warm", 1, 7), mk("xlb-ct", "full", 1, 1)}); !ok || n != 8 {
		t.Errorf("xlb-ct alone: WorkerFaults = %d, %v; want 8, true", n, ok)
	}
	// Without xlb-ct's warm-up, nothing is checked.
	if _, ok := WorkerFaults([]Case{mk("xlb", "warm", 1, 50), mk("xlb", "full", 1, 0)}); ok {
		t.Error("WorkerFaults checked without xlb-ct's warm-up")
	}
}

// TestFaultsBetween: the process's faults are summed over threads (a
// thread made meanwhile counts from zero), the busiest thread's are its own.
func TestFaultsBetween(t *testing.T) {
	a := map[string]threadStat{"1": {cpu: 10, faults: 100}, "2": {cpu: 5, faults: 7}}
	b := map[string]threadStat{"1": {cpu: 20, faults: 103}, "2": {cpu: 900, faults: 9}, "3": {cpu: 1, faults: 4}}
	if p, w := faultsBetween(a, b); p != 3+2+4 || w != 2 {
		t.Errorf("faultsBetween = %d, %d; want 9, 2", p, w)
	}
	// This process: reading /proc works and the counts only grow.
	s := threadStats(os.Getpid())
	if len(s) == 0 {
		t.Fatal("no threads read from /proc/self")
	}
	if p, _ := faultsBetween(s, threadStats(os.Getpid())); p > 1<<20 {
		t.Errorf("%d faults between two reads", p)
	}
}

// TestTaskSched: a thread that sleeps shows voluntary context switches in
// its threadStat; busiestBetween picks the thread that ran longest and
// gives its differences.
func TestTaskSched(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	dir := "/proc/self/task/" + strconv.Itoa(unix.Gettid())
	a := taskStat(dir)
	for range 5 {
		// A nanosleep(2) of this thread's own: it leaves the CPU.
		_ = unix.Nanosleep(&unix.Timespec{Nsec: int64(time.Millisecond)}, nil)
	}
	b := taskStat(dir)
	if d := b.sub(a); d.vol < 5 {
		t.Errorf("5 sleeps: %d voluntary switches (%+v -> %+v)", d.vol, a, b)
	}
	x := map[string]threadStat{"1": {cpu: 10, wait: 5, vol: 3}, "2": {cpu: 5}}
	y := map[string]threadStat{"1": {cpu: 20, wait: 7, vol: 9, nonvol: 2}, "2": {cpu: 900, wait: 40, vol: 1}, "3": {cpu: 30}}
	if tid, d := busiestBetween(x, y); tid != "2" || d.cpu != 895 || d.wait != 40 || d.vol != 1 {
		t.Errorf("busiest %s %+v, want 2 with 895 ns run, 40 wait, 1 switch", tid, d)
	}
}

// TestPinnedThread: the one thread allowed on a single CPU is found (as
// xlb's worker is, pinned by `cpus`).
func TestPinnedThread(t *testing.T) {
	if runtime.NumCPU() < 2 {
		t.Skip("one CPU: every thread is allowed on CPU 0 alone, there is no pinned thread to tell apart")
	}
	got := make(chan [2]int)
	done, unpinned := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(unpinned)
		runtime.LockOSThread() // never unlocked: should unpinning fail, the thread ends with the goroutine
		tid := unix.Gettid()
		var all unix.CPUSet
		if err := unix.SchedGetaffinity(0, &all); err != nil {
			got <- [2]int{tid, -1}
			return
		}
		// Unpinned before the goroutine ends: its thread may be the main
		// thread, which outlives it, or exit only later, and the next
		// run (-count) must not find it.
		defer func() { _ = unix.SchedSetaffinity(0, &all) }()
		if err := setAffinity(tid, 1); err != nil {
			got <- [2]int{tid, -1}
			return
		}
		got <- [2]int{tid, pinnedThread(os.Getpid(), 1)}
		<-done
	}()
	r := <-got
	close(done)
	<-unpinned
	if r[1] != r[0] {
		t.Errorf("pinnedThread = %d, want the pinned thread %d", r[1], r[0])
	}
}

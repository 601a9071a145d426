package control

import (
	"context"
	"slices"
	"sync"
	"time"

	"xlb/config"
	"xlb/controlplane"
	"xlb/controlplane/appliance"
	"xlb/healthcheck"
)

// measureHealth runs a checker over n targets (the backends of n/4
// generated services) whose probe records its start and passes at once,
// its results applied to a control plane of those services as the
// appliance applies them, for rounds intervals after every target has
// been probed once; then compares each probe's start with its due time.
func measureHealth(n int, interval time.Duration, rounds int) (*Health, error) {
	gen := Gen{VIPs: max(1, n/4), Backends: 4, TableSize: 1021, CheckIntervalSec: int(interval / time.Second)}
	cfg, err := config.Parse("gen.toml", gen.Config())
	if err != nil {
		return nil, err
	}
	cp, err := controlplane.New(cfg, nil, controlplane.Options{InitialWeight: 1}, 0)
	if err != nil {
		return nil, err
	}
	targets := appliance.HealthTargets(cfg)
	index := make(map[string]int, len(targets))
	type feed struct {
		service string
		t       healthcheck.Target
	}
	feeds := make([]feed, len(targets))
	for _, s := range cfg.Services {
		for _, g := range s.Groups {
			for _, ep := range g.Endpoints {
				key := cfg.HealthChecks[s.HealthCheck].Name + "/" + ep.IP.String()
				if _, ok := index[key]; !ok {
					index[key] = len(index)
				}
				feeds[index[key]].service = s.Name
			}
		}
	}
	for i, t := range targets {
		feeds[index[t.Key]].t = t
		_ = i
	}
	starts := make([][]time.Time, len(targets))
	probe := func(_ context.Context, t healthcheck.Target) bool {
		i := index[t.Key]
		starts[i] = append(starts[i], time.Now())
		return true
	}
	var applyErr error
	var mu sync.Mutex
	notify := func(rs []healthcheck.Result) {
		reports := make([]controlplane.Report, 0, len(rs))
		for _, r := range rs {
			f := feeds[index[r.Key]]
			reports = append(reports, controlplane.Report{Service: f.service, IP: f.t.Addr, HasHealth: true, Healthy: r.Healthy})
		}
		if err := cp.ApplyReports(reports, time.Now().UnixMilli()); err != nil {
			mu.Lock()
			applyErr = err
			mu.Unlock()
		}
	}
	hc := healthcheck.New(nil, healthcheck.Options{Probe: probe, Notify: notify})
	if err := hc.Set(targets); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	began, cpu0 := time.Now(), cpuTime()
	wg.Go(func() { _ = hc.Run(ctx) })
	run := interval*time.Duration(1+rounds) + interval/4
	time.Sleep(run)
	share := float64(cpuTime()-cpu0) / float64(time.Since(began))
	// A probe due in the last moments may still be on its way.
	end := time.Now().Add(-interval / 10)
	cancel()
	wg.Wait()
	if applyErr != nil {
		return nil, applyErr
	}

	h := &Health{Targets: len(targets), IntervalMs: ms(interval), CPUShare: share}
	var late []float64
	for _, ss := range starts {
		h.Probes += len(ss)
		if len(ss) == 0 {
			h.Missed += int(run / interval)
			continue
		}
		for k := 1; k < len(ss); k++ {
			due := ss[0].Add(time.Duration(k) * interval)
			late = append(late, ms(ss[k].Sub(due)))
		}
		// Every interval from the first probe on, up to the last one
		// that was due before the checker stopped, should have a probe.
		due := int(end.Sub(ss[0])/interval) + 1
		if due > len(ss) {
			h.Missed += due - len(ss)
		}
	}
	if len(late) > 0 {
		slices.Sort(late)
		h.LateP50Ms = late[len(late)/2]
		h.LateP99Ms = late[len(late)*99/100]
		h.LateMaxMs = late[len(late)-1]
	}
	return h, nil
}

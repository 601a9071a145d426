package healthcheck

import (
	"context"
	"hash/fnv"
	"net/netip"
	"sync"
	"time"

	"go.uber.org/zap"
)

// target is one Target and its loop.
type target struct {
	t      Target
	prober prober
	cancel context.CancelFunc // nil until started
	done   chan struct{}

	mu   sync.Mutex // h and last: the loop writes, Status reads
	h    health
	last Result
}

// stop ends the loop and waits for it.
func (t *target) stop() {
	if t.cancel != nil {
		t.cancel()
		<-t.done
	}
}

func (t *target) state() (health, Result) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.h, t.last
}

// firstDelay is how long a target waits before its first probe: a point of
// its interval fixed by its key, so targets configured together spread
// their probes over the interval (no thundering herd) and a restarted
// process probes each backend at the same phase as before.
func firstDelay(key string, interval time.Duration) time.Duration {
	if interval <= 0 {
		return 0
	}
	h := fnv.New64a()
	h.Write([]byte(key))
	return time.Duration(h.Sum64() % uint64(interval))
}

// loop probes t once per interval, after its staggered start, until ctx is
// done.
func (c *Checker) loop(ctx context.Context, t *target) {
	ck := t.t.Check
	timer := time.NewTimer(firstDelay(t.t.Key, ck.CheckInterval))
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return
	case <-timer.C:
	}
	tick := time.NewTicker(ck.CheckInterval)
	defer tick.Stop()
	for {
		r, ok := c.probeOnce(ctx, t)
		if !ok {
			return
		}
		select {
		case c.results <- r:
		case <-ctx.Done():
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// probeOnce waits for a slot of the semaphore, probes with the check's
// deadline, and records the outcome. It returns false when ctx ended first
// (a probe cut short by a stop is no verdict on the backend).
func (c *Checker) probeOnce(ctx context.Context, t *target) (Result, bool) {
	select {
	case c.sem <- struct{}{}:
	case <-ctx.Done():
		return Result{}, false
	}
	pctx, cancel := context.WithTimeout(ctx, t.t.Check.Timeout)
	start := time.Now()
	o := t.prober.probe(pctx)
	end := time.Now()
	cancel()
	<-c.sem
	if ctx.Err() != nil {
		return Result{}, false
	}

	t.mu.Lock()
	prev := t.h
	changed := t.h.record(o.pass, t.t.Check.HealthyThreshold, t.t.Check.UnhealthyThreshold)
	w, wChanged := t.h.report(o.weight, o.state)
	r := Result{
		Key: t.t.Key, Healthy: t.h.healthy, Changed: changed,
		Weight: w, WeightState: o.state, WeightChanged: wChanged,
		Pass: o.pass, Reason: o.reason, Latency: end.Sub(start), Time: end,
	}
	t.last = r
	cur := t.h
	t.mu.Unlock()
	c.logResult(t, r, prev, cur)
	return r, true
}

// logResult logs each change once: health (with the reason of the probe
// that made it, and the first verdict on a backend that never answered)
// and the kind of weight report.
func (c *Checker) logResult(t *target, r Result, prev, cur health) {
	ck := t.t.Check
	fields := func(extra ...zap.Field) []zap.Field {
		return append([]zap.Field{zap.String("target", t.t.Key),
			zap.Stringer("address", netip.AddrPortFrom(t.t.Addr, uint16(ck.Port))),
			zap.Stringer("check", ck.Type), zap.String("reason", r.Reason)}, extra...)
	}
	switch {
	case r.Changed && r.Healthy:
		c.log.Info("backend healthy", fields(zap.Int("consecutive_passes", cur.passes))...)
	case r.Changed:
		c.log.Info("backend unhealthy", fields(zap.Int("consecutive_failures", cur.failures))...)
	case prev.probes == 0 && !r.Pass:
		c.log.Info("backend unhealthy", fields(zap.Bool("never_answered", true))...)
	default:
		c.log.Debug("probe", fields(zap.Bool("pass", r.Pass), zap.Duration("latency", r.Latency))...)
	}
	if r.WeightState != WeightNone && (prev.probes == 0 || r.WeightState != prev.lastState) {
		c.log.Info("weight report", fields(zap.Stringer("state", r.WeightState), zap.Uint32("weight", r.Weight),
			zap.Stringer("previous", prev.lastState))...)
	} else if r.WeightChanged {
		c.log.Debug("weight changed", fields(zap.Uint32("weight", r.Weight), zap.Uint32("previous", prev.lastW))...)
	}
}

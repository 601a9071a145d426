package healthcheck

import (
	"container/heap"
	"context"
	"hash/fnv"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// target is one Target and its place in the schedule.
type target struct {
	t      Target
	prober prober

	// ctx ends the target's probes: its own cancel (stop) or Run's end.
	// stopped (under the schedule's lock) keeps the dispatcher from
	// handing out another probe once stop began; inflight counts the
	// probes handed out and not yet finished. Set while c.mu is held.
	ctx      context.Context
	cancel   context.CancelFunc // nil until started
	stopped  bool
	inflight sync.WaitGroup

	mu   sync.Mutex // h and last: the probes write, Status reads
	h    health
	last Result

	// unproven: the target is not known to answer (never probed, or its
	// last probe failed), so its next probe goes to the failing lane.
	// Written by the probe, read by the dispatcher.
	unproven atomic.Bool
}

func (t *target) state() (health, Result) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.h, t.last
}

// due is a target's next probe: at tick, a point of its schedule (its
// first probe, then one per interval).
type due struct {
	at time.Time
	t  *target
}

// schedule is a min-heap of due probes, earliest first; wake tells the
// dispatcher that an earlier one was added.
type schedule struct {
	mu   sync.Mutex
	h    dueHeap
	wake chan struct{}
}

type dueHeap []due

func (h dueHeap) Len() int           { return len(h) }
func (h dueHeap) Less(i, j int) bool { return h[i].at.Before(h[j].at) }
func (h dueHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *dueHeap) Push(x any)        { *h = append(*h, x.(due)) }
func (h *dueHeap) Pop() any {
	old := *h
	d := old[len(old)-1]
	old[len(old)-1] = due{}
	*h = old[:len(old)-1]
	return d
}

// add schedules d, waking the dispatcher if d is now the earliest.
func (s *schedule) add(d due) {
	s.mu.Lock()
	heap.Push(&s.h, d)
	first := s.h[0].t == d.t && s.h[0].at.Equal(d.at)
	s.mu.Unlock()
	if first {
		select {
		case s.wake <- struct{}{}:
		default:
		}
	}
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

// start schedules t's first probe, after its staggered delay, under Run's
// context; c.mu is held.
func (c *Checker) start(t *target) {
	t.ctx, t.cancel = context.WithCancel(c.ctx)
	c.sched.add(due{at: time.Now().Add(firstDelay(t.t.Key, t.t.Check.CheckInterval)), t: t})
}

// stop ends t's probes and waits for the one in flight, if any (it is cut
// short and reports nothing); c.mu is held.
func (c *Checker) stop(t *target) {
	if t.cancel == nil {
		return
	}
	c.sched.mu.Lock()
	t.stopped = true
	c.sched.mu.Unlock()
	t.cancel()
	t.inflight.Wait()
}

// lane is a queue of due probes and the workers that take them, first
// come first served. It never blocks the dispatcher: a lane whose workers
// are all busy holds its probes back (its worker count bounds its probes in
// flight) and a late probe starts as soon as one of its workers is free,
// while the other lane goes on. It holds at most one probe per target (the
// next is scheduled only once the last ended), so it is bounded by the
// number of targets.
type lane struct {
	mu     sync.Mutex
	cond   sync.Cond
	q      []due
	closed bool
}

func newLane() *lane {
	l := &lane{}
	l.cond.L = &l.mu
	return l
}

func (l *lane) put(d due) {
	l.mu.Lock()
	l.q = append(l.q, d)
	l.mu.Unlock()
	l.cond.Signal()
}

// take waits for the next probe; false once the lane is closed.
func (l *lane) take() (due, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for len(l.q) == 0 && !l.closed {
		l.cond.Wait()
	}
	if l.closed {
		return due{}, false
	}
	d := l.q[0]
	l.q[0] = due{}
	l.q = l.q[1:]
	return d, true
}

// close wakes every worker to return. Probes still queued (none once
// every target was stopped: the workers drain them) are released.
func (l *lane) close() {
	l.mu.Lock()
	l.closed = true
	left := l.q
	l.q = nil
	l.mu.Unlock()
	for _, d := range left {
		d.t.inflight.Done()
	}
	l.cond.Broadcast()
}

// dispatch hands each probe to its lane when it is due, until Run ends.
func (c *Checker) dispatch() {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		s := &c.sched
		s.mu.Lock()
		var d due
		wait := time.Hour
		ready := false
		for len(s.h) > 0 {
			if s.h[0].t.stopped {
				heap.Pop(&s.h)
				continue
			}
			if wait = time.Until(s.h[0].at); wait <= 0 {
				d = heap.Pop(&s.h).(due)
				d.t.inflight.Add(1)
				ready = true
			}
			break
		}
		s.mu.Unlock()
		if ready {
			if d.t.unproven.Load() {
				c.failing.put(d)
			} else {
				c.passing.put(d)
			}
			continue
		}
		timer.Reset(wait)
		select {
		case <-timer.C:
		case <-s.wake:
			if !timer.Stop() {
				select {
				case <-timer.C:
				default:
				}
			}
		case <-c.quit:
			return
		}
	}
}

// worker probes what its lane hands it, reports the result, and schedules
// the target's next probe, until Run ends.
func (c *Checker) worker(l *lane) {
	for {
		d, ok := l.take()
		if !ok {
			return
		}
		c.probeDue(d)
	}
}

// probeDue probes d's target unless it was stopped, hands the result on,
// and schedules the next probe at the next point of its schedule: like a
// ticker's, a point that passed during the probe makes the next one start
// at once, and any further ones are skipped.
func (c *Checker) probeDue(d due) {
	t := d.t
	defer t.inflight.Done()
	r, ok := c.probeOnce(t.ctx, t)
	if !ok {
		return
	}
	select {
	case c.results <- r:
	case <-t.ctx.Done():
		return
	}
	interval := t.t.Check.CheckInterval
	next := d.at.Add(interval)
	if now := time.Now(); !next.After(now) {
		// The latest point of the schedule that has passed.
		next = next.Add(now.Sub(next) / interval * interval)
	}
	c.sched.mu.Lock()
	stopped := t.stopped
	c.sched.mu.Unlock()
	if !stopped {
		c.sched.add(due{at: next, t: t})
	}
}

// probeOnce probes with the check's deadline and records the outcome. It
// returns false when ctx ended first (a probe cut short by a stop is no
// verdict on the backend).
func (c *Checker) probeOnce(ctx context.Context, t *target) (Result, bool) {
	if ctx.Err() != nil {
		return Result{}, false
	}
	pctx, cancel := context.WithTimeout(ctx, t.t.Check.Timeout)
	start := time.Now()
	o := t.prober.probe(pctx)
	end := time.Now()
	cancel()
	if ctx.Err() != nil {
		return Result{}, false
	}

	t.unproven.Store(!o.pass)
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
		// Checked first: most probes change nothing, and their fields
		// would be built for a level that is off.
		if ce := c.log.Check(zap.DebugLevel, "probe"); ce != nil {
			ce.Write(fields(zap.Bool("pass", r.Pass), zap.Duration("latency", r.Latency))...)
		}
	}
	if r.WeightState != WeightNone && (prev.probes == 0 || r.WeightState != prev.lastState) {
		c.log.Info("weight report", fields(zap.Stringer("state", r.WeightState), zap.Uint32("weight", r.Weight),
			zap.Stringer("previous", prev.lastState))...)
	} else if r.WeightChanged {
		if ce := c.log.Check(zap.DebugLevel, "weight changed"); ce != nil {
			ce.Write(fields(zap.Uint32("weight", r.Weight), zap.Uint32("previous", prev.lastW))...)
		}
	}
}

package healthcheck

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"sync"
	"time"

	"go.uber.org/zap"

	"xlb/config"
)

// Defaults of Options.
const (
	DefaultMaxConcurrent        = 64
	DefaultMaxConcurrentFailing = 64
	DefaultBatchDelay           = 100 * time.Millisecond
)

// Options configure a Checker.
type Options struct {
	// MaxConcurrent is the number of workers that probe targets whose
	// last probe passed, and so the most such probes in flight; 0 means
	// DefaultMaxConcurrent.
	MaxConcurrent int
	// MaxConcurrentFailing is the number of workers that probe targets
	// not known to answer: never probed, or whose last probe failed; 0
	// means DefaultMaxConcurrentFailing. Such a probe often lasts its
	// whole timeout (a backend that does not answer), so these probes
	// have workers of their own: hundreds of dead endpoints delay each
	// other (and the first probe of a new target), never the probes of
	// the backends that answer.
	MaxConcurrentFailing int
	// BatchDelay is how long a result may wait for others to join its
	// batch; 0 means DefaultBatchDelay.
	BatchDelay time.Duration
	// Notify receives every probe's result, in batches, from one goroutine
	// at a time; results of one target arrive in order. Nil: none.
	Notify func([]Result)
	// Probe, when set, stands in for the network probe of every target:
	// it is called where a probe would connect, with the probe's deadline
	// in ctx, and its answer is the verdict (no weight is reported). For
	// measuring the scheduling of many targets without a network
	// (`lbbench control`).
	Probe func(ctx context.Context, t Target) bool
}

// ErrRunning is returned by Run when the Checker already runs or ran.
var ErrRunning = errors.New("healthcheck: Run called twice")

// Checker probes a set of targets; see the package documentation.
type Checker struct {
	log     *zap.Logger
	opts    Options
	client  *http.Client
	results chan Result

	mu      sync.Mutex
	targets map[string]*target
	ctx     context.Context // Run's; nil before Run
	started bool

	// The schedule: every running target's next probe, earliest first,
	// read by one goroutine that hands due probes to the workers of one of
	// two lanes: passing (MaxConcurrent workers) for targets whose last
	// probe passed, failing (MaxConcurrentFailing) for those whose last
	// probe failed. A target costs a heap entry and no goroutine, so that
	// tens of thousands keep their interval.
	sched            schedule
	passing, failing *lane
	quit             chan struct{} // closed when Run has stopped every target
}

// New returns a Checker with no targets; Set gives it some, Run runs it.
func New(log *zap.Logger, opts Options) *Checker {
	if log == nil {
		log = zap.NewNop()
	}
	if opts.MaxConcurrent <= 0 {
		opts.MaxConcurrent = DefaultMaxConcurrent
	}
	if opts.MaxConcurrentFailing <= 0 {
		opts.MaxConcurrentFailing = DefaultMaxConcurrentFailing
	}
	if opts.BatchDelay <= 0 {
		opts.BatchDelay = DefaultBatchDelay
	}
	return &Checker{
		log:     log,
		opts:    opts,
		client:  newHTTPClient(),
		results: make(chan Result, 256),
		targets: map[string]*target{},
		sched:   schedule{wake: make(chan struct{}, 1)},
		passing: newLane(),
		failing: newLane(),
		quit:    make(chan struct{}),
	}
}

// Set makes targets the set probed, as one step: a target whose key, address
// and check are unchanged keeps running with its state (a reload does not
// flap it); one whose check changed restarts with the new check but keeps
// its state; one whose address changed, and a new one, start unhealthy;
// one not in targets stops. An invalid target (duplicate key, no address,
// bad port, interval or path) makes Set change nothing and return an error.
func (c *Checker) Set(targets []Target) error {
	next := make(map[string]Target, len(targets))
	for _, t := range targets {
		if err := valid(t); err != nil {
			return fmt.Errorf("healthcheck: target %q: %w", t.Key, err)
		}
		if _, dup := next[t.Key]; dup {
			return fmt.Errorf("healthcheck: target %q given twice", t.Key)
		}
		next[t.Key] = t
	}

	c.mu.Lock()
	defer c.mu.Unlock()
	// Probers only for the targets that are new or changed: a reload keeps
	// most of them as they are.
	type change struct {
		t Target
		p prober
	}
	var changes []change
	present := 0 // targets with a key c.targets has
	for _, t := range targets {
		old, ok := c.targets[t.Key]
		if ok {
			present++
			if old.t == t {
				continue
			}
		}
		p, err := c.newProber(t)
		if err != nil {
			return fmt.Errorf("healthcheck: target %q: %w", t.Key, err)
		}
		changes = append(changes, change{t, p})
	}
	if present < len(c.targets) {
		for key, old := range c.targets {
			if _, ok := next[key]; !ok {
				c.stop(old)
				delete(c.targets, key)
			}
		}
	}
	for _, ch := range changes {
		t := ch.t
		old, ok := c.targets[t.Key]
		nt := &target{t: t, prober: ch.p}
		nt.unproven.Store(true)
		if ok {
			c.stop(old)
			if old.t.Addr == t.Addr {
				nt.h, nt.last = old.state()
				nt.unproven.Store(old.unproven.Load())
			}
		}
		c.targets[t.Key] = nt
		if c.ctx != nil && c.ctx.Err() == nil {
			c.start(nt)
		}
	}
	return nil
}

// valid checks what would make a loop misbehave; a validated config never
// fails it.
func valid(t Target) error {
	ck := t.Check
	switch {
	case !t.Addr.IsValid():
		return errors.New("no address")
	case ck.Port < 1 || ck.Port > 65535:
		return fmt.Errorf("port %d outside 1..65535", ck.Port)
	case ck.CheckInterval <= 0:
		return fmt.Errorf("check interval %v is not positive", ck.CheckInterval)
	case ck.Timeout <= 0:
		return fmt.Errorf("timeout %v is not positive", ck.Timeout)
	case ck.Type != config.CheckHTTP && ck.Type != config.CheckTCP:
		return fmt.Errorf("unknown check type %d", ck.Type)
	}
	return nil
}

// Run probes the targets (those of Set, now and later) until ctx is done,
// then stops every probe and returns once nothing of the Checker runs. It
// returns ErrRunning if called again.
func (c *Checker) Run(ctx context.Context) error {
	c.mu.Lock()
	if c.started {
		c.mu.Unlock()
		return ErrRunning
	}
	c.started, c.ctx = true, ctx
	if ctx.Err() == nil {
		for _, t := range c.targets {
			c.start(t)
		}
	}
	c.mu.Unlock()

	var wg sync.WaitGroup
	wg.Go(func() { c.notifyLoop(ctx) })
	wg.Go(c.dispatch)
	for range c.opts.MaxConcurrent {
		wg.Go(func() { c.worker(c.passing) })
	}
	for range c.opts.MaxConcurrentFailing {
		wg.Go(func() { c.worker(c.failing) })
	}
	<-ctx.Done()

	c.mu.Lock()
	for _, t := range c.targets {
		c.stop(t)
	}
	c.mu.Unlock()
	close(c.quit)
	c.passing.close()
	c.failing.close()
	wg.Wait()
	c.client.CloseIdleConnections()
	return nil
}

// Status returns every target's state, sorted by key.
func (c *Checker) Status() []Status {
	c.mu.Lock()
	ts := make([]*target, 0, len(c.targets))
	for _, t := range c.targets {
		ts = append(ts, t)
	}
	c.mu.Unlock()
	out := make([]Status, len(ts))
	for i, t := range ts {
		h, last := t.state()
		out[i] = Status{Target: t.t, Healthy: h.healthy, Probes: h.probes, Last: last}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out
}

// notifyLoop hands results to Notify in batches: a batch opens with its
// first result and closes BatchDelay later, so the results of probes that
// end close together (a round of staggered probes of one interval, or a
// burst after a network blip) arrive as one. Notify runs on a goroutine of
// its own, one batch at a time: results keep being taken while it works
// (a control plane of many services takes a while over a batch), so that
// probes never wait for it; what arrives meanwhile makes the next batch.
func (c *Checker) notifyLoop(ctx context.Context) {
	var (
		batch []Result
		timer *time.Timer
		fire  <-chan time.Time
		// busy: Notify has a batch; closed: the batch timer fired
		// meanwhile, so the next batch goes as soon as Notify returns.
		busy, closed bool
		handoff      = make(chan []Result)
		done         = make(chan struct{}, 1)
		nwg          sync.WaitGroup
	)
	nwg.Go(func() {
		for b := range handoff {
			c.opts.Notify(b)
			done <- struct{}{}
		}
	})
	defer func() {
		if timer != nil {
			timer.Stop()
		}
		close(handoff)
		nwg.Wait()
	}()
	send := func() {
		busy, closed = true, false
		handoff <- batch
		batch = nil
	}
	for {
		select {
		case <-ctx.Done():
			return
		case r := <-c.results:
			if c.opts.Notify == nil {
				continue
			}
			batch = append(batch, r)
			if fire == nil && !closed {
				if timer == nil {
					timer = time.NewTimer(c.opts.BatchDelay)
				} else {
					timer.Reset(c.opts.BatchDelay)
				}
				fire = timer.C
			}
		case <-fire:
			fire = nil
			if busy {
				closed = true
			} else {
				send()
			}
		case <-done:
			busy = false
			if closed {
				send()
			}
		}
	}
}

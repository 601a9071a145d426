package main

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"xlb/controlplane/admin"
	"xlb/controlplane/appliance"
	"xlb/dataplane/worker"
	"xlb/internal/sdnotify"
)

// statusEvery is how often the service manager's status line is brought
// up to date (sent only when it changed).
const statusEvery = 5 * time.Second

// serviceSource is what the service manager is told about: the running
// appliance.
type serviceSource interface {
	Ready() <-chan struct{}
	HealthChecked() <-chan struct{}
	Status() *admin.Report
	WorkerRounds() []appliance.WorkerRounds
}

// service tells systemd (Type=notify) how `xlb run` is doing: READY=1
// once the program is attached, every worker runs and the first health
// round is done (before that, clients would meet backends without a
// verdict); STATUS= the one-line summary of what `xlb status` shows;
// RELOADING=1 and READY=1 around a reload; STOPPING=1 on a signal; and,
// with WatchdogSec=, WATCHDOG=1 at half the interval while every worker's
// loop goes round. A worker stuck in its loop stops the keepalive, so
// systemd kills and restarts the process (the kernel drops its XDP
// program with it). Without $NOTIFY_SOCKET none of this runs.
type service struct {
	n   *sdnotify.Notifier
	src serviceSource
	log *zap.Logger
	// statusTick refreshes STATUS=; watchdogTick checks the workers and
	// pings (nil: no watchdog). Tests drive them by hand.
	statusTick, watchdogTick <-chan time.Time

	mu         sync.Mutex
	ready      bool   // READY=1 sent
	lastStatus string // last STATUS= sent
}

// newService is the service for src when $NOTIFY_SOCKET is set, with the
// watchdog when $WATCHDOG_USEC is; nil (nothing to tell) otherwise. The
// returned stop ends its tickers.
func newService(src serviceSource, log *zap.Logger) (svc *service, stop func(), err error) {
	n, err := sdnotify.FromEnv()
	if err != nil || n == nil {
		return nil, func() {}, err
	}
	svc = &service{n: n, src: src, log: log.Named("systemd")}
	status := time.NewTicker(statusEvery)
	svc.statusTick = status.C
	stops := []func(){status.Stop, func() { _ = n.Close() }}
	wd, werr := sdnotify.WatchdogInterval()
	switch {
	case werr == nil:
		if wd/2 <= 2*worker.MaxIdleWait {
			// An idle worker goes round once per sleep, at most
			// MaxIdleWait long: a shorter check could find it still.
			log.Warn("WatchdogSec is short: a worker may sleep up to 1s between rounds; use 5s or more",
				zap.Duration("watchdog", wd))
		}
		t := time.NewTicker(wd / 2)
		svc.watchdogTick = t.C
		stops = append(stops, t.Stop)
		svc.log.Info("watchdog on: keepalive while every worker goes round", zap.Duration("interval", wd))
	case !errors.Is(werr, sdnotify.ErrNoWatchdog):
		svc.log.Warn("watchdog off", zap.Error(werr))
	}
	return svc, func() {
		for _, s := range stops {
			s()
		}
	}, nil
}

// run tells the manager about startup, then keeps the status line and
// the watchdog going until ctx ends (the signal to stop), when it sends
// STOPPING=1.
func (s *service) run(ctx context.Context) {
	defer func() { s.send(sdnotify.Stopping, sdnotify.Status("stopping")) }()
	s.send(sdnotify.Status("starting: attaching, then the first health round"))
	select {
	case <-s.src.Ready():
	case <-ctx.Done():
		return
	}
	s.send(sdnotify.Status("attached; waiting for the first health round"))
	select {
	case <-s.src.HealthChecked():
	case <-ctx.Done():
		return
	}
	live := liveness{last: s.src.WorkerRounds()} // the watchdog counts from here
	s.mu.Lock()
	s.ready = true
	s.mu.Unlock()
	s.sendStatus(true, sdnotify.Ready)
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.statusTick:
			s.sendStatus(false)
		case <-s.watchdogTick:
			if stuck := live.check(s.src.WorkerRounds()); len(stuck) == 0 {
				if live.stuck {
					s.log.Info("every worker goes round again: watchdog keepalive resumed")
				}
				live.stuck = false
				s.send(sdnotify.Watchdog)
			} else if !live.stuck {
				live.stuck = true
				s.log.Error("a worker made no round since the last check: watchdog keepalive withheld (systemd restarts xlb when it expires)",
					zap.Ints("queues", stuck))
			}
		}
	}
}

// reloading and reloaded bracket a reload (SIGHUP, `xlb reload`): the
// manager shows the unit reloading until READY=1 comes again. Before the
// first READY=1 they say nothing.
func (s *service) reloading() {
	if s == nil || !s.isReady() {
		return
	}
	s.send(sdnotify.ReloadingNow()...)
}

func (s *service) reloaded() {
	if s == nil || !s.isReady() {
		return
	}
	s.sendStatus(true, sdnotify.Ready)
}

func (s *service) isReady() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ready
}

// sendStatus sends STATUS= with the summary of the appliance's state,
// with extra states before it; without them only when it changed
// (unless force).
func (s *service) sendStatus(force bool, extra ...string) {
	line := "forwarding: " + admin.Summary(s.src.Status())
	s.mu.Lock()
	changed := line != s.lastStatus
	s.lastStatus = line
	s.mu.Unlock()
	if changed || force || len(extra) > 0 {
		s.send(append(extra, sdnotify.Status(line))...)
	}
}

func (s *service) send(states ...string) {
	if err := s.n.Send(states...); err != nil {
		s.log.Warn("telling systemd", zap.String("states", strings.Join(states, " ")), zap.Error(err))
	}
}

// liveness compares the workers' rounds between two checks: a worker
// whose count did not move is stuck. The checks must be further apart
// than a worker's longest idle sleep (worker.MaxIdleWait).
type liveness struct {
	last  []appliance.WorkerRounds
	stuck bool // the previous check found a stuck worker (logged once)
}

// check returns the queues of the workers that made no round since the
// previous check, and keeps now for the next.
func (l *liveness) check(now []appliance.WorkerRounds) []int {
	var stuck []int
	if len(now) != len(l.last) {
		// Not the same workers (not running yet or any more): nothing to
		// compare, and nothing to vouch for.
		stuck = []int{-1}
	} else {
		for i, w := range now {
			if w.Rounds == l.last[i].Rounds {
				stuck = append(stuck, w.Queue)
			}
		}
	}
	l.last = now
	return stuck
}

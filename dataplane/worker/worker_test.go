package worker

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"xlb/dataplane"
)

// start runs w in a goroutine; the returned func cancels it and returns
// Run's error, failing the test if Run does not return within limit.
func start(t *testing.T, w *Worker, limit time.Duration) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	stopped := false
	var err error
	stop = func() error {
		t.Helper()
		if stopped {
			return err
		}
		stopped = true
		cancel()
		select {
		case err = <-done:
			return err
		case <-time.After(limit):
			t.Fatalf("Run did not return within %v of cancel", limit)
			return nil
		}
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}

// TestRun_FramesFlow: frames go from the port through the engine and back,
// forwarded to a configured backend MAC, and every counter agrees.
func TestRun_FramesFlow(t *testing.T) {
	const total = 1000
	port := newFakePort(udpFrames(t, 37), DefaultBatch, total)
	var badMAC int
	backends := [][]byte{{2, 0, 0, 0, 0, 1}, {2, 0, 0, 0, 0, 2}}
	port.mem.OnComplete = func(f *dataplane.Frame) {
		dst := f.Data()[:6]
		if !bytes.Equal(dst, backends[0]) && !bytes.Equal(dst, backends[1]) {
			badMAC++
		}
	}
	// The MemFramePort's hook runs inside Complete: wrap it so it is called.
	w, err := New(testEngine(t), hookPort{port}, newFakePoller(), Config{CPU: -1})
	if err != nil {
		t.Fatal(err)
	}
	stop := start(t, w, time.Second)
	eventually(t, 5*time.Second, "all frames decided", func() bool { return port.forwarded.Load()+port.passed.Load()+port.dropped.Load() == total })
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if f, p, d := port.forwarded.Load(), port.passed.Load(), port.dropped.Load(); f != total {
		t.Errorf("forwarded %d, passed %d, dropped %d; want all %d forwarded", f, p, d, total)
	}
	if badMAC != 0 {
		t.Errorf("%d forwarded frames without a backend's MAC as destination", badMAC)
	}
	if got := w.Stats().Forward.Load(); got != total {
		t.Errorf("engine stats: %d forwarded, want %d", got, total)
	}
	c := w.Counters()
	if c.Frames != total {
		t.Errorf("counters: %d frames, want %d", c.Frames, total)
	}
	if c.Batches < total/DefaultBatch || c.Batches > total {
		t.Errorf("counters: %d batches for %d frames of at most %d", c.Batches, total, DefaultBatch)
	}
}

// hookPort completes into both the fake's counters and the MemFramePort
// (whose OnComplete checks frames).
type hookPort struct{ *fakePort }

func (hp hookPort) Complete(frames []dataplane.Frame) {
	hp.fakePort.Complete(frames)
	hp.mem.Complete(frames)
}

// TestRun_IdleBacksOff: a quiet queue first spins (Poll(0): no sleep,
// a syscall only if the kernel asks), then after Spin sleeps in Poll with
// IdleWait and stays asleep (no more spinning) — an idle appliance does not
// burn a core. Traffic wakes it; the next quiet spell spins again first.
func TestRun_IdleBacksOff(t *testing.T) {
	const (
		spin = 2 * time.Millisecond
		wait = 5 * time.Millisecond
	)
	port := newFakePort(udpFrames(t, 4), DefaultBatch, 0)
	p := newFakePoller()
	p.sleep = true
	w, err := New(testEngine(t), port, p, Config{CPU: -1, Spin: spin, IdleWait: wait})
	if err != nil {
		t.Fatal(err)
	}
	start(t, w, time.Second)
	eventually(t, 5*time.Second, "a sleeping poll", func() bool { _, ts, _, _ := p.snapshot(); return len(ts) > 0 })
	zero1, ts1, _, _ := p.snapshot()
	if zero1 == 0 {
		t.Errorf("slept at once; want Poll(0) spinning for %v first", spin)
	}
	for _, d := range ts1 {
		if d != wait {
			t.Errorf("Poll(%v), want Poll(%v)", d, wait)
		}
	}
	const watch = 100 * time.Millisecond
	time.Sleep(watch)
	zero2, ts2, _, _ := p.snapshot()
	if zero2 != zero1 {
		t.Errorf("%d more Poll(0) calls while asleep; an idle worker must keep sleeping", zero2-zero1)
	}
	if n := len(ts2) - len(ts1); n == 0 || n > int(watch/wait)+2 {
		t.Errorf("%d sleeping polls in %v of %v each; want 1..%d", n, watch, wait, int(watch/wait)+2)
	}
	if got := w.Counters().Sleeps; got < uint64(len(ts2)) {
		t.Errorf("counters: %d sleeps, poller saw %d", got, len(ts2))
	}

	port.left.Store(10)
	eventually(t, 5*time.Second, "frames after the sleep", func() bool { return port.forwarded.Load() == 10 })
	eventually(t, 5*time.Second, "spinning again", func() bool { z, _, _, _ := p.snapshot(); return z > zero2 })
}

// TestRun_StopsOnCancel: Run returns nil soon after cancel, whether it is
// busy with frames or asleep in Poll.
func TestRun_StopsOnCancel(t *testing.T) {
	for _, tc := range []struct {
		name   string
		budget int64
	}{{"busy", 1 << 62}, {"asleep", 0}} {
		t.Run(tc.name, func(t *testing.T) {
			port := newFakePort(udpFrames(t, 8), DefaultBatch, tc.budget)
			p := newFakePoller()
			p.sleep = true
			const wait = 50 * time.Millisecond
			w, err := New(testEngine(t), port, p, Config{CPU: -1, Spin: time.Microsecond, IdleWait: wait})
			if err != nil {
				t.Fatal(err)
			}
			stop := start(t, w, wait+time.Second)
			if tc.budget > 0 {
				eventually(t, 5*time.Second, "frames", func() bool { return port.forwarded.Load() > 1000 })
			} else {
				eventually(t, 5*time.Second, "a sleep", func() bool { _, ts, _, _ := p.snapshot(); return len(ts) > 0 })
			}
			if err := stop(); err != nil {
				t.Fatalf("Run: %v, want nil on cancel", err)
			}
		})
	}
}

// TestRun_LocksAndPinsThread: every poll of a worker comes from one OS
// thread, and with CPU set that thread may run on that CPU only.
func TestRun_LocksAndPinsThread(t *testing.T) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		t.Fatal(err)
	}
	cpu := -1
	for c := range 1024 {
		if set.IsSet(c) {
			cpu = c // the last allowed CPU
		}
	}
	for _, tc := range []struct {
		name string
		cpu  int
	}{{"unpinned", -1}, {"pinned", cpu}} {
		t.Run(tc.name, func(t *testing.T) {
			p := newFakePoller()
			w, err := New(testEngine(t), newFakePort(nil, DefaultBatch, 0), p, Config{CPU: tc.cpu, Spin: time.Microsecond, IdleWait: time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			stop := start(t, w, time.Second)
			eventually(t, 5*time.Second, "polls", func() bool { z, ts, _, _ := p.snapshot(); return z+len(ts) > 20 })
			if err := stop(); err != nil {
				t.Fatal(err)
			}
			_, _, tids, cpus := p.snapshot()
			if len(tids) != 1 {
				t.Errorf("polled from %d threads, want 1 (LockOSThread)", len(tids))
			}
			if tc.cpu >= 0 && (len(cpus) != 1 || !cpus[tc.cpu]) {
				t.Errorf("ran on CPUs %v, want only %d", cpus, tc.cpu)
			}
			if tc.cpu < 0 && len(cpus) != set.Count() {
				t.Errorf("unpinned worker ran with %d CPUs allowed, the process has %d", len(cpus), set.Count())
			}
		})
	}
}

// TestRun_Errors: a failing poller or an impossible CPU stops Run with an
// error naming the queue.
func TestRun_Errors(t *testing.T) {
	boom := errors.New("boom")
	p := newFakePoller()
	p.err = boom
	w, err := New(testEngine(t), newFakePort(nil, DefaultBatch, 0), p, Config{Queue: 3, CPU: -1})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Run(context.Background()); !errors.Is(err, boom) || !bytes.Contains([]byte(err.Error()), []byte("queue 3")) {
		t.Errorf("Run with a failing poller: %v, want boom naming queue 3", err)
	}

	w, err = New(testEngine(t), newFakePort(nil, DefaultBatch, 0), newFakePoller(), Config{Queue: 1, CPU: 1023})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Run(context.Background()); err == nil || !bytes.Contains([]byte(err.Error()), []byte("CPU 1023")) {
		t.Errorf("Run pinned to CPU 1023: %v, want an error naming the CPU", err)
	}
}

func TestNew_Validates(t *testing.T) {
	eng := testEngine(t)
	port, p := newFakePort(nil, 1, 0), newFakePoller()
	for _, tc := range []struct {
		name string
		cfg  Config
		port dataplane.FramePort
	}{
		{"negative batch", Config{Batch: -1}, port},
		{"huge batch", Config{Batch: 1 << 20}, port},
		{"negative spin", Config{Spin: -1}, port},
		{"idle wait too long", Config{IdleWait: 2 * MaxIdleWait}, port},
		{"negative queue", Config{Queue: -1}, port},
		{"no port", Config{}, nil},
	} {
		if _, err := New(eng, tc.port, p, tc.cfg); !errors.Is(err, ErrConfig) {
			t.Errorf("%s: %v, want ErrConfig", tc.name, err)
		}
	}
	w, err := New(eng, port, p, Config{Queue: 2, CPU: -1})
	if err != nil {
		t.Fatal(err)
	}
	if w.cfg.Batch != DefaultBatch || w.cfg.Spin != DefaultSpin || w.cfg.IdleWait != DefaultIdleWait || w.Queue() != 2 || w.CPU() != -1 {
		t.Errorf("defaults not applied: %+v", w.cfg)
	}
}

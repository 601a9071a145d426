package worker

import (
	"testing"
	"time"
)

// TestRounds_Heartbeat: Rounds, the watchdog's heartbeat, advances while
// the worker forwards and while it idles asleep in Poll (each sleep is a
// round), and stops while the worker is stuck inside a round.
func TestRounds_Heartbeat(t *testing.T) {
	port := newFakePort(udpFrames(t, 4), DefaultBatch, 100)
	p := newFakePoller()
	p.sleep = true
	stuck := make(chan struct{})
	w, err := New(testEngine(t), port, p, Config{CPU: -1, Spin: time.Microsecond, IdleWait: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	stop := start(t, w, 5*time.Second)
	defer func() {
		close(stuck)
		if err := stop(); err != nil {
			t.Error(err)
		}
	}()
	eventually(t, 5*time.Second, "the frames", func() bool { return port.forwarded.Load() == 100 })
	if c := w.Counters(); w.Rounds() < c.Batches {
		t.Errorf("rounds %d < batches %d", w.Rounds(), c.Batches)
	}
	// Idle: every sleep in Poll is a round.
	r0 := w.Rounds()
	eventually(t, 5*time.Second, "rounds while idle", func() bool { return w.Counters().Sleeps > 3 && w.Rounds() > r0+3 })

	// Stuck: the next sleeping Poll never returns.
	p.mu.Lock()
	p.stuck = stuck
	n := len(p.timeouts)
	p.mu.Unlock()
	eventually(t, 5*time.Second, "the worker in the stuck poll", func() bool {
		_, ts, _, _ := p.snapshot()
		return len(ts) > n // a sleeping call that began after the switch: it hangs
	})
	r1 := w.Rounds()
	// However long the test waits, a stuck worker's count stays; a short
	// wait shows it (a moving count would move many times in 20 sleeps).
	time.Sleep(20 * time.Millisecond)
	if r2 := w.Rounds(); r2 != r1 {
		t.Errorf("rounds moved from %d to %d while the worker was stuck in Poll", r1, r2)
	}
}

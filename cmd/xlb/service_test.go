package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"xlb/controlplane/admin"
	"xlb/controlplane/appliance"
	"xlb/internal/sdnotify"
)

// fakeNotifySocket is what systemd listens on for NOTIFY_SOCKET: an
// abstract unixgram socket private to the test.
type fakeNotifySocket struct {
	conn *net.UnixConn
	name string
}

var notifySeq atomic.Int64

func newFakeNotifySocket(t *testing.T) *fakeNotifySocket {
	t.Helper()
	name := fmt.Sprintf("@xlb-test-notify-%d-%d", os.Getpid(), notifySeq.Add(1))
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: name, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &fakeNotifySocket{conn: conn, name: name}
}

// next is the next datagram (10 s at most: only a hang makes it wait).
func (f *fakeNotifySocket) next(t *testing.T) string {
	t.Helper()
	buf := make([]byte, 4096)
	_ = f.conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	n, err := f.conn.Read(buf)
	if err != nil {
		t.Fatalf("no notification: %v", err)
	}
	return string(buf[:n])
}

// none fails when a datagram is already queued: called when the sender
// is known to be blocked, anything it sent before is in the socket.
func (f *fakeNotifySocket) none(t *testing.T, when string) {
	t.Helper()
	buf := make([]byte, 4096)
	_ = f.conn.SetReadDeadline(time.Now())
	if n, err := f.conn.Read(buf); err == nil {
		t.Fatalf("%s: got %q, want nothing yet", when, buf[:n])
	}
}

// fakeApp is the appliance as the service integration sees it; the test
// sets its state and the workers' rounds.
type fakeApp struct {
	ready, checked chan struct{}
	waiting        chan string // "ready", "checked": the service asked for it
	mu             sync.Mutex
	healthy        int
	rounds         []appliance.WorkerRounds
}

func newFakeApp() *fakeApp {
	return &fakeApp{ready: make(chan struct{}), checked: make(chan struct{}), waiting: make(chan string, 4),
		rounds: []appliance.WorkerRounds{{Queue: 0}, {Queue: 1}}}
}

func (f *fakeApp) Ready() <-chan struct{} { f.waiting <- "ready"; return f.ready }
func (f *fakeApp) HealthChecked() <-chan struct{} {
	f.waiting <- "checked"
	return f.checked
}
func (f *fakeApp) Status() *admin.Report {
	f.mu.Lock()
	defer f.mu.Unlock()
	bs := []admin.BackendReport{{Name: "b1", Healthy: f.healthy > 0}, {Name: "b2", Healthy: f.healthy > 1}}
	return &admin.Report{Services: []admin.ServiceReport{{Name: "web", Side: "primary", Backends: bs}}}
}
func (f *fakeApp) WorkerRounds() []appliance.WorkerRounds {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]appliance.WorkerRounds(nil), f.rounds...)
}

// advance makes the workers in queues go round once.
func (f *fakeApp) advance(queues ...int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, q := range queues {
		f.rounds[q].Rounds++
	}
}

// TestService_NotifyProtocol drives the systemd integration of `xlb run`
// against a fake NOTIFY_SOCKET, with the appliance, the status and the
// watchdog ticks in the test's hands: READY=1 only once the appliance is
// Ready and its first health round is done; STATUS= carries the summary
// and is sent again only when it changes; WATCHDOG=1 at each tick while
// every worker went round, none while one is stuck (logged once, naming
// its queue), and again once it moves; a reload is bracketed by
// RELOADING=1 and READY=1; the end is STOPPING=1.
func TestService_NotifyProtocol(t *testing.T) {
	sock := newFakeNotifySocket(t)
	t.Setenv("NOTIFY_SOCKET", sock.name)
	n, err := sdnotify.FromEnv()
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	app := newFakeApp()
	statusTick, watchdogTick := make(chan time.Time), make(chan time.Time)
	core, logs := observer.New(zapcore.InfoLevel)
	svc := &service{n: n, src: app, log: zap.New(core), statusTick: statusTick, watchdogTick: watchdogTick}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { svc.run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	if got := sock.next(t); !strings.HasPrefix(got, "STATUS=starting") {
		t.Fatalf("first notification %q, want STATUS=starting...", got)
	}
	svc.reloading() // a SIGHUP before READY=1 says nothing
	<-app.waiting   // waiting for Ready
	sock.none(t, "before Ready")
	close(app.ready)
	if got := sock.next(t); !strings.HasPrefix(got, "STATUS=attached") {
		t.Fatalf("after Ready: %q, want STATUS=attached...", got)
	}
	<-app.waiting // waiting for the first health round
	sock.none(t, "Ready, before the first health round")
	app.mu.Lock()
	app.healthy = 1
	app.mu.Unlock()
	close(app.checked)
	want := "READY=1\nSTATUS=forwarding: 1 services; 1/2 backends healthy"
	if got := sock.next(t); got != want {
		t.Fatalf("after the first health round: %q, want %q", got, want)
	}

	// Watchdog: both workers went round.
	app.advance(0, 1)
	watchdogTick <- time.Time{}
	if got := sock.next(t); got != sdnotify.Watchdog {
		t.Fatalf("watchdog tick, workers alive: %q, want WATCHDOG=1", got)
	}
	// Status unchanged: nothing; changed: the new line. The watchdog tick
	// after the unchanged one shows nothing came in between.
	statusTick <- time.Time{}
	app.advance(0, 1)
	watchdogTick <- time.Time{}
	if got := sock.next(t); got != sdnotify.Watchdog {
		t.Fatalf("after an unchanged status: %q, want only WATCHDOG=1", got)
	}
	app.mu.Lock()
	app.healthy = 2
	app.mu.Unlock()
	statusTick <- time.Time{}
	if got := sock.next(t); got != "STATUS=forwarding: 1 services; 2/2 backends healthy" {
		t.Fatalf("changed status: %q", got)
	}

	// Worker 1 stuck: two ticks without a keepalive (a status change
	// after each shows the service went on, and nothing else was sent).
	for i := range 2 {
		app.advance(0)
		watchdogTick <- time.Time{}
		app.mu.Lock()
		app.healthy = i % 2
		app.mu.Unlock()
		statusTick <- time.Time{}
		if got := sock.next(t); !strings.HasPrefix(got, "STATUS=") {
			t.Fatalf("stuck worker, tick %d: %q, want no WATCHDOG=1 (only the status)", i, got)
		}
	}
	if es := logs.FilterMessageSnippet("watchdog keepalive withheld").All(); len(es) != 1 {
		t.Errorf("%d 'withheld' log lines, want 1", len(es))
	} else if q := es[0].ContextMap()["queues"]; fmt.Sprint(q) != "[1]" {
		t.Errorf("withheld: queues %v, want [1]", q)
	}
	// It moves again: the keepalive resumes.
	app.advance(0, 1)
	watchdogTick <- time.Time{}
	if got := sock.next(t); got != sdnotify.Watchdog {
		t.Fatalf("worker moving again: %q, want WATCHDOG=1", got)
	}
	if logs.FilterMessageSnippet("keepalive resumed").Len() != 1 {
		t.Error("no 'keepalive resumed' log line")
	}

	// A reload.
	svc.reloading()
	if got := sock.next(t); !strings.HasPrefix(got, "RELOADING=1\nMONOTONIC_USEC=") {
		t.Fatalf("reloading: %q", got)
	}
	svc.reloaded()
	if got := sock.next(t); !strings.HasPrefix(got, "READY=1\nSTATUS=forwarding: ") {
		t.Fatalf("reloaded: %q", got)
	}

	cancel()
	<-done
	if got := sock.next(t); got != "STOPPING=1\nSTATUS=stopping" {
		t.Fatalf("at the end: %q, want STOPPING=1", got)
	}
}

// TestLiveness: a worker whose rounds did not move since the last check
// is stuck; a change in the set of workers vouches for nothing.
func TestLiveness(t *testing.T) {
	w := func(r ...uint64) []appliance.WorkerRounds {
		out := make([]appliance.WorkerRounds, len(r))
		for i := range r {
			out[i] = appliance.WorkerRounds{Queue: i + 2, Rounds: r[i]}
		}
		return out
	}
	l := liveness{last: w(5, 7)}
	for _, tc := range []struct {
		now  []appliance.WorkerRounds
		want string
	}{
		{w(6, 9), "[]"},
		{w(7, 9), "[3]"},
		{w(7, 9), "[2 3]"},
		{w(8, 10), "[]"},
		{nil, "[-1]"},
	} {
		if got := fmt.Sprint(l.check(tc.now)); got != tc.want {
			t.Errorf("check(%v) = %s, want %s", tc.now, got, tc.want)
		}
	}
}

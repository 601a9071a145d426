package healthcheck

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"xlb/config"
)

// httpCheck is a fast HTTP check for loopback tests. Its timeout is longer
// than its interval (which only the config forbids), so that a loaded
// machine fails no probe by accident; tests of timeouts set their own.
func httpCheck(port int) config.HealthCheck {
	return config.HealthCheck{
		Name: "hc", Type: config.CheckHTTP, Port: port, RequestPath: "/healthz",
		CheckInterval: 50 * time.Millisecond, Timeout: time.Second,
		HealthyThreshold: 1, UnhealthyThreshold: 1,
	}
}

// serve starts an HTTP server on addr ("127.0.0.1:0", "[::1]:0") and
// returns it with its address; edit may set up the server before it starts.
func serve(t testing.TB, addr string, h http.Handler, edit ...func(*http.Server)) (*httptest.Server, netip.AddrPort) {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("no loopback listener on %s on this machine: %v", addr, err)
	}
	s := httptest.NewUnstartedServer(h)
	s.Listener.Close()
	s.Listener = ln
	for _, e := range edit {
		e(s.Config)
	}
	s.Start()
	t.Cleanup(s.Close)
	return s, netip.MustParseAddrPort(ln.Addr().String())
}

// httpTarget is an HTTP target of key for the server at ap, with edits.
func httpTarget(key string, ap netip.AddrPort, edit ...func(*config.HealthCheck)) Target {
	ck := httpCheck(int(ap.Port()))
	for _, e := range edit {
		e(&ck)
	}
	return Target{Key: key, Addr: ap.Addr(), Check: ck}
}

// closedPort is a loopback port nothing listens on (it was just released).
func closedPort(t testing.TB) netip.AddrPort {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ap := netip.MustParseAddrPort(ln.Addr().String())
	ln.Close()
	return ap
}

// running is a Checker run by a test, its results collected per key.
type running struct {
	c      *Checker
	cancel context.CancelFunc
	done   chan error
	logs   *observer.ObservedLogs

	mu      sync.Mutex
	cond    *sync.Cond
	batches [][]Result
	byKey   map[string][]Result
}

// start runs a Checker with opts (Notify is the test's) on targets until
// the test ends.
func start(t *testing.T, opts Options, targets ...Target) *running {
	t.Helper()
	core, logs := observer.New(zapcore.DebugLevel)
	r := &running{byKey: map[string][]Result{}, logs: logs, done: make(chan error, 1)}
	r.cond = sync.NewCond(&r.mu)
	opts.Notify = func(rs []Result) {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.batches = append(r.batches, append([]Result(nil), rs...))
		for _, x := range rs {
			r.byKey[x.Key] = append(r.byKey[x.Key], x)
		}
		r.cond.Broadcast()
	}
	if opts.BatchDelay == 0 {
		opts.BatchDelay = 5 * time.Millisecond
	}
	r.c = New(zap.New(core), opts)
	if err := r.c.Set(targets); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	go func() { r.done <- r.c.Run(ctx) }()
	t.Cleanup(func() { r.stop(t) })
	return r
}

// stop cancels the run and waits (bounded) for Run to return.
func (r *running) stop(t testing.TB) {
	t.Helper()
	r.cancel()
	// No deadline of ours: Run that does not return hangs the test until
	// go test's timeout, which names it.
	err, ok := <-r.done
	if ok && err != nil {
		t.Errorf("Run: %v", err)
	}
	if ok {
		close(r.done)
	}
}

// results waits until key has at least n results and returns the first n.
// Its patience only bounds a hang, with a message better than the test
// binary's timeout: it is no expectation of speed (a loaded machine).
func (r *running) results(t testing.TB, key string, n int) []Result {
	t.Helper()
	const patience = 2 * time.Minute
	deadline := time.Now().Add(patience)
	timer := time.AfterFunc(patience, func() { r.mu.Lock(); r.cond.Broadcast(); r.mu.Unlock() })
	defer timer.Stop()
	r.mu.Lock()
	defer r.mu.Unlock()
	for len(r.byKey[key]) < n {
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d results within %v, want %d: %+v", key, len(r.byKey[key]), patience, n, r.byKey[key])
		}
		r.cond.Wait()
	}
	return append([]Result(nil), r.byKey[key][:n]...)
}

// count is how many results key has so far.
func (r *running) count(key string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.byKey[key])
}

// status returns key's Status.
func (r *running) status(t testing.TB, key string) Status {
	t.Helper()
	for _, s := range r.c.Status() {
		if s.Key == key {
			return s
		}
	}
	t.Fatalf("no status for %s", key)
	return Status{}
}

func zapBool(key string, v bool) zapcore.Field { return zap.Bool(key, v) }

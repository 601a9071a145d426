package admin_test

import (
	"context"
	"errors"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"xlb/controlplane/admin"
	"xlb/dataplane"
)

// TestListenWarning: any host:port is accepted, and one that is not
// loopback only is logged as a warning (New does not bind, so no address
// here is ever listened on).
func TestListenWarning(t *testing.T) {
	for _, tc := range []struct {
		listen string
		warn   bool
	}{
		{"127.0.0.1:9110", false},
		{"127.0.0.53:9110", false},
		{"[::1]:9110", false},
		{"localhost:9110", false},
		{"0.0.0.0:9110", true},
		{"[::]:9110", true},
		{":9110", true},
		{"10.1.2.3:9110", true},
		{"[fd00::1]:9110", true},
		{"admin.example:9110", true},
	} {
		core, logs := observer.New(zapcore.InfoLevel)
		if _, err := admin.New(admin.Options{Listen: tc.listen}, &fakeSources{}, zap.New(core)); err != nil {
			t.Errorf("%s: %v", tc.listen, err)
			continue
		}
		warns := logs.FilterLevelExact(zapcore.WarnLevel).FilterField(zap.String("listen", tc.listen)).All()
		if got := len(warns) == 1; got != tc.warn {
			t.Errorf("%s: warned %v (%d entries: %v), want %v", tc.listen, got, len(warns), logs.All(), tc.warn)
		} else if got && !strings.Contains(warns[0].Message, "not on a loopback address") {
			t.Errorf("%s: warning %q", tc.listen, warns[0].Message)
		}
	}
}

// TestNewErrors: an address that is not host:port, and no sources.
func TestNewErrors(t *testing.T) {
	for _, listen := range []string{"9110", "127.0.0.1", ""} {
		if _, err := admin.New(admin.Options{Listen: listen}, &fakeSources{}, nil); err == nil {
			t.Errorf("New(%q) accepted", listen)
		}
	}
	if _, err := admin.New(admin.Options{Listen: "127.0.0.1:0"}, nil, nil); err == nil {
		t.Error("New without sources accepted")
	}
}

// TestServerLifecycle: /healthz answers 200, other methods and paths are
// refused, Start twice or after Close fails with ErrStarted, Close stops
// the listener and can be repeated, and a busy port is an error.
func TestServerLifecycle(t *testing.T) {
	s, err := admin.New(admin.Options{Listen: "127.0.0.1:0"}, &fakeSources{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if s.Addr() != nil {
		t.Errorf("address %v before Start", s.Addr())
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	base := "http://" + s.Addr().String()
	if body := get(t, base+"/healthz", 200); string(body) != "ok\n" {
		t.Errorf("/healthz body %q", body)
	}
	get(t, base+"/nothing", 404)
	resp, err := http.Post(base+"/metrics", "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST /metrics: %d, want 405", resp.StatusCode)
	}
	if err := s.Start(); !errors.Is(err, admin.ErrStarted) {
		t.Errorf("second Start: %v, want ErrStarted", err)
	}

	busy, err := admin.New(admin.Options{Listen: s.Addr().String()}, &fakeSources{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := busy.Start(); err == nil {
		busy.Close(context.Background())
		t.Error("Start on a port in use succeeded")
	}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(ctx); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := http.Get(base + "/healthz"); err == nil {
		t.Error("still serving after Close")
	}
	if err := s.Start(); !errors.Is(err, admin.ErrStarted) {
		t.Errorf("Start after Close: %v, want ErrStarted", err)
	}

	// Closing a server that never started returns at once.
	idle, _ := admin.New(admin.Options{Listen: "127.0.0.1:0"}, &fakeSources{}, nil)
	if err := idle.Close(ctx); err != nil {
		t.Error(err)
	}
}

// TestBadValues: a label value that is not UTF-8 costs only its own
// metrics (the scrape still answers 200), and run-time information that
// cannot be encoded (a NaN latency) makes /status a 500, not a panic or a
// blank 200.
func TestBadValues(t *testing.T) {
	snap := &dataplane.Snapshot{Gen: 7, Services: []*dataplane.Service{{ID: 0, Name: "bad\xff"}, {ID: 1, Name: "good"}}}
	nan := math.NaN()
	src := &fakeSources{snap: snap, runtime: &admin.Runtime{HealthChecks: []admin.HealthCheckStatus{{LatencyMs: &nan}}}}
	base := startServer(t, src)
	got, _ := scrape(t, base)
	expect(t, got, map[string]float64{`xlb_snapshot_generation{}`: 7, `xlb_service_side{service="good"}`: 0})
	for k := range got {
		if strings.Contains(k, "bad") {
			t.Errorf("exported %s", k)
		}
	}
	get(t, base+"/status", 500)
}

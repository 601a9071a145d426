package main

import (
	"io"
	"strings"
	"syscall"
	"testing"
	"time"

	"xlb/internal/syncbuf"
)

// TestHold runs hold against a server on loopback: its first report (on
// SIGUSR1) has every long-lived connection alive and no failed new one;
// once the server is gone, the next has every one broken and new ones
// failed; SIGTERM ends it with exit 0.
func TestHold(t *testing.T) {
	s := startServer(t, serveConfig{name: "b1", tcp: loopbacks(t)[:1]})
	out := &syncbuf.Buffer{}
	done := make(chan int)
	go func() {
		done <- run([]string{"hold", "--tcp", s.tcpAddrs()[0].String(), "-n", "5", "--interval", "20ms", "--new-interval", "50ms"}, out, io.Discard)
	}()
	waitFor(t, "the connections open", func() bool { return strings.Contains(out.String(), "5 long-lived connections open") })
	if !strings.Contains(out.String(), "per backend: b1 5\n") {
		t.Errorf("opening line: %q", out.String())
	}
	time.Sleep(300 * time.Millisecond)
	if err := syscall.Kill(syscall.Getpid(), syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "phase 1's report", func() bool { return strings.Contains(out.String(), "phase 1: new connections") })
	for _, want := range []string{"long-lived connections: 5 alive, 0 broke, 0 changed backend", ", 0 failed (not answered within 1s)\n"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("phase 1 report without %q:\n%s", want, out.String())
		}
	}
	s.close()
	time.Sleep(500 * time.Millisecond)
	if err := syscall.Kill(syscall.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case code := <-done:
		if code != 0 {
			t.Errorf("hold exit %d", code)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("hold still runs 10s after SIGTERM")
	}
	phase2 := out.String()[strings.Index(out.String(), "phase 2"):]
	for _, want := range []string{"0 alive, 5 broke", "new connections failed for"} {
		if !strings.Contains(phase2, want) {
			t.Errorf("phase 2 report without %q:\n%s", want, phase2)
		}
	}
}

func TestParseHold(t *testing.T) {
	cfg, err := parseHold([]string{"--tcp", "10.0.0.1:80,[fd00::1]:80", "-n", "7"})
	if err != nil || len(cfg.tcp) != 2 || cfg.n != 7 || cfg.interval != 100*time.Millisecond || cfg.newInterval != 20*time.Millisecond {
		t.Errorf("parsed %+v, %v", cfg, err)
	}
	for _, args := range [][]string{
		{},
		{"--tcp", "10.0.0.1"},
		{"--tcp", "10.0.0.1:80", "-n", "0"},
		{"--tcp", "10.0.0.1:80", "--interval", "0s"},
		{"--tcp", "10.0.0.1:80", "--new-interval", "-1s"},
	} {
		if _, err := parseHold(args); err == nil {
			t.Errorf("%q: accepted", args)
		}
	}
}

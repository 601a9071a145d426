package testbed

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

func runCmd(name string, args ...string) (string, error) {
	out, err := exec.Command(name, args...).CombinedOutput()
	return string(out), err
}

func mustExec(t *testing.T, ns string, args ...string) string {
	t.Helper()
	out, err := Exec(ns, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// namespaces lists the named network namespaces starting with prefix-, sorted.
func namespaces(t *testing.T, prefix string) []string {
	t.Helper()
	out, err := runCmd("ip", "netns", "list")
	if err != nil {
		t.Fatal(out, err)
	}
	var got []string
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) > 0 && strings.HasPrefix(f[0], prefix+"-") {
			got = append(got, f[0])
		}
	}
	slices.Sort(got)
	return got
}

// links lists the interface names in namespace ns.
func links(t *testing.T, ns string) []string {
	t.Helper()
	out, err := runCmd("ip", "-n", ns, "-o", "link", "show")
	if err != nil {
		t.Fatal(out, err)
	}
	var got []string
	for _, line := range strings.Split(out, "\n") {
		f := strings.SplitN(line, ": ", 3)
		if len(f) < 3 {
			continue
		}
		name, _, _ := strings.Cut(f[1], "@")
		got = append(got, name)
	}
	return got
}

func delNS(ns string) { _, _ = runCmd("ip", "netns", "del", ns) }

// running: pid exists and is not a zombie.
func running(pid int) bool {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(raw, ')')
	return i > 0 && i+2 < len(raw) && raw[i+2] != 'Z'
}

// startProc starts a command the test owns; it is killed at cleanup if
// still running.
func startProc(t *testing.T, name string, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(name, args...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	procExited.Store(cmd, exited)
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	return cmd
}

var procExited sync.Map // *exec.Cmd -> chan struct{}

// waitExit waits for a command from startProc to end.
func waitExit(cmd *exec.Cmd, d time.Duration) error {
	ch, _ := procExited.Load(cmd)
	select {
	case <-ch.(chan struct{}):
		return nil
	case <-time.After(d):
		return errors.New("still running")
	}
}

// runScript runs the script and returns its exit status and output; with
// noRoot it runs in a new user namespace without a uid mapping, where it is
// uid 65534 and holds no capability over the machine.
func runScript(t *testing.T, script string, noRoot bool, args ...string) (int, string) {
	t.Helper()
	cmd := exec.Command(script, args...)
	if noRoot {
		cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWUSER}
	}
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, string(out)
	case errors.As(err, &ee):
		return ee.ExitCode(), string(out)
	}
	t.Fatalf("running %s: %v", script, err)
	return 0, ""
}

// fakeTB is a test that can fail without failing the real one: Fatal ends
// its goroutine as testing.T's does, and its cleanups run when asked.
type fakeTB struct {
	testing.TB // the real test, for logging only
	mu         sync.Mutex
	failed     bool
	skipped    bool
	cleanups   []func()
}

func (f *fakeTB) Helper()                   {}
func (f *fakeTB) Cleanup(fn func())         { f.mu.Lock(); f.cleanups = append(f.cleanups, fn); f.mu.Unlock() }
func (f *fakeTB) Fail()                     { f.mu.Lock(); f.failed = true; f.mu.Unlock() }
func (f *fakeTB) Failed() bool              { f.mu.Lock(); defer f.mu.Unlock(); return f.failed }
func (f *fakeTB) FailNow()                  { f.Fail(); runtime.Goexit() }
func (f *fakeTB) Error(a ...any)            { f.TB.Log(append([]any{"fake test error:"}, a...)...); f.Fail() }
func (f *fakeTB) Errorf(s string, a ...any) { f.TB.Logf("fake test error: "+s, a...); f.Fail() }
func (f *fakeTB) Fatal(a ...any)            { f.TB.Log(append([]any{"fake test fatal:"}, a...)...); f.FailNow() }
func (f *fakeTB) Fatalf(s string, a ...any) { f.TB.Logf("fake test fatal: "+s, a...); f.FailNow() }
func (f *fakeTB) Skip(a ...any)             { f.TB.Log(append([]any{"fake test skip:"}, a...)...); f.SkipNow() }
func (f *fakeTB) Skipf(s string, a ...any)  { f.TB.Logf("fake test skip: "+s, a...); f.SkipNow() }
func (f *fakeTB) SkipNow()                  { f.mu.Lock(); f.skipped = true; f.mu.Unlock(); runtime.Goexit() }
func (f *fakeTB) Skipped() bool             { f.mu.Lock(); defer f.mu.Unlock(); return f.skipped }

// runCleanups runs the cleanups last registered first, as testing does.
func (f *fakeTB) runCleanups() {
	f.mu.Lock()
	cs := f.cleanups
	f.cleanups = nil
	f.mu.Unlock()
	for i := len(cs) - 1; i >= 0; i-- {
		cs[i]()
	}
}

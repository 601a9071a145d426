package testbed

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Changing a backend while a test runs: what it reports to health checks
// (SetWeight, SetHealthy) and whether its server runs at all (StopServer,
// StartServer). Each returns once the change is in effect.

// SetWeight makes backend name's /healthz send value, verbatim, as its
// X-Load-Balancing-Endpoint-Weight header from its next answer on: "4",
// "0", or "abc" for an invalid one; "" sends no header at all. (Backend's
// Weight field stays what Up started it with.)
func (b *Bed) SetWeight(name, value string) error {
	if b.Backend(name) == nil {
		return fmt.Errorf("testbed: no backend %q", name)
	}
	if strings.ContainsAny(value, "\r\n") {
		return fmt.Errorf("testbed: weight %q: a header value has no line breaks", value)
	}
	// Renamed into place, so the server never reads a half-written file.
	file := filepath.Join(b.RunDir, name+".weight")
	tmp := file + ".tmp"
	if err := os.WriteFile(tmp, []byte(value), 0o644); err != nil {
		return fmt.Errorf("testbed: %w", err)
	}
	if err := os.Rename(tmp, file); err != nil {
		return fmt.Errorf("testbed: %w", err)
	}
	return nil
}

// SetHealthy makes backend name's /healthz answer 200 (true) or 503
// (false) while the server keeps serving everything else (SIGUSR2,
// SIGUSR1), and waits until it does.
func (b *Bed) SetHealthy(name string, healthy bool) error {
	be := b.Backend(name)
	if be == nil {
		return fmt.Errorf("testbed: no backend %q", name)
	}
	pid, err := b.runningServer(name)
	if err != nil {
		return err
	}
	sig, want := syscall.SIGUSR1, 503
	if healthy {
		sig, want = syscall.SIGUSR2, 200
	}
	if err := syscall.Kill(pid, sig); err != nil {
		return fmt.Errorf("testbed: signalling %s's server (pid %d): %w", name, pid, err)
	}
	// Asked on the backend's own loopback: no other traffic is involved.
	local := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), HTTPPort)
	deadline := time.Now().Add(5 * time.Second)
	for {
		r, err := HTTPGet(be.NS, local, "/healthz", time.Second)
		if err == nil && r.Status == want {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("testbed: %s's /healthz still %d (%v) 5s after %v, want %d", name, r.Status, err, sig, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// StopServer kills backend name's server with SIGKILL, as a crash would,
// and waits until it has exited: its listening and connected sockets are
// closed, so new connections to it are refused.
func (b *Bed) StopServer(name string) error {
	if b.Backend(name) == nil {
		return fmt.Errorf("testbed: no backend %q", name)
	}
	pid, err := b.runningServer(name)
	if err != nil {
		return err
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		return fmt.Errorf("testbed: killing %s's server (pid %d): %w", name, pid, err)
	}
	// Exited means gone, or a zombie whose files are closed (its parent
	// is init, which reaps it when it will).
	deadline := time.Now().Add(5 * time.Second)
	for processRuns(pid) {
		if time.Now().After(deadline) {
			return fmt.Errorf("testbed: %s's server (pid %d) still runs 5s after SIGKILL", name, pid)
		}
		time.Sleep(5 * time.Millisecond)
	}
	// The pid file of a killed server stays behind; it names nobody now.
	if err := os.Remove(b.pidFile(name)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("testbed: %w", err)
	}
	return nil
}

// StartServer starts backend name's server again, with the bed's ports
// and its weight file as they are now, and returns once it serves.
func (b *Bed) StartServer(name string) error {
	be := b.Backend(name)
	if be == nil {
		return fmt.Errorf("testbed: no backend %q", name)
	}
	_, err := b.run("start-server", "--prefix", b.Opts.Prefix, "--backend", strings.TrimPrefix(be.Name, "b"))
	return err
}

func (b *Bed) pidFile(name string) string { return filepath.Join(b.RunDir, name+".pid") }

// runningServer is the pid of backend name's server, checked to be that
// server (its command line names its pid file, as testbed.sh's alive does)
// and running, so that a recycled pid is never signalled.
func (b *Bed) runningServer(name string) (int, error) {
	pid, err := b.ServerPID(name)
	if err != nil {
		return 0, fmt.Errorf("testbed: %s's server: %w", name, err)
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil || !strings.Contains(string(cmdline), "\x00--pidfile\x00"+b.pidFile(name)+"\x00") || !processRuns(pid) {
		return 0, fmt.Errorf("testbed: %s's server (pid %d) is not running", name, pid)
	}
	return pid, nil
}

// processRuns reports whether pid exists and has not exited: a zombie has,
// once its leader is the only thread left (the other threads are gone only
// after closing their files; a killed leader may turn zombie before them,
// while the process's sockets are still open).
func processRuns(pid int) bool {
	dir := "/proc/" + strconv.Itoa(pid)
	raw, err := os.ReadFile(dir + "/stat")
	if err != nil {
		return false
	}
	// The state follows the command name's closing parenthesis.
	s := string(raw)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) || s[i+2] != 'Z' {
		return true
	}
	tasks, err := os.ReadDir(dir + "/task")
	return err == nil && len(tasks) > 1
}

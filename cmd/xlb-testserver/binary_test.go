package main

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"xlb/internal/nettest"
	"xlb/internal/nsx"
	"xlb/internal/syncbuf"
)

// binPath is the command built once by TestMain, for what only a separate
// process shows: signals, the pid file, exit status.
var binPath string

func TestMain(m *testing.M) {
	os.Exit(func() int {
		dir, err := os.MkdirTemp("", "xlb-testserver-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(dir)
		binPath = filepath.Join(dir, "xlb-testserver")
		if out, err := exec.Command("go", "build", "-o", binPath, ".").CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "building xlb-testserver: %v\n%s", err, out)
			return 1
		}
		return m.Run()
	}())
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}

// TestProcess: the pid file appears once the sockets are bound and names
// the process; SIGUSR1/SIGUSR2 fail and heal /healthz; SIGTERM stops it
// with status 0 and removes the pid file.
func TestProcess(t *testing.T) {
	pidfile := filepath.Join(t.TempDir(), "b1.pid")
	var logs syncbuf.Buffer
	cmd := exec.Command(binPath, "--name", "b1", "--weight", "5", "--pidfile", pidfile,
		"--listen-tcp", "127.0.0.1:0", "--listen-udp", "127.0.0.1:0")
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill() })

	waitFor(t, "the pid file", func() bool { raw, _ := os.ReadFile(pidfile); return len(raw) > 0 })
	if raw, _ := os.ReadFile(pidfile); strings.TrimSpace(string(raw)) != fmt.Sprint(cmd.Process.Pid) {
		t.Errorf("pid file %q, pid %d", raw, cmd.Process.Pid)
	}
	// The "serving" line names the bound addresses; it may be written just
	// after the pid file.
	serving := regexp.MustCompile(`"tcp": \["([0-9.:]+)"\]`)
	var m []string
	waitFor(t, "the serving log line", func() bool { m = serving.FindStringSubmatch(logs.String()); return m != nil })
	health := func() (int, string) {
		resp, err := http.Get("http://" + m[1] + "/healthz")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode, resp.Header.Get(headerWeight)
	}
	if code, w := health(); code != 200 || w != "5" {
		t.Errorf("/healthz: %d, weight %q", code, w)
	}
	for _, step := range []struct {
		sig  syscall.Signal
		code int
	}{{syscall.SIGUSR1, 503}, {syscall.SIGUSR2, 200}} {
		if err := cmd.Process.Signal(step.sig); err != nil {
			t.Fatal(err)
		}
		waitFor(t, fmt.Sprintf("/healthz %d after %v", step.code, step.sig), func() bool {
			code, _ := health()
			return code == step.code
		})
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("after SIGTERM: %v\n%s", err, logs.String())
		}
	case <-time.After(5 * time.Second):
		t.Fatal("still running 5 s after SIGTERM")
	}
	if _, err := os.Stat(pidfile); !os.IsNotExist(err) {
		t.Errorf("pid file left: %v", err)
	}
}

// TestOffloadOff: on a fresh veth, in a namespace of the test's own, every
// offload starts on and `offload-off` turns each off.
func TestOffloadOff(t *testing.T) {
	nettest.RequireRoot(t)
	const ns = "xtso-ns"
	ip := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	_ = exec.Command("ip", "netns", "del", ns).Run()
	ip("netns", "add", ns)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
	out, err := exec.Command("ip", "-n", ns, "link", "add", "xtso-a", "type", "veth", "peer", "name", "xtso-b").CombinedOutput()
	if err != nil && strings.Contains(string(out), "Unknown device type") {
		t.Skipf("kernel without veth: %s", out)
	} else if err != nil {
		t.Fatalf("%v: %s", err, out)
	}

	all := []string{"gso", "tso", "sg", "tx-checksum"}
	if on := offloadsIn(t, ns, "xtso-a"); !slices.Equal(on, all) {
		t.Fatalf("a new veth has %v on; the test expects %v", on, all)
	}
	if out, err := exec.Command("ip", "netns", "exec", ns, binPath, "offload-off", "xtso-a").CombinedOutput(); err != nil {
		t.Fatalf("offload-off: %v\n%s", err, out)
	}
	if on := offloadsIn(t, ns, "xtso-a"); len(on) != 0 {
		t.Errorf("after offload-off, still on: %v", on)
	}
	if on := offloadsIn(t, ns, "xtso-b"); !slices.Equal(on, all) {
		t.Errorf("the peer changed too: %v", on)
	}
}

// offloadsIn reads dev's offloads from inside ns.
func offloadsIn(t *testing.T, ns, dev string) []string {
	t.Helper()
	var on []string
	err := nsx.Do(ns, func() error {
		var err error
		on, err = offloadsOn(dev)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return on
}

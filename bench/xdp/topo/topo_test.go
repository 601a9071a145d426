package topo

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"xlb/internal/nsx"

	"xlb/internal/nettest"
)

// leftovers lists what a prefix may leave behind: namespaces, the lock.
func leftovers(t *testing.T, prefix string) []string {
	t.Helper()
	var left []string
	out, err := exec.Command("ip", "netns", "list").CombinedOutput()
	if err != nil {
		t.Fatalf("ip netns list: %v: %s", err, out)
	}
	for _, l := range strings.Split(string(out), "\n") {
		if f := strings.Fields(l); len(f) > 0 && strings.HasPrefix(f[0], prefix+"-") {
			left = append(left, "namespace "+f[0])
		}
	}
	for _, d := range []string{prefix + "g", prefix + "m"} {
		if _, err := net.InterfaceByName(d); err == nil {
			left = append(left, "link "+d)
		}
	}
	if _, err := os.Stat(lockPath(prefix)); err == nil {
		left = append(left, lockPath(prefix))
	}
	return left
}

func TestUpDown(t *testing.T) {
	nettest.RequireRoot(t)
	const prefix = "tt1"
	tp, err := Up(Options{Prefix: prefix, Backends: 3})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tp.Down() })

	if len(tp.Backends) != 3 || tp.Backends[2].IP != netip.MustParseAddr("10.77.0.13") ||
		tp.Backends[2].MAC.String() != "02:77:00:00:01:03" {
		t.Fatalf("backends = %+v", tp.Backends)
	}
	if !tp.Threaded {
		t.Logf("NAPI not threaded: %v", tp.ThreadedErr)
	} else {
		for _, d := range []string{tp.GenDev, tp.MidDev} {
			if len(NAPIThreads(d)) != 1 {
				t.Errorf("%s: NAPI threads %v, want one", d, NAPIThreads(d))
			}
		}
	}
	// The middle resolves every backend to its own MAC (permanent), and a
	// TCP connection from the middle reaches the backend's address in the
	// generator namespace, as health checks do.
	out, err := Exec(tp.MidNS, "ip", "neigh", "show", "dev", tp.MidDev)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range tp.Backends {
		if !strings.Contains(out, b.IP.String()+" lladdr "+b.MAC.String()+" PERMANENT") {
			t.Errorf("middle's neighbours lack %s -> %s:\n%s", b.IP, b.MAC, out)
		}
	}
	var ln net.Listener
	if err := nsx.Do(tp.GenNS, func() (err error) { ln, err = net.Listen("tcp4", "0.0.0.0:8080"); return }); err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	for _, b := range tp.Backends {
		err := nsx.Do(tp.MidNS, func() error {
			c, err := net.DialTimeout("tcp4", b.IP.String()+":8080", 2*time.Second)
			if err == nil {
				c.Close()
			}
			return err
		})
		if err != nil {
			t.Errorf("middle -> backend %s: %v", b.IP, err)
		}
	}

	if _, err := Up(Options{Prefix: prefix, Backends: 1}); err == nil || !strings.Contains(err.Error(), "another lbbench xdp") {
		t.Fatalf("second Up with a live prefix: %v, want refused", err)
	}
	if _, err := os.Stat("/run/netns/" + tp.MidNS); err != nil {
		t.Fatalf("refused Up touched the live topology: %v", err)
	}

	if err := tp.Down(); err != nil {
		t.Fatal(err)
	}
	if err := tp.Down(); err != nil {
		t.Fatalf("second Down: %v", err)
	}
	if left := leftovers(t, prefix); len(left) > 0 {
		t.Fatalf("left behind: %v", left)
	}
}

func TestUpFailsCleanly(t *testing.T) {
	nettest.RequireRoot(t)
	const prefix = "tt2"
	failHook = func() error { return errors.New("injected") }
	t.Cleanup(func() { failHook = nil; _ = Sweep(prefix) })
	if _, err := Up(Options{Prefix: prefix, Backends: 2}); err == nil || !strings.Contains(err.Error(), "injected") {
		t.Fatalf("Up = %v, want the injected failure", err)
	}
	if left := leftovers(t, prefix); len(left) > 0 {
		t.Fatalf("a failed Up left: %v", left)
	}
}

// TestUpSweepsDeadRun: namespaces of a run that died (a process still in
// one) are removed by the next Up, and nothing stays after Down.
func TestUpSweepsDeadRun(t *testing.T) {
	nettest.RequireRoot(t)
	const prefix = "tt3"
	t.Cleanup(func() { _ = Sweep(prefix) })
	if out, err := exec.Command("ip", "netns", "add", prefix+"-mid").CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	sleeper := exec.Command("ip", "netns", "exec", prefix+"-mid", "sleep", "60")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- sleeper.Wait() }()
	// Once ip has exec'd sleep, the process is inside the namespace.
	comm := fmt.Sprintf("/proc/%d/comm", sleeper.Process.Pid)
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if b, _ := os.ReadFile(comm); strings.TrimSpace(string(b)) == "sleep" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("ip netns exec did not start sleep within 5s")
		}
	}

	tp, err := Up(Options{Prefix: prefix, Backends: 1})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the dead run's process was not stopped")
	}
	if err := tp.Down(); err != nil {
		t.Fatal(err)
	}
	if left := leftovers(t, prefix); len(left) > 0 {
		t.Fatalf("left behind: %v", left)
	}
}

func TestOptionsRefused(t *testing.T) {
	for _, o := range []Options{{Prefix: "", Backends: 1}, {Prefix: "toolong", Backends: 1}, {Prefix: "1ab", Backends: 1},
		{Prefix: "ok", Backends: 0}, {Prefix: "ok", Backends: MaxBackends + 1}} {
		if err := o.validate(); err == nil {
			t.Errorf("%+v accepted", o)
		}
	}
	if err := (Options{Prefix: "lbx", Backends: 4}).validate(); err != nil {
		t.Error(err)
	}
}

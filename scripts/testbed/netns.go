package testbed

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"

	"golang.org/x/sys/unix"
)

// Exec runs a command in namespace ns (`ip netns exec`) and returns its
// combined output; the error carries the output too.
func Exec(ns string, args ...string) (string, error) {
	cmd := exec.Command("ip", append([]string{"netns", "exec", ns}, args...)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("in %s: %s: %w\n%s", ns, strings.Join(args, " "), err, out.String())
	}
	return out.String(), nil
}

// Do runs fn on an OS thread moved into namespace ns. Sockets fn opens on
// that thread belong to ns for their whole life, and may be used from any
// goroutine afterwards; goroutines fn starts run outside ns (so an
// http.Client, which dials from its own goroutines, does not work inside
// fn: dial in fn, talk outside). The thread is never given back to the
// scheduler: it ends with fn, so no other goroutine ever runs in ns.
func Do(ns string, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // no Unlock: the thread dies with this goroutine
		if unix.Gettid() == unix.Getpid() {
			// The main thread: the process's own /proc/PID/ns/net would
			// name ns (and `ip netns pids` find the test in it), and the
			// runtime cannot end this thread. Hold it while another
			// thread, which cannot be this one, does the work.
			defer runtime.UnlockOSThread()
			errc <- Do(ns, fn)
			return
		}
		f, err := os.Open("/run/netns/" + ns)
		if err != nil {
			errc <- fmt.Errorf("namespace %s: %w", ns, err)
			return
		}
		err = unix.Setns(int(f.Fd()), unix.CLONE_NEWNET)
		f.Close()
		if err != nil {
			errc <- fmt.Errorf("entering namespace %s: %w", ns, err)
			return
		}
		errc <- fn()
	}()
	return <-errc
}

package topo

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"

	"golang.org/x/sys/unix"
)

// InNS runs fn on an OS thread moved into the named network namespace.
// Sockets fn opens, XDP programs it attaches by ifindex and AF_XDP sockets
// it binds belong to that namespace for their whole life and may be used
// from any goroutine afterwards. The thread is never handed back to the
// scheduler (it ends with fn), so no other goroutine runs in the namespace.
func InNS(ns string, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // no Unlock: the thread ends with this goroutine
		if unix.Gettid() == unix.Getpid() {
			// The main thread cannot end; let another thread do it.
			defer runtime.UnlockOSThread()
			errc <- InNS(ns, fn)
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

// run runs a command and returns its combined output; the error carries it.
func run(name string, args ...string) (string, error) {
	cmd := exec.Command(name, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(out.String()))
	}
	return out.String(), nil
}

// Exec runs a command inside namespace ns with `ip netns exec`, which also
// mounts the namespace's own /sys.
func Exec(ns string, args ...string) (string, error) {
	return run("ip", append([]string{"netns", "exec", ns}, args...)...)
}

// Package nsx runs code inside a named network namespace on a thread of its
// own (OnThread, Do), and looks interfaces, commands and sysctls up there:
// the one home for this, shared by lbbench (its topology and baselines),
// the test bed and the tests that build namespaces (see internal/nettest).
package nsx

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Do runs fn on a fresh OS thread inside the named namespace ns
// (/run/netns/ns), or in the caller's namespace when ns is "". Sockets,
// links and BPF attachments fn makes belong to ns for their whole life and
// may be used from any goroutine afterwards; commands fn runs with exec
// start in ns too (the child is forked from this thread). Goroutines fn
// starts run outside ns (so an http.Client, which dials from its own
// goroutines, does not work inside fn: dial in fn, talk outside). The
// thread is never handed back to the scheduler: it ends with fn, so no
// other goroutine ever runs in ns.
func Do(ns string, fn func() error) error {
	if ns == "" {
		return fn()
	}
	return OnThread(func() error {
		f, err := os.Open("/run/netns/" + ns)
		if err != nil {
			return fmt.Errorf("namespace %s: %w", ns, err)
		}
		err = unix.Setns(int(f.Fd()), unix.CLONE_NEWNET)
		f.Close()
		if err != nil {
			return fmt.Errorf("entering namespace %s: %w", ns, err)
		}
		return fn()
	})
}

// OnThread runs fn on a locked OS thread that is not the process's main
// thread and ends with fn, so whatever fn changes about the thread (its
// namespace) never reaches another goroutine.
func OnThread(fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // no Unlock: the thread dies with this goroutine
		if unix.Gettid() == unix.Getpid() {
			// The runtime cannot end the main thread (and the process's
			// /proc/PID/ns would name fn's namespace): hold it while
			// another thread does the work.
			defer runtime.UnlockOSThread()
			errc <- OnThread(fn)
			return
		}
		errc <- fn()
	}()
	return <-errc
}

// Link is an interface as the baselines need it.
type Link struct {
	Name     string
	Index    int
	MAC      net.HardwareAddr
	RxQueues int // real rx queues (at least 1)
}

// LookupLink finds the interface name in namespace ns.
func LookupLink(ns, name string) (Link, error) {
	var out Link
	err := Do(ns, func() error {
		l, err := netlink.LinkByName(name)
		if err != nil {
			return fmt.Errorf("interface %s: %w", Where(name, ns), err)
		}
		a := l.Attrs()
		if len(a.HardwareAddr) != 6 {
			return fmt.Errorf("interface %s: not Ethernet (hardware address %q)", Where(name, ns), a.HardwareAddr)
		}
		out = Link{Name: name, Index: a.Index, MAC: append(net.HardwareAddr(nil), a.HardwareAddr...), RxQueues: max(a.NumRxQueues, 1)}
		return nil
	})
	return out, err
}

// Where names an interface and its namespace for messages.
func Where(name, ns string) string {
	if ns == "" {
		return name
	}
	return name + " in namespace " + ns
}

// ErrNoCommand is wrapped by Run when the program is not installed.
var ErrNoCommand = errors.New("command not installed")

// Run runs a command inside ns with stdin as its input and returns its
// combined output; the error quotes the output.
func Run(ns, stdin string, name string, args ...string) (string, error) {
	path, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("%w: %s: %v", ErrNoCommand, name, err)
	}
	var out strings.Builder
	err = Do(ns, func() error {
		cmd := exec.Command(path, args...)
		cmd.Stdin = strings.NewReader(stdin)
		cmd.Stdout, cmd.Stderr = &out, &out
		return cmd.Run()
	})
	if err != nil {
		return out.String(), fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(out.String()))
	}
	return out.String(), nil
}

// ReadSysctl reads /proc/sys/<path> inside ns (path with slashes, e.g.
// net/ipv4/ip_forward).
func ReadSysctl(ns, path string) (string, error) {
	var v string
	err := Do(ns, func() error {
		b, err := os.ReadFile("/proc/sys/" + path)
		v = strings.TrimSpace(string(b))
		return err
	})
	return v, err
}

// WriteSysctl writes /proc/sys/<path> inside ns.
func WriteSysctl(ns, path, value string) error {
	return Do(ns, func() error {
		return os.WriteFile("/proc/sys/"+path, []byte(value), 0)
	})
}

// Package sdnotify speaks systemd's notify protocol (sd_notify(3)) from the
// service's side: datagrams of "KEY=value" lines (READY=1, STATUS=...,
// RELOADING=1, STOPPING=1, WATCHDOG=1) to the unix socket named by
// $NOTIFY_SOCKET, and the watchdog interval from $WATCHDOG_USEC. It is a
// few lines over a unixgram socket, so xlb takes no dependency for it;
// without $NOTIFY_SOCKET (not started by systemd, or not Type=notify)
// every call is a no-op.
package sdnotify

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"
)

// Notifier sends states to the service manager. The nil *Notifier is
// valid and sends nothing. Send may be called from any goroutine.
type Notifier struct {
	conn *net.UnixConn
	addr *net.UnixAddr
}

// FromEnv returns a Notifier for $NOTIFY_SOCKET, or nil (and no error)
// when it is not set. A path starting with '@' is an abstract socket, as
// systemd writes it. Only unix sockets are supported (systemd's vsock
// form, for VMs, is refused with an error).
func FromEnv() (*Notifier, error) {
	name := os.Getenv("NOTIFY_SOCKET")
	if name == "" {
		return nil, nil
	}
	return Dial(name)
}

// Dial returns a Notifier for the socket at name (a path, or '@' and an
// abstract name).
func Dial(name string) (*Notifier, error) {
	switch {
	case strings.HasPrefix(name, "vsock:"):
		return nil, fmt.Errorf("NOTIFY_SOCKET %q: vsock is not supported", name)
	case !strings.HasPrefix(name, "/") && !strings.HasPrefix(name, "@"):
		return nil, fmt.Errorf("NOTIFY_SOCKET %q: want an absolute path or @abstract name", name)
	}
	// Go maps a leading '@' to the abstract namespace's leading NUL byte.
	addr := &net.UnixAddr{Name: name, Net: "unixgram"}
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Net: "unixgram"}) // autobound, unnamed
	if err != nil {
		return nil, fmt.Errorf("NOTIFY_SOCKET: %w", err)
	}
	return &Notifier{conn: conn, addr: addr}, nil
}

// Send sends the states as one datagram, one "KEY=value" per line
// (sd_notify(3)); newlines inside a value would start a new key, so they
// are replaced with spaces.
func (n *Notifier) Send(states ...string) error {
	if n == nil || len(states) == 0 {
		return nil
	}
	var b strings.Builder
	for i, s := range states {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(strings.ReplaceAll(s, "\n", " "))
	}
	_, err := n.conn.WriteToUnix([]byte(b.String()), n.addr)
	if err != nil {
		return fmt.Errorf("notify %s: %w", n.addr.Name, err)
	}
	return nil
}

// Close releases the socket.
func (n *Notifier) Close() error {
	if n == nil {
		return nil
	}
	return n.conn.Close()
}

// Common states.
const (
	Ready     = "READY=1"
	Reloading = "RELOADING=1"
	Stopping  = "STOPPING=1"
	Watchdog  = "WATCHDOG=1"
)

// Status is the STATUS= state: one line the manager shows
// (systemctl status).
func Status(s string) string { return "STATUS=" + s }

// ReloadingNow is RELOADING=1 with the MONOTONIC_USEC that systemd (253+)
// wants next to it, read from CLOCK_MONOTONIC now.
func ReloadingNow() []string {
	return []string{Reloading, "MONOTONIC_USEC=" + strconv.FormatInt(monotonicUsec(), 10)}
}

// ErrNoWatchdog: the manager asked for no watchdog keepalive.
var ErrNoWatchdog = errors.New("no watchdog: WATCHDOG_USEC not set")

// WatchdogInterval is the watchdog timeout the manager set
// ($WATCHDOG_USEC), for this process ($WATCHDOG_PID, when set, must be
// its pid). ErrNoWatchdog when there is none; an error for a value that
// is not a positive number of microseconds.
func WatchdogInterval() (time.Duration, error) {
	usec := os.Getenv("WATCHDOG_USEC")
	if usec == "" {
		return 0, ErrNoWatchdog
	}
	if pid := os.Getenv("WATCHDOG_PID"); pid != "" && pid != strconv.Itoa(os.Getpid()) {
		return 0, ErrNoWatchdog // meant for another process (a parent's)
	}
	n, err := strconv.ParseInt(usec, 10, 64)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("WATCHDOG_USEC %q: want a positive number of microseconds", usec)
	}
	return time.Duration(n) * time.Microsecond, nil
}

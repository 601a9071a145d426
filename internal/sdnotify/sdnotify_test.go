package sdnotify

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

func listen(t *testing.T, name string) *net.UnixConn {
	t.Helper()
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: name, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func recv(t *testing.T, c *net.UnixConn) string {
	t.Helper()
	buf := make([]byte, 1024)
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	n, err := c.Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	return string(buf[:n])
}

// TestSend_PathAndAbstract: FromEnv reaches a socket by path and an
// abstract one by '@' name, and Send makes one datagram of the states, a
// line each, with newlines inside a state flattened.
func TestSend_PathAndAbstract(t *testing.T) {
	for _, name := range []string{
		filepath.Join(t.TempDir(), "notify"),
		fmt.Sprintf("@xlb-sdnotify-test-%d", os.Getpid()),
	} {
		t.Run(name[:1], func(t *testing.T) {
			c := listen(t, name)
			t.Setenv("NOTIFY_SOCKET", name)
			n, err := FromEnv()
			if err != nil || n == nil {
				t.Fatalf("FromEnv: %v, %v", n, err)
			}
			defer n.Close()
			if err := n.Send(Ready, Status("two\nlines")); err != nil {
				t.Fatal(err)
			}
			if got, want := recv(t, c), "READY=1\nSTATUS=two lines"; got != want {
				t.Errorf("got %q, want %q", got, want)
			}
			if err := n.Send(ReloadingNow()...); err != nil {
				t.Fatal(err)
			}
			got := recv(t, c)
			usec, ok := strings.CutPrefix(got, "RELOADING=1\nMONOTONIC_USEC=")
			if v, err := strconv.ParseInt(usec, 10, 64); !ok || err != nil || v <= 0 {
				t.Errorf("reloading: %q, want RELOADING=1 and a positive MONOTONIC_USEC", got)
			}
		})
	}
}

// TestFromEnv_Unset: without NOTIFY_SOCKET, no notifier and no error; the
// nil notifier's Send and Close do nothing. A relative path or vsock is
// an error.
func TestFromEnv_Unset(t *testing.T) {
	t.Setenv("NOTIFY_SOCKET", "")
	n, err := FromEnv()
	if n != nil || err != nil {
		t.Fatalf("FromEnv = %v, %v; want nil, nil", n, err)
	}
	if err := n.Send(Ready); err != nil {
		t.Error(err)
	}
	if err := n.Close(); err != nil {
		t.Error(err)
	}
	for _, bad := range []string{"relative/sock", "vsock:2:1234"} {
		if _, err := Dial(bad); err == nil {
			t.Errorf("Dial(%q): no error", bad)
		}
	}
}

// TestSend_NobodyListening: a socket with no listener is an error from
// Send (the caller logs it), not a hang or a panic.
func TestSend_NobodyListening(t *testing.T) {
	n, err := Dial(filepath.Join(t.TempDir(), "gone"))
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	if err := n.Send(Ready); err == nil {
		t.Error("Send to a missing socket: no error")
	}
}

func TestWatchdogInterval(t *testing.T) {
	pid := strconv.Itoa(os.Getpid())
	for _, tc := range []struct {
		usec, pid string
		want      time.Duration
		err       error // nil: none; errBad: some other error
	}{
		{"", "", 0, ErrNoWatchdog},
		{"10000000", "", 10 * time.Second, nil},
		{"10000000", pid, 10 * time.Second, nil},
		{"10000000", "1", 0, ErrNoWatchdog}, // another process's
		{"0", "", 0, errBad},
		{"-5", "", 0, errBad},
		{"ten", "", 0, errBad},
	} {
		t.Setenv("WATCHDOG_USEC", tc.usec)
		t.Setenv("WATCHDOG_PID", tc.pid)
		got, err := WatchdogInterval()
		switch {
		case tc.err == errBad && (err == nil || errors.Is(err, ErrNoWatchdog)):
			t.Errorf("USEC=%q: err %v, want an error naming the value", tc.usec, err)
		case tc.err != errBad && !errors.Is(err, tc.err) && (err != nil || tc.err != nil):
			t.Errorf("USEC=%q PID=%q: err %v, want %v", tc.usec, tc.pid, err, tc.err)
		case got != tc.want:
			t.Errorf("USEC=%q PID=%q: %v, want %v", tc.usec, tc.pid, got, tc.want)
		}
	}
}

var errBad = errors.New("bad value")

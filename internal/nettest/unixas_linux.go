package nettest

import (
	"fmt"
	"net"
	"os"
	"testing"

	"golang.org/x/sys/unix"

	"xlb/internal/nsx"
)

// Nobody is the uid (and gid) of the unprivileged user tests act as.
const Nobody = 65534

// ListenUnixAs listens on a Unix socket at path as uid: the socket's
// SO_PEERCRED, which a connecting client reads, and the file's owner are
// uid's, as if another user's process had made them. Only the listen runs
// as uid, on a thread that then ends (nsx.OnThread); the raw setresuid(2)
// changes that thread alone, where Go's wrappers change every thread. The
// directory must let uid create files (mode 1777, say). Needs root; the
// listener closes when the test ends.
func ListenUnixAs(tb testing.TB, path string, uid int) *net.UnixListener {
	tb.Helper()
	RequireRoot(tb)
	var ln *net.UnixListener
	err := nsx.OnThread(func() error {
		if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, ^uintptr(0), uintptr(uid), ^uintptr(0)); e != 0 {
			return fmt.Errorf("setresuid(-1, %d, -1): %w", uid, e)
		}
		var err error
		ln, err = net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
		return err
	})
	if err != nil {
		tb.Fatalf("listening on %s as uid %d: %v", path, uid, err)
	}
	tb.Cleanup(func() { ln.Close() })
	return ln
}

// SharedDir is a fresh directory any user may create files in (mode 1777,
// as /tmp), removed when the test ends: where a squatter can put a socket.
func SharedDir(tb testing.TB) string {
	tb.Helper()
	dir, err := os.MkdirTemp("", "xlb-shared-")
	if err == nil {
		err = os.Chmod(dir, 0o1777)
	}
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// DialUnixAs connects to the Unix socket at path as uid, as ListenUnixAs
// listens: the listener's SO_PEERCRED then reads uid (and this process's
// pid). The path must be reachable and writable by uid. Needs root; the
// connection closes when the test ends.
func DialUnixAs(tb testing.TB, path string, uid int) *net.UnixConn {
	tb.Helper()
	RequireRoot(tb)
	var c *net.UnixConn
	err := nsx.OnThread(func() error {
		if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, ^uintptr(0), uintptr(uid), ^uintptr(0)); e != 0 {
			return fmt.Errorf("setresuid(-1, %d, -1): %w", uid, e)
		}
		var err error
		c, err = net.DialUnix("unix", nil, &net.UnixAddr{Name: path, Net: "unix"})
		return err
	})
	if err != nil {
		tb.Fatalf("connecting to %s as uid %d: %v", path, uid, err)
	}
	tb.Cleanup(func() { c.Close() })
	return c
}

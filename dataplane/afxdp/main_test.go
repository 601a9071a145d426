package afxdp

import (
	"fmt"
	"os"
	"strings"
	"testing"
)

// TestMain fails the run if the tests leave file descriptors open: every
// socket, map, program, link and namespace handle they make must be closed.
func TestMain(m *testing.M) {
	openFDs() // the first os.Open sets up the runtime's poller fds
	before := openFDs()
	code := m.Run()
	if code == 0 {
		var leaked []string
		for fd, target := range openFDs() {
			if _, ok := before[fd]; !ok {
				leaked = append(leaked, fmt.Sprintf("fd %s -> %s", fd, target))
			}
		}
		if len(leaked) > 0 {
			fmt.Fprintf(os.Stderr, "leaked file descriptors:\n%s\n", strings.Join(leaked, "\n"))
			code = 1
		}
	}
	os.Exit(code)
}

// openFDs maps this process's open fds to what they point at, leaving out
// the one that reads the list.
func openFDs() map[string]string {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return nil
	}
	fds := make(map[string]string, len(ents))
	for _, e := range ents {
		target, err := os.Readlink("/proc/self/fd/" + e.Name())
		if err != nil || strings.HasPrefix(target, "/proc/") {
			continue
		}
		fds[e.Name()] = target
	}
	return fds
}

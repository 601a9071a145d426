package xdpprog

import (
	"fmt"
	"os"
	"testing"
)

// TestMain fails the run when tests leave file descriptors open: programs,
// maps, links and sockets must all be closed.
func TestMain(m *testing.M) {
	if spec := os.Getenv(childEnv); spec != "" {
		os.Exit(attachedChild(spec))
	}
	// Start the runtime's netpoller (epoll and eventfd descriptors) first,
	// so that it is not counted as a leak.
	if r, w, err := os.Pipe(); err == nil {
		r.Close()
		w.Close()
	}
	before := openFDs()
	code := m.Run()
	if after := openFDs(); code == 0 && after > before {
		fmt.Fprintf(os.Stderr, "xdpprog tests leaked %d file descriptors\n", after-before)
		code = 1
	}
	os.Exit(code)
}

func openFDs() int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return 0
	}
	return len(ents)
}

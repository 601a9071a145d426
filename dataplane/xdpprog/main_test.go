package xdpprog

import (
	"os"
	"testing"

	"xlb/internal/nettest"
)

// TestMain fails the run when tests leave file descriptors open: programs,
// maps, links and sockets must all be closed.
func TestMain(m *testing.M) {
	if spec := os.Getenv(childEnv); spec != "" {
		os.Exit(attachedChild(spec))
	}
	os.Exit(nettest.MainCheckFDs(m))
}

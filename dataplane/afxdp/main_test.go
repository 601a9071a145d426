package afxdp

import (
	"os"
	"testing"

	"xlb/internal/nettest"
)

// TestMain fails the run if the tests leave file descriptors open: every
// socket, map, program, link and namespace handle they make must be closed.
func TestMain(m *testing.M) {
	os.Exit(nettest.MainCheckFDs(m))
}

package decap

import (
	"os"
	"testing"

	"xlb/internal/nettest"
)

// TestMain fails the run when tests leave file descriptors open: programs,
// maps and links must all be closed.
func TestMain(m *testing.M) { os.Exit(nettest.MainCheckFDs(m)) }

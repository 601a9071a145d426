package xdpfwd

import (
	"os"
	"testing"

	"xlb/internal/nettest"
)

func TestMain(m *testing.M) { os.Exit(nettest.MainCheckFDs(m)) }

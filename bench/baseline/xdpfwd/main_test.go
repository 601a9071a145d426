package xdpfwd

import (
	"os"
	"testing"

	"xlb/bench/baseline/internal/bltest"
)

func TestMain(m *testing.M) { os.Exit(bltest.MainCheckFDs(m)) }

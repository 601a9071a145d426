package e2e

import (
	"bufio"
	"fmt"
	"math"
	"net/netip"
	"sort"
	"strconv"
	"strings"
	"testing"

	"xlb/scripts/testbed"
)

// probe runs `xlb-testserver probe` in b's first client: n new TCP
// connections (HTTP GET /) to tcp, or n UDP exchanges (each from a new
// port) with udp, whichever is valid, and returns how many each backend
// answered. Any failed exchange fails the test.
func probe(t *testing.T, b *testbed.Bed, proto string, dst netip.AddrPort, n int) map[string]int {
	t.Helper()
	out, err := testbed.Exec(b.Clients[0].NS, serverBin, "probe", "--"+proto, dst.String(),
		"-n", strconv.Itoa(n), "--parallel", "16", "--timeout", "2s")
	if err != nil {
		t.Fatalf("probe %s %s: %v", proto, dst, err)
	}
	counts := map[string]int{}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 3 || f[0] != proto {
			t.Fatalf("probe: unexpected line %q in:\n%s", sc.Text(), out)
		}
		c, err := strconv.Atoi(f[2])
		if err != nil {
			t.Fatalf("probe: unexpected line %q", sc.Text())
		}
		if f[1] == "errors" {
			if c != 0 {
				t.Fatalf("probe %s %s: %d errors:\n%s", proto, dst, c, out)
			}
			continue
		}
		counts[f[1]] = c
	}
	return counts
}

// shareTolerance is how far, in percentage points, a backend's share of n
// = 600 new flows may be from its configured share. For a share of 1/3 one
// standard deviation is 1.9 points: 8 points is over four, so a correct
// balancer fails about once in 10^4 runs, and one that sends every flow to
// one backend (100 % and 0 %) or to two (50 %, 50 %, 0 %) always does.
const shareTolerance = 8.0

// checkShares fails t unless every backend's share of counts is within
// shareTolerance of want (in per cent), backends not in want included
// (their share must be 0: a failover backend takes nothing while the
// primaries are healthy).
func checkShares(t *testing.T, what string, counts map[string]int, want map[string]float64) {
	t.Helper()
	total := 0
	for _, c := range counts {
		total += c
	}
	if total == 0 {
		t.Fatalf("%s: no answers", what)
	}
	names := map[string]bool{}
	for n := range counts {
		names[n] = true
	}
	for n := range want {
		names[n] = true
	}
	var sorted []string
	for n := range names {
		sorted = append(sorted, n)
	}
	sort.Strings(sorted)
	var report []string
	bad := false
	for _, n := range sorted {
		got := 100 * float64(counts[n]) / float64(total)
		report = append(report, fmt.Sprintf("%s %d (%.1f%%, want %.1f%%)", n, counts[n], got, want[n]))
		if math.Abs(got-want[n]) > shareTolerance || (want[n] == 0 && counts[n] != 0) {
			bad = true
		}
	}
	if bad {
		t.Errorf("%s: shares off by more than %.0f points: %s", what, shareTolerance, strings.Join(report, ", "))
	} else {
		t.Logf("%s: %s", what, strings.Join(report, ", "))
	}
}

// thirds is the configured split of the primaries of the tests' config.
var thirds = map[string]float64{"b1": 100.0 / 3, "b2": 100.0 / 3, "b3": 100.0 / 3, "b4": 0}

// metrics parses the Prometheus text of /metrics into "name{l="v",...}"
// (labels sorted, as client_golang writes them) -> value.
func metrics(t *testing.T, b *testbed.Bed) map[string]float64 {
	t.Helper()
	body := admin(t, b, "/metrics")
	m := map[string]float64{}
	for _, line := range strings.Split(body, "\n") {
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if i < 0 || err != nil {
			t.Fatalf("/metrics: unexpected line %q", line)
		}
		m[line[:i]] = v
	}
	return m
}

// metric returns one series of m, failing t when it is missing.
func metric(t *testing.T, m map[string]float64, series string) float64 {
	t.Helper()
	v, ok := m[series]
	if !ok {
		t.Fatalf("/metrics has no %s", series)
	}
	return v
}

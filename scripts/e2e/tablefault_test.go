package e2e

import (
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"xlb/scripts/testbed"
)

// tableFaulted is the log line of a contained fault in the table file.
const tableFaulted = `"msg":"conntrack table file changed under xlb (truncated?)`

// TestTableFile_TruncatedUnderXLB: the conntrack table file in state_dir
// truncated while xlb runs and forwards (to nothing, then, after a
// restart, to half its size) does not stop xlb: before, the next packet
// of a tracked flow died of SIGBUS in the worker (XDP detached, every
// connection stalled). Now xlb goes on with an empty table in memory:
// it still runs, XDP stays attached, 20 kept-alive connections are
// still answered by their backends (Maglev picks them again: nothing
// changed but the lost entries), 20 new connections are answered,
// xlb_conntrack_faults_total is at least 1, one error line names the
// file, and the state kept beside the table is gone, so that the next
// start does not take the abandoned table for a kept one.
func TestTableFile_TruncatedUnderXLB(t *testing.T) {
	t.Parallel()
	b := upBed(t, testbed.Options{Prefix: "e2esbus", Failover: -1})
	web := netip.AddrPortFrom(testbed.VIP4, testbed.HTTPPort)
	stateDir := t.TempDir()
	cfg := faultConfig(t, b, 2, 2, faultSvc{name: "web", port: web.Port(), primaries: []string{"b1", "b2", "b3"}})
	keepIn(t, cfg, stateDir)
	table := filepath.Join(stateDir, "conntrack")

	for _, tc := range []struct {
		name string
		size func(full int64) int64
	}{
		{"truncated to 0", func(int64) int64 { return 0 }},
		{"truncated to half", func(full int64) int64 { return full / 2 }},
	} {
		p := startXLB(t, b, cfg)
		waitStatus(t, b, tc.name+": every backend healthy", allHealthy)
		conns := make([]*testbed.HTTPConn, 20)
		backends := make([]string, len(conns))
		for i := range conns {
			c, err := dialRetry(b, web)
			if err != nil {
				t.Fatalf("%s: connection %d: %v", tc.name, i, err)
			}
			t.Cleanup(func() { c.Close() })
			if backends[i], err = askOn(c); err != nil {
				t.Fatalf("%s: connection %d: first request: %v", tc.name, i, err)
			}
			conns[i] = c
		}
		if _, err := os.Stat(filepath.Join(stateDir, "controlplane.json")); err != nil {
			t.Fatalf("%s: no control plane state kept before the truncation: %v", tc.name, err)
		}
		fi, err := os.Stat(table)
		must(t, err)
		must(t, os.Truncate(table, tc.size(fi.Size())))
		t.Logf("%s: %s truncated from %d to %d bytes", tc.name, table, fi.Size(), tc.size(fi.Size()))

		// Traffic reaches the table: every kept-alive connection asks,
		// then new ones, until a worker has met the fault (a half file
		// faults only for flows whose buckets are in the lost half).
		faults := 0.0
		for round := 0; faults < 1; round++ {
			if round == 10 {
				t.Fatalf("%s: no fault counted after %d rounds of traffic", tc.name, round)
			}
			for i, c := range conns {
				got, err := askOn(c)
				if err != nil || got != backends[i] {
					t.Errorf("%s: connection %d to %s: answered by %q, %v", tc.name, i, backends[i], got, err)
				}
			}
			select {
			case <-p.exited:
				t.Fatalf("%s: xlb exited (%v)", tc.name, p.err)
			default:
			}
			if c := newConns(t, b, web, 20); c["b1"]+c["b2"]+c["b3"] != 20 {
				t.Errorf("%s: 20 new connections answered %v", tc.name, c)
			}
			faults = metric(t, metrics(t, b), "xlb_conntrack_faults_total")
		}
		if !xdpAttached(t, b) {
			t.Errorf("%s: the XDP program is detached", tc.name)
		}
		if !logHas(p, tableFaulted, table) {
			t.Errorf("%s: no log line saying the table file %s changed under xlb", tc.name, table)
		}
		if _, err := os.Stat(filepath.Join(stateDir, "controlplane.json")); !os.IsNotExist(err) {
			t.Errorf("%s: the kept state is still in state_dir after the fault: %v", tc.name, err)
		}
		// Still forwarding, tracked in memory.
		if c := newConns(t, b, web, 20); c["b1"]+c["b2"]+c["b3"] != 20 {
			t.Errorf("%s: 20 new connections after the fault answered %v", tc.name, c)
		}
		select {
		case <-p.exited:
			t.Fatalf("%s: xlb exited (%v)", tc.name, p.err)
		default:
		}
		p.stop()
		if strings.Contains(p.log.String(), tableKept) {
			t.Errorf("%s: the start took a kept table", tc.name)
		}
		for _, c := range conns {
			c.Close()
		}
	}
}

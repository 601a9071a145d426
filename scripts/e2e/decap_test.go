package e2e

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"xlb/dataplane/decap"
	"xlb/scripts/testbed"
)

// decapStats is `xlb decap --stats --json` of one backend.
type decapStats struct {
	Ifindex  int          `json:"ifindex"`
	Local    []netip.Addr `json:"local"`
	Counters decap.Stats  `json:"counters"`
}

// attachDecap runs `xlb decap` on backend be's interface (GUE port of the
// config, pins in the bpffs at pinDir) and detaches it when t ends,
// checking that --detach says so.
func attachDecap(t *testing.T, be *testbed.Backend, pinDir string) {
	t.Helper()
	out, err := testbed.Exec(be.NS, xlbBin, "decap", "--iface", be.Iface, "--gue-port", fmt.Sprint(guePort), "--pin-dir", pinDir)
	if err != nil {
		t.Fatalf("xlb decap on %s: %v", be.Name, err)
	}
	if !strings.Contains(out, "attached to "+be.Iface) || !strings.Contains(out, be.Addr4.String()) || !strings.Contains(out, be.Addr6.String()) {
		t.Fatalf("xlb decap on %s: %q, want it attached with %s and %s", be.Name, out, be.Addr4, be.Addr6)
	}
	t.Cleanup(func() {
		out, err := testbed.Exec(be.NS, xlbBin, "decap", "--iface", be.Iface, "--detach", "--pin-dir", pinDir)
		if err != nil || !strings.Contains(out, "detached from "+be.Iface) {
			t.Errorf("xlb decap --detach on %s: %q, %v", be.Name, out, err)
		}
	})
}

// readDecapStats reads backend be's decap counters.
func readDecapStats(t *testing.T, be *testbed.Backend, pinDir string) decapStats {
	t.Helper()
	out, err := testbed.Exec(be.NS, xlbBin, "decap", "--iface", be.Iface, "--stats", "--json", "--pin-dir", pinDir)
	if err != nil {
		t.Fatalf("xlb decap --stats on %s: %v", be.Name, err)
	}
	var s decapStats
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		t.Fatalf("xlb decap --stats --json on %s: %v\n%s", be.Name, err, out)
	}
	return s
}

// pinRoot mounts a bpffs of t's own (the `ip netns exec` of testbed.Exec
// mounts a fresh /sys, without the host's /sys/fs/bpf, but keeps this
// one) and unmounts it at the end, after the detaches.
func pinRoot(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := unix.Mount("bpf", dir, "bpf", 0, "mode=0700"); err != nil {
		t.Fatalf("mounting a bpffs on %s: %v", dir, err)
	}
	t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
	return dir
}

// checkDecapsulated attaches `xlb decap` to b1-b3 and carries real kernel
// TCP (new HTTP connections) and UDP (echo exchanges) through every
// decapCase: each request reaches the case's backend through xlb's IPIP or
// GUE, is decapsulated by the backend's XDP program, answered by the
// backend's kernel from the VIP on its lo, and the answer goes straight to
// the client (DSR). The backend's counter for the case's encapsulation and
// outer family grows by at least the number of packets that carried the
// requests; nothing the balancer sent is counted as invalid or not local.
func checkDecapsulated(t *testing.T, b *testbed.Bed) {
	const exchanges = 10
	root := pinRoot(t)
	for _, name := range []string{"b1", "b2", "b3"} {
		attachDecap(t, b.Backend(name), root)
	}
	c := b.Clients[0]
	for _, tc := range decapCases {
		t.Run(tc.name, func(t *testing.T) {
			be := b.Backend(tc.be)
			before := readDecapStats(t, be, root)
			dst := netip.AddrPortFrom(tc.vip, tc.port)
			for i := range exchanges {
				r, err := testbed.HTTPGet(c.NS, dst, fmt.Sprintf("/decap/%d", i), 3*time.Second)
				if err != nil {
					t.Fatalf("HTTP %d to %s: %v", i, dst, err)
				}
				if r.Status != 200 || r.Backend != be.Name {
					t.Fatalf("HTTP %d to %s: status %d from %q, want 200 from %s", i, dst, r.Status, r.Backend, be.Name)
				}
				got, err := testbed.UDPEcho(c.NS, dst, fmt.Sprintf("decap %s %d", tc.name, i), 3*time.Second)
				if err != nil {
					t.Fatalf("UDP %d to %s: %v", i, dst, err)
				}
				if got != be.Name {
					t.Fatalf("UDP %d to %s echoed by %s, want %s", i, dst, got, be.Name)
				}
			}
			after := readDecapStats(t, be, root)
			counter := func(s decapStats) uint64 {
				switch {
				case tc.gue && tc.outer6:
					return s.Counters.GUE6
				case tc.gue:
					return s.Counters.GUE4
				case tc.outer6:
					return s.Counters.IPIP6
				}
				return s.Counters.IPIP4
			}
			// Per exchange at least: SYN, the request, the ACK of the
			// answer, and the UDP datagram.
			if d := counter(after) - counter(before); d < 4*exchanges {
				t.Errorf("%s: the backend's counter grew by %d over %d exchanges, want at least %d", tc.name, d, exchanges, 4*exchanges)
			}
			if after.Counters.PassedInvalid != before.Counters.PassedInvalid || after.Counters.PassedNotLocal != before.Counters.PassedNotLocal {
				t.Errorf("%s: passed_invalid %d -> %d, passed_not_local %d -> %d: frames the balancer sent were not decapsulated",
					tc.name, before.Counters.PassedInvalid, after.Counters.PassedInvalid, before.Counters.PassedNotLocal, after.Counters.PassedNotLocal)
			}
			t.Logf("%s: %d HTTP and %d UDP exchanges with %s through its decap program (%d frames decapsulated)",
				tc.name, exchanges, exchanges, be.Name, counter(after)-counter(before))
		})
	}
}

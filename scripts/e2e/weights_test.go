package e2e

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"xlb/scripts/testbed"
)

// demoConfig is `make demo`'s configuration, on b's balancer interface.
func demoConfig(t *testing.T, b *testbed.Bed) string {
	t.Helper()
	raw, err := os.ReadFile("../../testdata/demo/testbed.toml")
	if err != nil {
		t.Fatal(err)
	}
	const iface = `interface = "xlbdemo-lbeth"`
	if !strings.Contains(string(raw), iface) {
		t.Fatalf("testdata/demo/testbed.toml has no line %s to point at this bed", iface)
	}
	text := strings.Replace(string(raw), iface, fmt.Sprintf("interface = %q", b.LB.Iface), 1)
	text = strings.Replace(text, "\n[admin]\n", fmt.Sprintf("\n[admin]\nsocket = %q\n", adminSocket(b.LB.NS)), 1)
	path := filepath.Join(t.TempDir(), "demo.toml")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestWeights runs the demo: backends b1-b3 report weights 1, 2 and 3 on
// /healthz (and the failover b4 1), xlb's HTTP health checks read them
// (W1), and WEIGHTED_MAGLEV spreads new connections and UDP exchanges
// 1:2:3 over the primaries (S2), none to b4.
func TestWeights(t *testing.T) {
	t.Parallel()
	b := upBed(t, testbed.Options{Prefix: "e2ew", Weights: []int{1, 2, 3, 1}})
	startXLB(t, b, demoConfig(t, b))
	want := map[string]uint32{"b1": 1, "b2": 2, "b3": 3}
	st := waitStatus(t, b, "b1-b3 healthy with weights 1, 2, 3 in every service", func(s status) bool {
		for _, svc := range s.Services {
			for _, be := range svc.Backends {
				w, primary := want[strings.Split(be.Name, "-")[0]]
				if !be.Healthy || primary && (be.Weight != w || !be.Eligible) {
					return false
				}
			}
		}
		return len(s.Services) == 3
	})
	for _, hc := range st.Runtime.HealthChecks {
		if !hc.Healthy || hc.WeightState != "VALID" {
			t.Errorf("health check %s: healthy %v, weight state %q (%s), want healthy, VALID", hc.Target, hc.Healthy, hc.WeightState, hc.Reason)
		}
	}
	if len(st.Runtime.HealthChecks) != 8 {
		t.Errorf("%d health-check targets, want 8 (b1-b4, IPv4 and IPv6; web and echo share theirs)", len(st.Runtime.HealthChecks))
	}

	sixths := map[string]float64{"b1": 100.0 / 6, "b2": 200.0 / 6, "b3": 300.0 / 6, "b4": 0}
	for _, tc := range []struct {
		name, proto string
		dst         netip.AddrPort
	}{
		{"TCP/IPv4", "tcp", netip.AddrPortFrom(testbed.VIP4, testbed.HTTPPort)},
		{"UDP/IPv4", "udp", netip.AddrPortFrom(testbed.VIP4, testbed.UDPEchoPort)},
		{"TCP/IPv6", "tcp", netip.AddrPortFrom(testbed.VIP6, testbed.HTTPPort)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checkShares(t, fmt.Sprintf("%d %s flows to %s", flows, tc.proto, tc.dst), probe(t, b, tc.proto, tc.dst, flows), sixths)
		})
	}
}

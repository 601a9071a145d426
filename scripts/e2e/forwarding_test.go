package e2e

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	"xlb/scripts/testbed"
)

// flows is how many new connections (or UDP exchanges) a distribution
// check makes; see shareTolerance.
const flows = 600

// TestForwarding runs one xlb (native XDP, two rx queues and workers, AF_XDP
// in copy mode: veth has no zero-copy) on one bed and checks, with the
// kernel's TCP and UDP on both ends, what a client sees through it. The
// subtests share the bed and the process, and each makes its own traffic.
func TestForwarding(t *testing.T) {
	t.Parallel()
	b := upBed(t, testbed.Options{Prefix: "e2ef"})
	listenHost(t, b)
	startXLB(t, b, writeConfig(t, b))
	waitStatus(t, b, "healthy backends", allHealthy)
	c := b.Clients[0]

	t.Run("Mode", func(t *testing.T) {
		st := getStatus(t, b)
		if st.Runtime.XDPMode != "native" || len(st.Runtime.Queues) != 2 {
			t.Fatalf("/status: xdp_mode %q with %d queues, want native with 2", st.Runtime.XDPMode, len(st.Runtime.Queues))
		}
		if !xdpAttached(t, b) {
			t.Fatal("xlb is serving, but netlink shows no XDP program on " + b.LB.Iface)
		}
	})

	// Distribution: new flows over real kernel TCP and UDP split as the
	// config says, a third to each primary and none to the failover.
	for _, tc := range []struct {
		name, proto string
		dst         netip.AddrPort
	}{
		{"TCP/IPv4", "tcp", netip.AddrPortFrom(testbed.VIP4, testbed.HTTPPort)},
		{"UDP/IPv4", "udp", netip.AddrPortFrom(testbed.VIP4, testbed.UDPEchoPort)},
		{"TCP/IPv6", "tcp", netip.AddrPortFrom(testbed.VIP6, testbed.HTTPPort)},
		{"UDP/IPv6", "udp", netip.AddrPortFrom(testbed.VIP6, testbed.UDPEchoPort)},
	} {
		t.Run("Distribution/"+tc.name, func(t *testing.T) {
			checkShares(t, fmt.Sprintf("%d %s flows to %s", flows, tc.proto, tc.dst), probe(t, b, tc.proto, tc.dst, flows), thirds)
		})
	}

	// A kept-alive connection: 200 requests, each a round trip of several
	// segments, all answered by the backend of the first and tracked as
	// one connection.
	t.Run("KeptAlive", func(t *testing.T) {
		const requests = 200
		newConns := `xlb_service_new_connections_total{service="web"}`
		fwd := `xlb_service_forwarded_packets_total{service="web"}`
		before := metrics(t, b)
		conn, err := testbed.DialHTTP(c.NS, netip.AddrPortFrom(testbed.VIP4, testbed.HTTPPort), 2*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		first := ""
		for i := range requests {
			r, err := conn.Get(fmt.Sprintf("/req/%d", i), 2*time.Second)
			if err != nil {
				t.Fatalf("request %d on one connection: %v", i, err)
			}
			if r.Status != 200 || r.Backend == "" {
				t.Fatalf("request %d: status %d from %q", i, r.Status, r.Backend)
			}
			if first == "" {
				first = r.Backend
			} else if r.Backend != first {
				t.Fatalf("request %d answered by %s, the first by %s: the connection moved", i, r.Backend, first)
			}
		}
		after := metrics(t, b)
		if d := metric(t, after, newConns) - metric(t, before, newConns); d != 1 {
			t.Errorf("%s grew by %v over one connection, want 1", newConns, d)
		}
		if d := metric(t, after, fwd) - metric(t, before, fwd); d < requests {
			t.Errorf("%s grew by %v over %d requests, want at least %d", fwd, d, requests, requests)
		}
		t.Logf("%d requests on one connection, all answered by %s", requests, first)
	})

	// Two rx queues, two workers: the bridge spreads flows over the
	// balancer's queues (see scripts/README.md), and each worker decides
	// and forwards its share.
	t.Run("TwoQueues", func(t *testing.T) {
		before := metrics(t, b)
		probe(t, b, "udp", netip.AddrPortFrom(testbed.VIP4, testbed.UDPEchoPort), 64)
		after := metrics(t, b)
		for q := range 2 {
			for _, name := range []string{"xlb_queue_rx_packets_total", "xlb_queue_tx_packets_total"} {
				s := fmt.Sprintf(`%s{queue="%d"}`, name, q)
				if d := metric(t, after, s) - metric(t, before, s); d <= 0 {
					t.Errorf("%s grew by %v over 64 UDP flows: queue %d's worker carried nothing", s, d, q)
				}
			}
		}
		st := getStatus(t, b)
		for _, q := range st.Runtime.Queues {
			if q.Frames == 0 {
				t.Errorf("/status: worker of queue %d took no frames", q.Queue)
			}
		}
	})

	// The host's own traffic passes the XDP program to the kernel.
	t.Run("HostTraffic", func(t *testing.T) {
		before := getStatus(t, b).Runtime.XDPProgram["passed_not_vip"]
		hostTraffic(t, b)
		if !xdpAttached(t, b) {
			t.Fatal("no XDP program on " + b.LB.Iface + ": the check proved nothing")
		}
		if after := getStatus(t, b).Runtime.XDPProgram["passed_not_vip"]; after <= before {
			t.Errorf("xdp_program.passed_not_vip %d -> %d: the host's traffic did not pass through the program", before, after)
		}
	})

	for _, tc := range encapCases {
		t.Run("Encap/"+tc.name, func(t *testing.T) { checkEncapFrame(t, b, tc) })
	}
	// After the frame checks: with `xlb decap` on a backend, its capture
	// would see the frames decapsulated.
	t.Run("Decapsulated", func(t *testing.T) { checkDecapsulated(t, b) })
}

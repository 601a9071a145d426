package appliance

import (
	"io"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"
)

// TestRun_InterfaceAddressFollowed: an address added to xlb's interface
// while it runs becomes one of the balancer's own (FR8): VIP frames from
// it are dropped as source-is-self once xlb has re-read the addresses,
// and forwarded again once it is removed.
func TestRun_InterfaceAddressFollowed(t *testing.T) {
	n := newRunNS(t)
	p := startXLB(t, n, runConfig(t, t.TempDir(), n.bName))
	waitHealthy(t, n, p)
	ps := n.packetSocket(t)
	src := netip.MustParseAddr("10.201.7.7")
	if !forwardsFrom(t, n, ps, src, runVIP.String(), 41000) {
		t.Fatal("a frame from 10.201.7.7 was not forwarded before the address was xlb's")
	}
	addr := &netlink.Addr{IPNet: &net.IPNet{IP: net.ParseIP(src.String()), Mask: net.CIDRMask(32, 32)}}
	setAddr := func(add bool) {
		t.Helper()
		err := n.Do(func() error {
			l, err := netlink.LinkByName(n.bName)
			if err != nil {
				return err
			}
			if add {
				return netlink.AddrAdd(l, addr)
			}
			return netlink.AddrDel(l, addr)
		})
		if err != nil {
			t.Fatalf("address %s on %s (add %v): %v", src, n.bName, add, err)
		}
	}
	setAddr(true)
	sport := uint16(41001)
	waitFor(t, "frames from the added address dropped", func() bool {
		sport++
		return !forwardsFrom(t, n, ps, src, runVIP.String(), sport)
	})
	if d := selfDrops(t, n); d == 0 {
		t.Error("no source-is-self drop counted")
	}
	setAddr(false)
	waitFor(t, "frames from the removed address forwarded again", func() bool {
		sport++
		return forwardsFrom(t, n, ps, src, runVIP.String(), sport)
	})
}

// selfDrops sums xlb_queue_drop_packets_total{reason="source-is-self"}.
func selfDrops(t *testing.T, n *runNS) float64 {
	t.Helper()
	resp, err := n.httpClient().Get("http://127.0.0.1:9110/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for l := range strings.Lines(string(body)) {
		if strings.HasPrefix(l, "xlb_queue_drop_packets_total{") && strings.Contains(l, `reason="source-is-self"`) {
			if v, err := strconv.ParseFloat(strings.TrimSpace(l[strings.LastIndexByte(l, ' ')+1:]), 64); err == nil {
				sum += v
			}
		}
	}
	return sum
}

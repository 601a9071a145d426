package e2e

import (
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/vishvananda/netlink"

	"xlb/internal/nsx"
	"xlb/scripts/testbed"
)

// vipDrain is connection_draining_timeout_sec of TestM5_ReloadRemovesVIP.
const vipDrain = 4 * time.Second

// otherVIP4 is the VIP whose rule the reload keeps (so that it is not a
// reload to no rules at all); nothing is sent to it.
var otherVIP4 = netip.MustParseAddr("10.99.0.11")

// vipDrainConfig is reloadConfig's web service, 4 s of draining, with a
// rule for each VIP in vips (port 80).
func vipDrainConfig(b *testbed.Bed, vips ...netip.Addr) string {
	text := reloadConfig(b, "b1", "b2", "b3")
	text = strings.Replace(text, fmt.Sprintf("connection_draining_timeout_sec = %d", int(reloadDrain/time.Second)),
		fmt.Sprintf("connection_draining_timeout_sec = %d", int(vipDrain/time.Second)), 1)
	text = text[:strings.Index(text, "[[forwarding_rule]]")]
	for i, v := range vips {
		text += fmt.Sprintf("[[forwarding_rule]]\nname = \"web-%d\"\nip_address = %q\nip_protocol = \"TCP\"\nports = [\"%d\"]\nbackend_service = \"web\"\n\n",
			i, v, testbed.HTTPPort)
	}
	return text
}

// xdpVIPs reads the VIP map of the XDP program attached to b's balancer
// interface, from the kernel (not from xlb), sorted.
func xdpVIPs(t *testing.T, b *testbed.Bed) []netip.Addr {
	t.Helper()
	var vips []netip.Addr
	err := nsx.Do(b.LB.NS, func() error {
		l, err := netlink.LinkByName(b.LB.Iface)
		if err != nil {
			return err
		}
		x := l.Attrs().Xdp
		if x == nil || !x.Attached {
			return fmt.Errorf("no XDP program on %s", b.LB.Iface)
		}
		prog, err := ebpf.NewProgramFromID(ebpf.ProgramID(x.ProgId))
		if err != nil {
			return err
		}
		defer prog.Close()
		info, err := prog.Info()
		if err != nil {
			return err
		}
		ids, _ := info.MapIDs()
		for _, id := range ids {
			m, err := ebpf.NewMapFromID(id)
			if err != nil {
				return err
			}
			mi, err := m.Info()
			if err != nil || mi.Name != "xlb_vips" {
				m.Close()
				continue
			}
			var k [16]byte
			var v uint8
			it := m.Iterate()
			for it.Next(&k, &v) {
				vips = append(vips, netip.AddrFrom16(k).Unmap())
			}
			err = it.Err()
			m.Close()
			return err
		}
		return fmt.Errorf("no xlb_vips map among the program's maps %v", ids)
	})
	if err != nil {
		t.Fatalf("reading the XDP VIP map: %v", err)
	}
	slices.SortFunc(vips, func(a, b netip.Addr) int { return a.Compare(b) })
	return vips
}

// TestM5_ReloadRemovesVIP (M5, X2): a reload removes VIP4's rule (the one of
// another VIP stays) while kept-alive connections to VIP4 run. They keep answering,
// from their backends, for the 4 s drain; a new connection to VIP4 fails
// meanwhile and is counted as vip-draining, per service and queue; the
// VIP stays in the XDP program's map (read from the kernel) until the
// drain ends, and leaves it then.
func TestM5_ReloadRemovesVIP(t *testing.T) {
	t.Parallel()
	b := upBed(t, testbed.Options{Prefix: "e2evd", Backends: 3, Failover: -1})
	cfg := filepath.Join(t.TempDir(), "xlb.toml")
	write := func(text string) {
		t.Helper()
		if err := os.WriteFile(cfg, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(vipDrainConfig(b, testbed.VIP4, otherVIP4))
	p := startXLB(t, b, cfg)
	waitStatus(t, b, "b1-b3 healthy", allHealthy)
	both := []netip.Addr{testbed.VIP4, otherVIP4}
	if got := xdpVIPs(t, b); !slices.Equal(got, both) {
		t.Fatalf("XDP VIPs at start: %v, want %v", got, both)
	}

	web := netip.AddrPortFrom(testbed.VIP4, testbed.HTTPPort)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	stopTraffic := sync.OnceFunc(func() { close(stop); wg.Wait() })
	t.Cleanup(stopTraffic)
	kept, per := keepAlive(t, b, web, "kept-alive", 1, 40, &wg, stop)
	time.Sleep(300 * time.Millisecond)

	write(vipDrainConfig(b, otherVIP4))
	if out, err := exec.Command(xlbBin, "reload", "-c", cfg, "--pid", strconv.Itoa(p.cmd.Process.Pid)).CombinedOutput(); err != nil {
		t.Fatalf("xlb reload: %v\n%s", err, out)
	}
	waitMetric(t, b, "xlb_reload_success_total", 1)
	applied := lastReload(t, b)
	drainEnd := applied.Add(vipDrain)

	// During the drain: VIP4 is still steered; a new connection fails and
	// is counted.
	if got := xdpVIPs(t, b); !slices.Equal(got, both) && time.Now().Before(drainEnd) {
		t.Errorf("XDP VIPs during the drain: %v, want %v", got, both)
	}
	if r, err := testbed.HTTPGet(b.Clients[0].NS, web, "/", 1500*time.Millisecond); err == nil {
		t.Errorf("a new connection to the removed VIP was answered by %s", r.Backend)
	}
	drops := `xlb_service_drop_packets_total{reason="vip-draining",service="web"}`
	m := metrics(t, b)
	var queueDrops float64
	for k, v := range m {
		if strings.HasPrefix(k, "xlb_queue_drop_packets_total{") && strings.Contains(k, `reason="vip-draining"`) {
			queueDrops += v
		}
	}
	if m[drops] < 1 || queueDrops < m[drops] {
		t.Errorf("%s = %v, queues' vip-draining drops %v; want the new connection's SYN counted in both", drops, m[drops], queueDrops)
	}

	// The VIP leaves the map when the drain ends, not before.
	var goneAt time.Time
	for deadline := drainEnd.Add(10 * time.Second); ; {
		if got := xdpVIPs(t, b); slices.Equal(got, []netip.Addr{otherVIP4}) {
			goneAt = time.Now()
			break
		} else if !slices.Equal(got, both) {
			t.Fatalf("XDP VIPs: %v, want %v, then %v", got, both, otherVIP4)
		}
		if time.Now().After(deadline) {
			t.Fatalf("VIP4 still in the XDP map 10s after its drain ended")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if goneAt.Before(drainEnd) {
		t.Errorf("VIP4 left the XDP map %v before its drain ended", drainEnd.Sub(goneAt))
	}
	time.Sleep(500 * time.Millisecond)
	stopTraffic()

	var after int
	for _, k := range kept {
		k.mu.Lock()
		var during int
		for _, at := range k.ok {
			if at.After(applied) && at.Before(drainEnd) {
				during++
			}
		}
		if during == 0 {
			t.Errorf("a kept-alive connection to %s answered nothing while VIP4 drained (%d answers in all)", k.backend, len(k.ok))
		}
		if !k.failAt.IsZero() && k.failAt.Before(drainEnd) {
			t.Errorf("a kept-alive connection to %s failed %v after the reload, within the drain: %v", k.backend, k.failAt.Sub(applied), k.failErr)
		}
		if k.moved != "" {
			t.Errorf("a kept-alive connection to %s was answered by %s", k.backend, k.moved)
		}
		if k.failAt.IsZero() {
			after++
		}
		k.mu.Unlock()
	}
	t.Logf("kept-alive per backend %v; VIP4 left the map %v after the drain's end; %d of %d kept-alive connections still answered after",
		per, goneAt.Sub(drainEnd).Round(time.Millisecond), after, len(kept))
}

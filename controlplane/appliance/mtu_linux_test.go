package appliance

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// TestMaxMTU: what the AF_XDP frames hold after the kernel's and xlb's
// headroom (256 each) and an Ethernet header with a VLAN tag.
func TestMaxMTU(t *testing.T) {
	for size, want := range map[int]int{2048: 1518, 4096: 3566} {
		if got := maxMTU(size); got != want {
			t.Errorf("maxMTU(%d) = %d, want %d", size, got, want)
		}
	}
	if err := checkMTU("eth1", 1518, 2048, "x.toml"); err != nil {
		t.Errorf("MTU 1518, frame_size 2048: %v", err)
	}
	err := checkMTU("eth1", 3506, 2048, "x.toml")
	if err == nil || !strings.Contains(err.Error(), "MTU 3506") || !strings.Contains(err.Error(), "1518") ||
		!strings.Contains(err.Error(), "frame_size = 4096") {
		t.Errorf("MTU 3506, frame_size 2048: %v, want refused naming both and frame_size = 4096", err)
	}
	if err := checkMTU("eth1", 9000, 4096, "x.toml"); err == nil || strings.Contains(err.Error(), "frame_size = 4096,") {
		t.Errorf("MTU 9000, frame_size 4096: %v, want refused, only a lower MTU suggested", err)
	}
}

// TestMTUWatchCounts: a change above the limit is an error logged and
// counted once; back within, and changes within, are not counted.
func TestMTUWatchCounts(t *testing.T) {
	core, logs := observer.New(zap.InfoLevel)
	w := &mtuWatch{limit: 1518, log: zap.New(core)}
	w.mtu.Store(1500)
	for _, mtu := range []int{1500, 1518, 3000, 3000, 1500, 9000} {
		w.observe(mtu)
	}
	if got := w.tooLarge.Load(); got != 2 {
		t.Errorf("tooLarge = %d, want 2 (3000, then 9000)", got)
	}
	if got := w.mtu.Load(); got != 9000 {
		t.Errorf("mtu = %d, want 9000", got)
	}
	if n := logs.FilterLevelExact(zap.ErrorLevel).Len(); n != 2 {
		t.Errorf("%d error lines, want 2", n)
	}
}

// setMTU sets the balancer end's MTU in n.
func (n *runNS) setMTU(t *testing.T, mtu int) {
	t.Helper()
	err := n.Do(func() error {
		l, err := netlink.LinkByName(n.bName)
		if err != nil {
			return err
		}
		return netlink.LinkSetMTU(l, mtu)
	})
	if err != nil {
		t.Fatalf("MTU %d on %s: %v", mtu, n.bName, err)
	}
}

// TestRun_MTUOverFrameSizeRefused: on a veth with MTU 3506 (the most
// veth allows with XDP) and frame_size 2048, whose frames hold MTU 1518,
// xlb refuses to start with one line naming both, instead of losing the
// longer VIP frames as rx_dropped.
func TestRun_MTUOverFrameSizeRefused(t *testing.T) {
	n := newRunNS(t)
	n.setMTU(t, 3506)
	p := startXLB(t, n, runConfig(t, t.TempDir(), n.bName))
	if code := p.wait(t, time.Minute); code != 1 {
		t.Fatalf("exit %d, want 1", code)
	}
	lines := strings.Split(strings.TrimRight(p.stderr.String(), "\n"), "\n")
	if last := lines[len(lines)-1]; !strings.HasPrefix(last, "run: ") || !strings.Contains(last, "MTU 3506") || !strings.Contains(last, "MTU 1518 at most") {
		t.Errorf("last line %q: want the refusal naming MTU 3506 and 1518", last)
	}
	if n.xdpAttached(t) {
		t.Error("an XDP program is attached after the refusal")
	}
}

// TestRun_MTURaisedCounted: the MTU raised above what frame_size holds
// while xlb runs is logged as an error and counted in /status (and
// xlb_interface_mtu_too_large_total); xlb goes on.
func TestRun_MTURaisedCounted(t *testing.T) {
	n := newRunNS(t)
	p := startXLB(t, n, runConfig(t, t.TempDir(), n.bName))
	waitHealthy(t, n, p)
	type mtuStatus struct {
		Runtime struct {
			MTU         int    `json:"mtu"`
			MaxMTU      int    `json:"max_mtu"`
			MTUTooLarge uint64 `json:"mtu_too_large_changes"`
		} `json:"runtime"`
	}
	status := func() mtuStatus {
		resp, err := n.httpClient().Get("http://127.0.0.1:9110/status")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var st mtuStatus
		if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
			t.Fatal(err)
		}
		return st
	}
	if st := status(); st.Runtime.MTU != 1500 || st.Runtime.MaxMTU != 1518 || st.Runtime.MTUTooLarge != 0 {
		t.Fatalf("at start: %+v, want MTU 1500, max 1518, none too large", st.Runtime)
	}
	n.setMTU(t, 3000)
	waitFor(t, "the raised MTU counted", func() bool {
		st := status()
		return st.Runtime.MTU == 3000 && st.Runtime.MTUTooLarge == 1
	})
	// The line comes through a pipe, so it may reach the test after the
	// count: wait for it, as for the count.
	waitFor(t, "the error line for the raised MTU", func() bool {
		return strings.Contains(p.stderr.String(), `"level":"error"`) &&
			strings.Contains(p.stderr.String(), "interface MTU raised above what dataplane.frame_size holds")
	})
	// The snapshot follows it too (what encapsulation makes too big, X1).
	waitFor(t, "the MTU handed to the control plane", func() bool {
		return strings.Contains(p.stderr.String(), `"interface MTU followed`) && strings.Contains(p.stderr.String(), `"mtu":3000`)
	})
	select {
	case <-p.exited:
		t.Fatalf("xlb exited: %v", p.err)
	default:
	}
}

package reflector

import (
	"context"
	"errors"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"xlb/bench/baseline/internal/bltest"
	"xlb/dataplane/afxdp"
	"xlb/dataplane/xdpprog"

	"xlb/internal/nettest"
)

func TestMain(m *testing.M) { os.Exit(nettest.MainCheckFDs(m)) }

func start(tb testing.TB, cfg Config) *Reflector {
	tb.Helper()
	r, err := Start(context.Background(), cfg)
	if errors.Is(err, ebpf.ErrNotSupported) || errors.Is(err, afxdp.ErrUnsupported) {
		tb.Skipf("kernel lacks XDP or AF_XDP: %v", err)
	}
	if err != nil {
		tb.Fatalf("Start: %v", err)
	}
	tb.Cleanup(func() { r.Close() })
	return r
}

// TestReflects sends UDP frames of many flows and sizes (64..1500 bytes)
// from the peer to the VIP of a two-queue interface and checks that every
// one comes back out of it with the interface's source MAC, a backend's
// destination MAC in round-robin shares, and the rest of the frame
// unchanged; frames to another address are not reflected. Both queues
// work, the counters add up, the workers' CPU time is reported, and Close
// detaches the program.
func TestReflects(t *testing.T) {
	for _, mode := range []xdpprog.Mode{xdpprog.ModeNative, xdpprog.ModeGeneric} {
		t.Run(string(mode), func(t *testing.T) {
			queues := 2
			if mode == xdpprog.ModeGeneric {
				queues = 1 // generic XDP reports every frame on queue 0
			}
			bed := bltest.New(t, "blrf", bltest.Opts{XQueues: queues})
			r := start(t, Config{NS: bed.MidNS, Iface: bltest.XName, VIPs: []netip.Addr{bltest.VIP4}, Backends: bltest.Backends, Mode: mode})
			if r.Mode() != mode || len(r.BindModes()) != queues {
				t.Fatalf("mode %s with %d sockets, want %s with %d", r.Mode(), len(r.BindModes()), mode, queues)
			}
			const flows = 400
			counts := make([]int, len(bltest.Backends))
			for _, r := range bed.Reflect(t, flows) {
				counts[r.Backend]++
			}
			// Round-robin per queue: each queue's share is split within
			// one frame, so the totals are within one per queue.
			for i, c := range counts {
				if d := c - flows/len(counts); d < -queues || d > queues {
					t.Errorf("backend %d got %d of %d frames, not a round-robin share (%v)", i, c, flows, counts)
				}
			}
			st := r.Stats()
			if st.RX != flows || st.TX != flows || st.Drops != 0 {
				t.Errorf("stats rx %d tx %d drops %d, want %d, %d, 0", st.RX, st.TX, st.Drops, flows, flows)
			}
			if st.XDP.Redirected != flows || st.XDP.PassedNotVIP < 5 {
				t.Errorf("XDP stats %+v: want %d redirected and the 5 others passed", st.XDP, flows)
			}
			for _, q := range st.Queues {
				if q.RX == 0 {
					t.Errorf("queue %d received nothing (%+v)", q.Queue, st.Queues)
				}
			}
			if st.CPU <= 0 {
				t.Errorf("CPU time %v, want > 0", st.CPU)
			}
			t.Logf("%s: %v per backend, CPU %v, queues rx %v", mode, counts, st.CPU, func() (rx []uint64) {
				for _, q := range st.Queues {
					rx = append(rx, q.RX)
				}
				return
			}())
			if err := r.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			if bltest.XDPAttached(t, bed.MidNS, bltest.XName) {
				t.Error("XDP program still attached after Close")
			}
			if after := r.Stats(); after.RX != flows || after.CPU < st.CPU {
				t.Errorf("after Close: rx %d CPU %v, want %d and >= %v", after.RX, after.CPU, flows, st.CPU)
			}
		})
	}
}

// TestStopsWithContext: the workers end when Start's context ends, and
// Close still releases everything.
func TestStopsWithContext(t *testing.T) {
	bed := bltest.New(t, "blrf", bltest.Opts{})
	ctx, cancel := context.WithCancel(context.Background())
	r, err := Start(ctx, Config{NS: bed.MidNS, Iface: bltest.XName, VIPs: []netip.Addr{bltest.VIP4}, Backends: bltest.Backends})
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	done := make(chan struct{})
	go func() { r.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("workers still running 5s after the context ended")
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestStartRefuses: bad configurations and a busy interface fail, leaving
// nothing behind (the fd check of TestMain covers sockets and maps).
func TestStartRefuses(t *testing.T) {
	bed := bltest.New(t, "blrf", bltest.Opts{})
	ok := Config{NS: bed.MidNS, Iface: bltest.XName, VIPs: []netip.Addr{bltest.VIP4}, Backends: bltest.Backends}
	for name, c := range map[string]Config{
		"no backends": {NS: ok.NS, Iface: ok.Iface, VIPs: ok.VIPs},
		"no VIPs":     {NS: ok.NS, Iface: ok.Iface, Backends: ok.Backends},
		"CPUs":        {NS: ok.NS, Iface: ok.Iface, VIPs: ok.VIPs, Backends: ok.Backends, CPUs: []int{0, 1}},
		"queue twice": {NS: ok.NS, Iface: ok.Iface, VIPs: ok.VIPs, Backends: ok.Backends, Queues: []int{0, 0}},
	} {
		if _, err := Start(context.Background(), c); !errors.Is(err, ErrConfig) {
			t.Errorf("%s: %v, want ErrConfig", name, err)
		}
	}
	start(t, ok)
	if r2, err := Start(context.Background(), ok); err == nil {
		r2.Close()
		t.Fatal("a second reflector on the same interface started")
	}
	if !bltest.XDPAttached(t, bed.MidNS, bltest.XName) {
		t.Fatal("the failed Start detached the first program")
	}
}

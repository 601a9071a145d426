package xdpfwd

import (
	"context"
	"encoding/binary"
	"errors"
	"net/netip"
	"testing"

	"github.com/cilium/ebpf"

	"xlb/bench/baseline/internal/bltest"
	"xlb/dataplane/xdpprog"
)

func start(tb testing.TB, cfg Config) *Forwarder {
	tb.Helper()
	f, err := Start(context.Background(), cfg)
	if errors.Is(err, ebpf.ErrNotSupported) {
		tb.Skipf("kernel lacks XDP: %v", err)
	}
	if err != nil {
		tb.Fatalf("Start: %v", err)
	}
	tb.Cleanup(func() { f.Close() })
	return f
}

// TestVethForwards sends UDP frames of many flows and sizes from the peer
// to the VIP and checks that each comes back out of the same interface,
// rewritten to the backend BackendIndex names, payload intact, spread over
// every backend; other traffic is not sent back. Close detaches the
// program and the peer's pass program.
func TestVethForwards(t *testing.T) {
	for _, mode := range []xdpprog.Mode{xdpprog.ModeNative, xdpprog.ModeGeneric} {
		t.Run(string(mode), func(t *testing.T) {
			bed := bltest.New(t, "blxf", bltest.Opts{})
			f := start(t, Config{NS: bed.MidNS, Iface: bltest.XName, VIPs: []netip.Addr{bltest.VIP4}, Backends: bltest.Backends,
				Mode: mode, PeerNS: bed.GenNS, PeerIface: bltest.PName})
			if f.Mode() != mode {
				t.Fatalf("mode %s, want %s", f.Mode(), mode)
			}
			if !bltest.XDPAttached(t, bed.GenNS, bltest.PName) {
				t.Fatal("no pass program on the peer")
			}
			const flows = 300
			counts := make([]int, len(bltest.Backends))
			for _, r := range bed.Reflect(t, flows) {
				if want, _ := BackendIndex(r.Sent, len(bltest.Backends)); r.Backend != want {
					t.Fatalf("port %d: to backend %d (%s), want %d", binary.BigEndian.Uint16(r.Sent[34:]), r.Backend, netipHW(r.Got[:6]), want)
				}
				counts[r.Backend]++
			}
			for i, c := range counts {
				if c == 0 {
					t.Errorf("backend %d got no frame (%v)", i, counts)
				}
			}
			s, err := f.Stats()
			if err != nil {
				t.Fatal(err)
			}
			if s.TX != flows || s.PassNotVIP < 5 {
				t.Errorf("stats %+v: want TX %d and at least 5 not for the VIP", s, flows)
			}
			t.Logf("mode %s: %v per backend, %+v", f.Mode(), counts, s)

			if err := f.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			if bltest.XDPAttached(t, bed.MidNS, bltest.XName) {
				t.Error("an XDP program is still attached after Close")
			}
			if bltest.XDPAttached(t, bed.GenNS, bltest.PName) {
				t.Error("the peer's pass program is still attached after Close")
			}
		})
	}
}

// TestStartRefusesBusyInterface: a second forwarder on the same interface
// fails and leaves the first one working; a bad config is refused before
// anything is loaded.
func TestStartRefusesBusyInterface(t *testing.T) {
	bed := bltest.New(t, "blxf", bltest.Opts{})
	cfg := Config{NS: bed.MidNS, Iface: bltest.XName, VIPs: []netip.Addr{bltest.VIP4}, Backends: bltest.Backends}
	start(t, cfg)
	if f2, err := Start(context.Background(), cfg); err == nil {
		f2.Close()
		t.Fatal("a second Start on the same interface succeeded")
	}
	if !bltest.XDPAttached(t, bed.MidNS, bltest.XName) {
		t.Fatal("the failed Start detached the first program")
	}
	bad := cfg
	bad.Backends = nil
	if _, err := Start(context.Background(), bad); !errors.Is(err, ErrConfig) {
		t.Fatalf("Start without backends: %v, want ErrConfig", err)
	}
}

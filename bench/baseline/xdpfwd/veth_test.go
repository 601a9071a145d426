package xdpfwd

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"net/netip"
	"testing"
	"time"

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
			sent := map[uint16][]byte{}
			for i := range flows {
				sport := uint16(20000 + i)
				// 64..1500-byte frames: UDP payload 18..1472.
				fr := bltest.UDP(t, bltest.Client4, bltest.VIP4, sport, 53, 18+(i*97)%(1472-18+1))
				sent[sport] = fr
				bed.Send(t, fr)
			}
			for i := range 5 {
				bed.Send(t, bltest.UDP(t, bltest.Client4, netip.MustParseAddr("10.201.0.99"), uint16(30000+i), 53, 18))
			}
			ours := func(b []byte) bool { return len(b) > 42 && bytes.Equal(b[6:12], bltest.XMAC) }
			got := bed.Collect(t, flows, 5*time.Second, ours)
			// Anything more (a duplicate, a non-VIP frame) shows up soon.
			got = append(got, bed.Collect(t, 1, 200*time.Millisecond, ours)...)
			counts := make([]int, len(bltest.Backends))
			for _, g := range got {
				sport := binary.BigEndian.Uint16(g[34:])
				in, ok := sent[sport]
				if !ok {
					t.Fatalf("a frame came back that was not sent to the VIP (source port %d)", sport)
				}
				delete(sent, sport)
				want, _ := BackendIndex(in, len(bltest.Backends))
				if i := bltest.MACIndex(bltest.Backends, g[:6]); i != want {
					t.Fatalf("port %d: to backend %d (%s), want %d", sport, i, netipHW(g[:6]), want)
				}
				if !bytes.Equal(g[12:], in[12:]) {
					t.Fatalf("port %d: frame changed beyond the MACs", sport)
				}
				counts[want]++
			}
			if len(sent) > 0 {
				t.Fatalf("%d of %d frames did not come back", len(sent), flows)
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

package neigh

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"
	"golang.org/x/sys/unix"

	"xlb/internal/nettest"
	"xlb/internal/nsx"
)

// bed is a throwaway topology: namespace A (where the resolver runs) and
// namespace B (the "backend"), joined by a veth pair, with private
// addresses that exist only there. Everything is removed by t.Cleanup.
type bed struct {
	nsA, nsB   netns.NsHandle
	hA, hB     *netlink.Handle
	ifA, ifB   string
	macA, macB [6]byte
	a4, b4     netip.Addr
	a6, b6     netip.Addr
	has6       bool
}

// Addresses only inside the bed's namespaces.
var (
	nobody4 = netip.MustParseAddr("10.213.0.77")
	nobody6 = netip.MustParseAddr("fd00:213::77")
	far4    = netip.MustParseAddr("10.214.0.5") // behind B, via a route
	far6    = netip.MustParseAddr("fd00:214::5")
)

var bedSeq atomic.Uint32

func newBed(t *testing.T) *bed {
	t.Helper()
	nettest.RequireRoot(t)
	id := fmt.Sprintf("ngt%d%d", os.Getpid()%100000, bedSeq.Add(1)%100)
	b := &bed{
		ifA: id + "a", ifB: id + "b",
		a4: netip.MustParseAddr("10.213.0.1"), b4: netip.MustParseAddr("10.213.0.2"),
		a6: netip.MustParseAddr("fd00:213::1"), b6: netip.MustParseAddr("fd00:213::2"),
	}
	b.nsA, b.hA = newNS(t, id+"a")
	b.nsB, b.hB = newNS(t, id+"b")

	err := b.hA.LinkAdd(&netlink.Veth{
		LinkAttrs:     netlink.LinkAttrs{Name: b.ifA},
		PeerName:      b.ifB,
		PeerNamespace: netlink.NsFd(b.nsB),
	})
	if errors.Is(err, unix.EOPNOTSUPP) {
		t.Skip("kernel lacks veth:", err)
	}
	if err != nil {
		t.Fatalf("adding veth: %v", err)
	}
	_, err = os.Stat("/proc/sys/net/ipv6")
	b.has6 = err == nil
	if b.has6 {
		// No duplicate address detection, for the link-local addresses
		// too: IPv6 on the link is usable as soon as it is up.
		b.sysctl(t, b.nsA, map[string]string{"ipv6/conf/" + b.ifA + "/accept_dad": "0"})
		b.sysctl(t, b.nsB, map[string]string{"ipv6/conf/" + b.ifB + "/accept_dad": "0"})
	}
	b.macA = b.setup(t, b.hA, b.nsA, b.ifA, b.a4, b.a6)
	b.macB = b.setup(t, b.hB, b.nsB, b.ifB, b.b4, b.b6)
	b.waitReady(t, b.hA, b.ifA)
	b.waitReady(t, b.hB, b.ifB)
	// Fast neighbour machinery in A, so failures are found in a fraction
	// of a second (defaults: 1s per solicitation).
	b.sysctl(t, b.nsA, map[string]string{
		"ipv4/neigh/" + b.ifA + "/retrans_time_ms": "100",
		"ipv6/neigh/" + b.ifA + "/retrans_time_ms": "100",
	})
	return b
}

// setup gives one end its addresses, brings it up and returns its MAC.
func (b *bed) setup(t *testing.T, h *netlink.Handle, ns netns.NsHandle, name string, a4, a6 netip.Addr) [6]byte {
	t.Helper()
	link, err := h.LinkByName(name)
	if err != nil {
		t.Fatal(err)
	}
	add := func(a netip.Addr, bits int, flags int) {
		err := h.AddrAdd(link, &netlink.Addr{
			IPNet: &net.IPNet{IP: a.AsSlice(), Mask: net.CIDRMask(bits, a.BitLen())},
			Flags: flags,
		})
		if err != nil {
			t.Fatalf("adding %s to %s: %v", a, name, err)
		}
	}
	add(a4, 24, 0)
	if b.has6 {
		// No duplicate address detection: the address is usable at once.
		add(a6, 64, unix.IFA_F_NODAD)
	}
	if err := h.LinkSetUp(link); err != nil {
		t.Fatal(err)
	}
	mac, ok := macOf(link.Attrs().HardwareAddr)
	if !ok {
		t.Fatalf("%s has no MAC", name)
	}
	return mac
}

// waitReady waits for the carrier (the kernel's link watch reports it up to
// a second late) and, with it, IPv6 on the link: before that NDP gets no
// answer.
func (b *bed) waitReady(t *testing.T, h *netlink.Handle, name string) {
	t.Helper()
	eventually(t, patience, name+" not ready", func() bool {
		link, err := h.LinkByName(name)
		if err != nil || link.Attrs().OperState != netlink.OperUp {
			return false
		}
		if !b.has6 {
			return true
		}
		addrs, err := h.AddrList(link, netlink.FAMILY_V6)
		if err != nil {
			return false
		}
		for _, a := range addrs {
			if a.IP.IsLinkLocalUnicast() && a.Flags&unix.IFA_F_TENTATIVE == 0 {
				return true
			}
		}
		return false
	})
}

// newNS creates a named network namespace and a netlink handle in it.
func newNS(t *testing.T, name string) (netns.NsHandle, *netlink.Handle) {
	t.Helper()
	ns := nettest.NewNS(t, name)
	h, err := netlink.NewHandleAt(ns.Handle, unix.NETLINK_ROUTE)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	return ns.Handle, h
}

// sysctl writes net.* sysctls (keys relative to /proc/sys/net) inside ns.
func (b *bed) sysctl(t *testing.T, ns netns.NsHandle, kv map[string]string) {
	t.Helper()
	err := nsx.OnThread(func() error {
		if err := netns.Set(ns); err != nil {
			return err
		}
		var werr error
		for k, v := range kv {
			if err := os.WriteFile(filepath.Join("/proc/sys/net", k), []byte(v), 0); err != nil {
				werr = errors.Join(werr, err)
			}
		}
		return werr
	})
	if err != nil {
		t.Fatalf("sysctl: %v", err)
	}
}

// resolver starts a Resolver on A's end, logging to the test and to an
// observer the test can count entries of.
func (b *bed) resolver(t *testing.T, opts Options) (*Resolver, *observer.ObservedLogs) {
	t.Helper()
	core, logs := observer.New(zapcore.DebugLevel)
	opts.Logger = zap.New(zapcore.NewTee(core, zaptest.NewLogger(t).Core()))
	opts.Namespace = &b.nsA
	r, err := NewWithOptions(b.ifA, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r, logs
}

// setMAC changes B's MAC.
func (b *bed) setMAC(t *testing.T, mac [6]byte) {
	t.Helper()
	link, err := b.hB.LinkByName(b.ifB)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.hB.LinkSetHardwareAddr(link, net.HardwareAddr(mac[:])); err != nil {
		t.Fatalf("changing %s's MAC: %v", b.ifB, err)
	}
}

// addrs gives B's addresses, IPv6 too when the kernel has it.
func (b *bed) addrs() []netip.Addr {
	if b.has6 {
		return []netip.Addr{b.b4, b.b6}
	}
	return []netip.Addr{b.b4}
}

// patience bounds every wait for something the kernel or the resolver's
// goroutine will do: generous, so that a loaded machine and -race only
// make the tests slower. Tests whose point is that a change is seen
// before the periodic re-read set RefreshInterval far beyond it (an hour).
const patience = 30 * time.Second

// eventually polls cond until it holds or d passes.
func eventually(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func waitKnown(t *testing.T, r *Resolver, d time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	if err := r.Wait(ctx); err != nil {
		t.Fatalf("waiting for resolution: %v; states %+v", err, r.States())
	}
}

func stateOf(r *Resolver, a netip.Addr, routed bool) (State, bool) {
	for _, s := range r.States() {
		if s.Addr == a && s.Routed == routed {
			return s, true
		}
	}
	return State{}, false
}

func countLogs(logs *observer.ObservedLogs, msg string, backend netip.Addr) int {
	n := 0
	for _, e := range logs.FilterMessage(msg).All() {
		if e.ContextMap()["backend"] == backend.String() {
			n++
		}
	}
	return n
}

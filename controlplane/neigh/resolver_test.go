package neigh

import (
	"errors"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"xlb/config"
	"xlb/internal/nettest"
)

var newMAC = [6]byte{0x02, 0x00, 0x5e, 0x21, 0x3f, 0x01}

func TestResolvesOnLinkPeer(t *testing.T) {
	b := newBed(t)
	// Nothing has talked to B yet: A's table must not know it, so what we
	// see below is resolution we caused.
	if n, err := b.hA.NeighList(0, netlink.FAMILY_ALL); err != nil {
		t.Fatal(err)
	} else {
		for _, e := range n {
			if a, _ := addrOf(e.IP); a == b.b4 || a == b.b6 {
				t.Fatalf("A already has a neighbour entry for %s", a)
			}
		}
	}
	r, logs := b.resolver(t, Options{RefreshInterval: 100 * time.Millisecond})
	if r.LocalMAC() != b.macA {
		t.Errorf("LocalMAC = %x, want A's %x", r.LocalMAC(), b.macA)
	}
	var ts []Target
	for _, a := range b.addrs() {
		ts = append(ts, Target{Addr: a, Method: config.ForwardL2DSR})
	}
	r.Want(ts)
	waitKnown(t, r, patience)
	for _, a := range b.addrs() {
		if mac, ok := r.Lookup(a, config.ForwardL2DSR); !ok || mac != b.macB {
			t.Errorf("Lookup(%s) = %x, %v; want B's %x", a, mac, ok, b.macB)
		}
		if mac, ok := r.Resolve(config.Endpoint{IP: a}, config.ForwardL2DSR); !ok || mac != b.macB {
			t.Errorf("Resolve(%s) = %x, %v; want B's %x", a, mac, ok, b.macB)
		}
		want := b.a4
		if a.Is6() {
			want = b.a6
		}
		if src, ok := r.SourceFor(a); !ok || src != want {
			t.Errorf("SourceFor(%s) = %s, %v; want %s", a, src, ok, want)
		}
		if s, _ := stateOf(r, a, false); s.NextHop != a {
			t.Errorf("next hop of on-link %s = %s", a, s.NextHop)
		}
	}
	// A few re-reads later each resolution is still logged once.
	time.Sleep(350 * time.Millisecond)
	for _, a := range b.addrs() {
		if n := countLogs(logs, "backend MAC resolved", a); n != 1 {
			t.Errorf("%s: %d \"resolved\" logs, want 1", a, n)
		}
	}
	// Only followed targets are known: IPIP to B was never asked for.
	if _, ok := r.Lookup(b.b4, config.ForwardIPIP); ok {
		t.Error("Lookup of a target nobody asked for succeeded")
	}
}

func TestResolveFollowsWhatItIsAskedFor(t *testing.T) {
	b := newBed(t)
	r, _ := b.resolver(t, Options{RefreshInterval: time.Hour})
	// OnChange runs after the table is swapped: the callback that sees the
	// MAC is the one telling the control plane to rebuild with it.
	known := make(chan [6]byte, 1)
	var once sync.Once
	ep := config.Endpoint{Name: "b", IP: b.b4}
	r.OnChange(func() {
		if mac, ok := r.Lookup(ep.IP, config.ForwardL2DSR); ok {
			once.Do(func() { known <- mac })
		}
	})
	if mac, ok := r.Resolve(ep, config.ForwardL2DSR); ok {
		t.Fatalf("first Resolve = %x, true: nothing can be known yet", mac)
	}
	select {
	case mac := <-known:
		if mac != b.macB {
			t.Errorf("OnChange saw %x, want %x", mac, b.macB)
		}
	case <-time.After(patience):
		t.Fatalf("no OnChange with the MAC after Resolve of a new target; states %+v", r.States())
	}
	if mac, ok := r.Resolve(ep, config.ForwardL2DSR); !ok || mac != b.macB {
		t.Errorf("Resolve after OnChange = %x, %v; want %x", mac, ok, b.macB)
	}
}

func TestFollowsAnnouncedMACChange(t *testing.T) {
	b := newBed(t)
	// B announces a new MAC (gratuitous ARP, unsolicited NA); the re-read
	// is an hour away, so only the subscription can see it in time.
	b.sysctl(t, b.nsB, map[string]string{
		"ipv4/conf/" + b.ifB + "/arp_notify": "1",
	})
	if b.has6 {
		b.sysctl(t, b.nsB, map[string]string{"ipv6/conf/" + b.ifB + "/ndisc_notify": "1"})
	}
	r, _ := b.resolver(t, Options{RefreshInterval: time.Hour})
	var ts []Target
	for _, a := range b.addrs() {
		ts = append(ts, Target{Addr: a, Method: config.ForwardL2DSR})
	}
	r.Want(ts)
	waitKnown(t, r, patience)
	var changes atomic.Int32
	r.OnChange(func() { changes.Add(1) })

	// Readers race the update (go test -race): never a zero MAC, never
	// anything but B's old or new MAC.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var bad atomic.Value
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				for _, a := range b.addrs() {
					if mac, ok := r.Lookup(a, config.ForwardL2DSR); ok && mac != b.macB && mac != newMAC {
						bad.Store(mac)
					}
				}
			}
		}()
	}
	b.setMAC(t, newMAC)
	for _, a := range b.addrs() {
		eventually(t, patience, "no new MAC for "+a.String(), func() bool {
			mac, ok := r.Lookup(a, config.ForwardL2DSR)
			return ok && mac == newMAC
		})
	}
	close(stop)
	wg.Wait()
	if v := bad.Load(); v != nil {
		t.Errorf("Lookup returned %x", v)
	}
	if changes.Load() == 0 {
		t.Error("no OnChange for a changed MAC")
	}
}

func TestRefreshFindsUnannouncedMACChange(t *testing.T) {
	b := newBed(t)
	// B changes MAC silently (arp_notify, ndisc_notify off: the defaults).
	// Entries in A go stale fast, so the re-read's probe finds the old MAC
	// gone and the new one.
	kv := map[string]string{}
	for _, f := range []string{"ipv4", "ipv6"} {
		if f == "ipv6" && !b.has6 {
			continue
		}
		kv[f+"/neigh/"+b.ifA+"/base_reachable_time_ms"] = "200"
		kv[f+"/neigh/"+b.ifA+"/delay_first_probe_time"] = "0"
	}
	b.sysctl(t, b.nsA, kv)
	r, _ := b.resolver(t, Options{RefreshInterval: 200 * time.Millisecond, MinProbeInterval: 100 * time.Millisecond})
	var ts []Target
	for _, a := range b.addrs() {
		ts = append(ts, Target{Addr: a, Method: config.ForwardL2DSR})
	}
	r.Want(ts)
	waitKnown(t, r, patience)
	b.setMAC(t, newMAC)
	for _, a := range b.addrs() {
		eventually(t, patience, "no new MAC for "+a.String(), func() bool {
			mac, ok := r.Lookup(a, config.ForwardL2DSR)
			return ok && mac == newMAC
		})
	}
}

func TestNobodyAnswersIsUnknown(t *testing.T) {
	b := newBed(t)
	r, logs := b.resolver(t, Options{RefreshInterval: 100 * time.Millisecond, MinProbeInterval: 50 * time.Millisecond})
	nobody := []netip.Addr{nobody4}
	if b.has6 {
		nobody = append(nobody, nobody6)
	}
	var ts []Target
	for _, a := range nobody {
		ts = append(ts, Target{Addr: a, Method: config.ForwardL2DSR})
	}
	r.Want(ts)
	for _, a := range nobody {
		eventually(t, patience, a.String()+" never reported unanswered", func() bool {
			s, ok := stateOf(r, a, false)
			return ok && !s.Known && s.Reason == ReasonNoAnswer
		})
	}
	// Several solicit-and-fail rounds later: still unknown, never a MAC,
	// and the warning was given once.
	time.Sleep(time.Second)
	for _, a := range nobody {
		if mac, ok := r.Lookup(a, config.ForwardL2DSR); ok {
			t.Errorf("Lookup(%s) = %x, true", a, mac)
		}
		if s, _ := stateOf(r, a, false); s.Reason != ReasonNoAnswer || s.MAC != ([6]byte{}) {
			t.Errorf("%s: state %+v", a, s)
		}
		if n := countLogs(logs, "backend MAC unknown: not ready", a); n != 1 {
			t.Errorf("%s: %d warnings, want 1", a, n)
		}
	}
}

func TestBackendGoneBecomesUnknown(t *testing.T) {
	b := newBed(t)
	r, _ := b.resolver(t, Options{RefreshInterval: time.Hour, MinProbeInterval: 50 * time.Millisecond})
	r.Want([]Target{{Addr: b.b4, Method: config.ForwardL2DSR}})
	waitKnown(t, r, patience)
	var changes atomic.Int32
	r.OnChange(func() { changes.Add(1) })
	// B loses its address and A's entry is flushed: the resolver asks
	// again at once and nobody answers.
	link, err := b.hB.LinkByName(b.ifB)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.hB.AddrDel(link, &netlink.Addr{IPNet: &net.IPNet{IP: b.b4.AsSlice(), Mask: net.CIDRMask(24, 32)}}); err != nil {
		t.Fatal(err)
	}
	ifA, err := b.hA.LinkByName(b.ifA)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.hA.NeighDel(&netlink.Neigh{LinkIndex: ifA.Attrs().Index, IP: b.b4.AsSlice()}); err != nil {
		t.Fatal(err)
	}
	eventually(t, patience, "deleted backend still known", func() bool {
		s, _ := stateOf(r, b.b4, false)
		return !s.Known && s.Reason == ReasonNoAnswer
	})
	if changes.Load() == 0 {
		t.Error("no OnChange when the MAC was lost")
	}
}

func TestConfiguredMACOverrides(t *testing.T) {
	b := newBed(t)
	r, _ := b.resolver(t, Options{RefreshInterval: time.Hour})
	mac := [6]byte{0x02, 0, 0, 0, 0, 0x42}
	for _, m := range []config.ForwardingMethod{config.ForwardL2DSR, config.ForwardIPIP, config.ForwardGUE} {
		// Nobody holds the address: only the override can answer.
		got, ok := r.Resolve(config.Endpoint{IP: nobody4, MAC: mac, HasMAC: true}, m)
		if !ok || got != mac {
			t.Errorf("%v: Resolve with configured MAC = %x, %v", m, got, ok)
		}
		if got, ok := r.Resolve(config.Endpoint{IP: nobody4, HasMAC: true}, m); ok {
			t.Errorf("%v: configured zero MAC resolved to %x", m, got)
		}
	}
	// An override is not followed: nothing was solicited for it.
	if len(r.States()) != 0 {
		t.Errorf("states after overrides only: %+v", r.States())
	}
}

func TestNextHopThroughGateway(t *testing.T) {
	b := newBed(t)
	ifA, err := b.hA.LinkByName(b.ifA)
	if err != nil {
		t.Fatal(err)
	}
	type net4or6 struct {
		far, gw, src netip.Addr
		dst          string
	}
	cases := []net4or6{{far4, b.b4, b.a4, "10.214.0.0/24"}}
	if b.has6 {
		cases = append(cases, net4or6{far6, b.b6, b.a6, "fd00:214::/64"})
	}
	routes := map[netip.Addr]*netlink.Route{}
	for _, c := range cases {
		_, dst, _ := net.ParseCIDR(c.dst)
		rt := &netlink.Route{LinkIndex: ifA.Attrs().Index, Dst: dst, Gw: c.gw.AsSlice()}
		if err := b.hA.RouteAdd(rt); err != nil {
			t.Fatalf("route %s via %s: %v", c.dst, c.gw, err)
		}
		routes[c.far] = rt
	}
	// The re-read is an hour away: route changes are seen by subscription.
	r, _ := b.resolver(t, Options{RefreshInterval: time.Hour, RouteDebounce: 50 * time.Millisecond})
	var ts []Target
	for _, c := range cases {
		ts = append(ts, Target{Addr: c.far, Method: config.ForwardIPIP}, Target{Addr: c.far, Method: config.ForwardL2DSR})
	}
	r.Want(ts)
	for _, c := range cases {
		eventually(t, patience, "no next hop MAC for "+c.far.String(), func() bool {
			_, ok := r.Lookup(c.far, config.ForwardIPIP)
			return ok
		})
		for _, m := range []config.ForwardingMethod{config.ForwardIPIP, config.ForwardGUE} {
			if mac, ok := r.Lookup(c.far, m); !ok || mac != b.macB {
				t.Errorf("%v %s: next hop MAC %x, %v; want the gateway's %x", m, c.far, mac, ok, b.macB)
			}
		}
		if s, _ := stateOf(r, c.far, true); s.NextHop != c.gw {
			t.Errorf("%s: next hop %s, want %s", c.far, s.NextHop, c.gw)
		}
		if src, ok := r.SourceFor(c.far); !ok || src != c.src {
			t.Errorf("SourceFor(%s) = %s, %v; want %s", c.far, src, ok, c.src)
		}
		// L2_DSR cannot reach a backend behind a router.
		if mac, ok := r.Lookup(c.far, config.ForwardL2DSR); ok {
			t.Errorf("L2_DSR to %s behind a gateway: %x", c.far, mac)
		}
		if s, _ := stateOf(r, c.far, false); !strings.HasPrefix(s.Reason, "not on-link") {
			t.Errorf("L2_DSR to %s: reason %q", c.far, s.Reason)
		}
	}
	// The route goes away: the next hop is unknown promptly.
	for _, c := range cases {
		if err := b.hA.RouteDel(routes[c.far]); err != nil {
			t.Fatal(err)
		}
		eventually(t, patience, c.far.String()+" still has a next hop without a route", func() bool {
			s, _ := stateOf(r, c.far, true)
			return !s.Known && strings.HasPrefix(s.Reason, "no route")
		})
	}
}

func TestUnknownInterface(t *testing.T) {
	const name = "ngtnosuch0"
	_, err := New(name, nil)
	if !errors.Is(err, ErrNoInterface) || !strings.Contains(err.Error(), name) {
		t.Fatalf("New(%q) = %v; want ErrNoInterface naming it", name, err)
	}
	for _, bad := range []string{"", "ngt-far-too-long-a-name"} {
		if _, err := New(bad, nil); !errors.Is(err, ErrNoInterface) {
			t.Errorf("New(%q) = %v; want ErrNoInterface", bad, err)
		}
	}
}

func TestCloseReleasesEverything(t *testing.T) {
	b := newBed(t)
	before := nettest.OpenFDs()
	if before == nil {
		t.Fatal("cannot list /proc/self/fd")
	}
	r, err := NewWithOptions(b.ifA, Options{Namespace: &b.nsA, RefreshInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	r.Want([]Target{{Addr: b.b4, Method: config.ForwardL2DSR}})
	waitKnown(t, r, patience)
	r.Close()
	r.Close()
	if err := r.Wait(t.Context()); err != nil && !errors.Is(err, ErrClosed) {
		t.Errorf("Wait after Close = %v", err)
	}
	// Descriptors other goroutines close meanwhile are fine; one that New
	// opened and Close left open is a leak. The netlink library closes a
	// subscription's socket from a goroutine of its own, which may still
	// be doing so when Close returns (under -race, a few times in a
	// thousand): wait for them to go rather than read the table once.
	deadline := time.Now().Add(patience)
	for left := nettest.Leaked(before); len(left) > 0; left = nettest.Leaked(before) {
		if time.Now().After(deadline) {
			t.Fatalf("opened by New, still open %v after Close: %v", patience, left)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The last state still answers.
	if _, ok := r.Lookup(b.b4, config.ForwardL2DSR); !ok {
		t.Error("Lookup after Close lost the last state")
	}
}

func TestFlushedEntryIsResolvedAgain(t *testing.T) {
	b := newBed(t)
	// The re-read is an hour away: only the deletion may start the new
	// resolution.
	r, _ := b.resolver(t, Options{RefreshInterval: time.Hour, MinProbeInterval: 10 * time.Millisecond})
	r.Want([]Target{{Addr: b.b4, Method: config.ForwardL2DSR}})
	waitKnown(t, r, patience)
	var lost atomic.Bool
	r.OnChange(func() {
		if _, ok := r.Lookup(b.b4, config.ForwardL2DSR); !ok {
			lost.Store(true)
		}
	})
	ifA, err := b.hA.LinkByName(b.ifA)
	if err != nil {
		t.Fatal(err)
	}
	// As `ip neigh flush` or the kernel's garbage collector would.
	if err := b.hA.NeighDel(&netlink.Neigh{LinkIndex: ifA.Attrs().Index, IP: b.b4.AsSlice()}); err != nil {
		t.Fatal(err)
	}
	eventually(t, patience, "flushed entry never came back", func() bool {
		mac, ok := r.Lookup(b.b4, config.ForwardL2DSR)
		return lost.Load() && ok && mac == b.macB
	})
}

func TestLinkLocalPeer(t *testing.T) {
	b := newBed(t)
	if !b.has6 {
		t.Skip("kernel without IPv6")
	}
	link, err := b.hB.LinkByName(b.ifB)
	if err != nil {
		t.Fatal(err)
	}
	addrs, err := b.hB.AddrList(link, netlink.FAMILY_V6)
	if err != nil {
		t.Fatal(err)
	}
	var ll netip.Addr
	for _, a := range addrs {
		if a.IP.IsLinkLocalUnicast() {
			ll, _ = netip.AddrFromSlice(a.IP)
		}
	}
	if !ll.IsValid() {
		t.Fatalf("%s has no link-local address", b.ifB)
	}
	// Every interface routes fe80::/64: the lookup must be made on ours,
	// not on a second one (a veth to nowhere) that A also has.
	other := b.ifA + "x"
	if err := b.hA.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: other}, PeerName: b.ifA + "y"}); err != nil {
		t.Fatal(err)
	}
	b.sysctl(t, b.nsA, map[string]string{"ipv6/conf/" + other + "/accept_dad": "0", "ipv6/conf/" + b.ifA + "y/accept_dad": "0"})
	for _, n := range []string{other, b.ifA + "y"} {
		l, err := b.hA.LinkByName(n)
		if err != nil {
			t.Fatal(err)
		}
		if err := b.hA.LinkSetUp(l); err != nil {
			t.Fatal(err)
		}
	}
	b.waitReady(t, b.hA, other)
	// ... and preferred there, so a lookup not bound to ours picks it.
	ol, err := b.hA.LinkByName(other)
	if err != nil {
		t.Fatal(err)
	}
	_, fe80, _ := net.ParseCIDR("fe80::/64")
	if err := b.hA.RouteAdd(&netlink.Route{LinkIndex: ol.Attrs().Index, Dst: fe80, Priority: 1}); err != nil {
		t.Fatal(err)
	}
	// The zone, as a config might write it, does not matter.
	r, _ := b.resolver(t, Options{RefreshInterval: time.Hour})
	r.Want([]Target{{Addr: ll.WithZone(b.ifA), Method: config.ForwardL2DSR}})
	waitKnown(t, r, patience)
	if mac, ok := r.Lookup(ll, config.ForwardL2DSR); !ok || mac != b.macB {
		t.Errorf("Lookup(%s) = %x, %v; want %x", ll, mac, ok, b.macB)
	}
	if src, ok := r.SourceFor(ll); !ok || !src.IsLinkLocalUnicast() {
		t.Errorf("SourceFor(%s) = %s, %v; want A's link-local address", ll, src, ok)
	}
}

package xdpprog

import (
	"errors"
	"net/netip"
	"slices"
	"testing"

	"github.com/google/gopacket/layers"
)

func TestSetVIPs_Replaces(t *testing.T) {
	o := loadObjects(t, 1)
	a, b, c := vip4, vip6, other4
	tcp := func(dst netip.Addr) []byte {
		if dst.Is4() {
			return v4(t, nil, dst, layers.IPProtocolTCP)
		}
		return v6(t, nil, dst, layers.IPProtocolTCP, nil)
	}
	check := func(want ...netip.Addr) {
		t.Helper()
		got, err := o.ListVIPs()
		if err != nil {
			t.Fatalf("ListVIPs: %v", err)
		}
		slices.SortFunc(want, netip.Addr.Compare)
		if !slices.Equal(got, want) {
			t.Fatalf("VIPs = %v, want %v", got, want)
		}
		for _, addr := range []netip.Addr{a, b, c} {
			stat := statPassedNotVIP
			if slices.Contains(want, addr) {
				stat = statPassedNoSocket
			}
			run(t, o, tcp(addr), xdpPass, stat)
		}
	}

	setVIPs(t, o, a, b, a) // duplicates are one VIP
	check(a, b)
	setVIPs(t, o, b, c)
	check(b, c)
	setVIPs(t, o)
	check()
}

func TestSetVIPs_RejectsAndKeeps(t *testing.T) {
	o := loadObjects(t, 1)
	setVIPs(t, o, vip4)
	for _, bad := range []netip.Addr{
		{},
		netip.MustParseAddr("::ffff:10.200.0.1"),
		netip.MustParseAddr("fe80::1%eth0"),
	} {
		if err := o.SetVIPs([]netip.Addr{vip6, bad}); !errors.Is(err, ErrAddr) {
			t.Errorf("SetVIPs with %v: %v, want ErrAddr", bad, err)
		}
	}
	many := make([]netip.Addr, MaxVIPs+1)
	for i := range many {
		many[i] = netip.AddrFrom4([4]byte{10, 201, byte(i >> 8), byte(i)})
	}
	if err := o.SetVIPs(many); !errors.Is(err, ErrTooMany) {
		t.Errorf("SetVIPs with %d: %v, want ErrTooMany", len(many), err)
	}
	if got, _ := o.ListVIPs(); !slices.Equal(got, []netip.Addr{vip4}) {
		t.Errorf("after rejected updates VIPs = %v, want [%v]", got, vip4)
	}
}

// TestSetVIPs_FullReplacement swaps MaxVIPs addresses for MaxVIPs others:
// the map has room for both while the new ones are added first.
func TestSetVIPs_FullReplacement(t *testing.T) {
	o := loadObjects(t, 1)
	set := func(b byte) []netip.Addr {
		s := make([]netip.Addr, MaxVIPs)
		for i := range s {
			s[i] = netip.AddrFrom4([4]byte{10, b, byte(i >> 8), byte(i)})
		}
		return s
	}
	setVIPs(t, o, set(201)...)
	setVIPs(t, o, set(202)...)
	got, err := o.ListVIPs()
	if err != nil {
		t.Fatal(err)
	}
	if want := set(202); !slices.Equal(got, want) {
		t.Errorf("VIPs: %d addresses, first %v; want %d from %v", len(got), got[:1], len(want), want[0])
	}
}

// TestSetVIPs_WritesOnlyWhatChanged checks that SetVIPs writes the map
// only where the new set differs from the one it wrote last (a reload of
// 20,000 VIPs is then a few syscalls, not 40,000): an entry removed
// behind its back stays missing while the set keeps it, a new set adds
// and removes just the difference, and the map is read back when that
// record is lost, before the first SetVIPs.
func TestSetVIPs_WritesOnlyWhatChanged(t *testing.T) {
	o := loadObjects(t, 1)
	list := func() []netip.Addr {
		t.Helper()
		got, err := o.ListVIPs()
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	sorted := func(as ...netip.Addr) []netip.Addr {
		slices.SortFunc(as, netip.Addr.Compare)
		return as
	}
	// Written before any SetVIPs: read back and removed by the first.
	if err := o.VIPs.Update(other6.As16(), uint8(6), 0); err != nil {
		t.Fatal(err)
	}
	setVIPs(t, o, vip4, vip6)
	if got := list(); !slices.Equal(got, sorted(vip4, vip6)) {
		t.Fatalf("after the first SetVIPs: %v", got)
	}
	if err := o.VIPs.Delete(vip6.As16()); err != nil {
		t.Fatal(err)
	}
	setVIPs(t, o, vip4, vip6, other4)
	if got := list(); !slices.Equal(got, sorted(vip4, other4)) {
		t.Errorf("vip6, unchanged in the set, was written again: %v", got)
	}
	setVIPs(t, o, other4)
	if got := list(); !slices.Equal(got, []netip.Addr{other4}) {
		t.Errorf("after removing two: %v", got)
	}
}

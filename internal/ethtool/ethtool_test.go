package ethtool

import (
	"errors"
	"os"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"xlb/internal/nettest"
)

// TestOnVeth reads a fresh veth's channels and turns its offloads off and
// on again, in a namespace of the test's own.
func TestOnVeth(t *testing.T) {
	ns := nettest.NewNS(t, nettest.UniqueName("etht"))
	err := ns.Do(func() error {
		veth := &netlink.Veth{
			LinkAttrs: netlink.LinkAttrs{Name: "etht-a", NumRxQueues: 3, NumTxQueues: 1},
			PeerName:  "etht-b",
		}
		if err := netlink.LinkAdd(veth); err != nil {
			return err
		}
		n, err := RxQueues("etht-a")
		if err != nil {
			return err
		}
		if n != 3 {
			t.Errorf("RxQueues = %d, want 3", n)
		}
		if n, err := RxQueues("lo"); err != nil || n != 0 {
			t.Errorf("RxQueues(lo) = %d, %v; want 0 (no channel reporting), nil", n, err)
		}

		s, err := Open()
		if err != nil {
			return err
		}
		defer s.Close()
		for _, o := range []Offload{GSO, TSO, SG, TxChecksum} {
			if on, err := s.Offload("etht-a", o); err != nil || !on {
				t.Errorf("%s on a new veth: %v, %v; want on", o.Name, on, err)
			}
			if err := s.SetOffload("etht-a", o, false); err != nil {
				t.Error(err)
			}
		}
		for _, o := range []Offload{GSO, TSO, SG, TxChecksum} {
			if on, err := s.Offload("etht-a", o); err != nil || on {
				t.Errorf("%s after SetOffload(off): %v, %v", o.Name, on, err)
			}
		}
		if err := s.SetOffload("etht-a", GRO, true); err != nil {
			t.Error(err)
		}
		if on, err := s.Offload("etht-a", GRO); err != nil || !on {
			t.Errorf("gro after SetOffload(on): %v, %v", on, err)
		}
		if _, err := s.Channels("etht-none"); !errors.Is(err, unix.ENODEV) {
			t.Errorf("Channels of a missing interface: %v, want ENODEV", err)
		}
		if _, err := s.Offload("a-name-far-too-long", GSO); err == nil {
			t.Error("an interface name over IFNAMSIZ accepted")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestMain fails the run when a test leaves a socket open.
func TestMain(m *testing.M) { os.Exit(nettest.MainCheckFDs(m)) }

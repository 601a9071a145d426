package nettest

import (
	"encoding/binary"
	"os"
	"testing"

	"github.com/vishvananda/netns"
)

func TestHtons(t *testing.T) {
	// Stored as this host stores a uint16, Htons(v) reads as v big-endian.
	var b [2]byte
	binary.NativeEndian.PutUint16(b[:], Htons(0x1234))
	if b != [2]byte{0x12, 0x34} {
		t.Errorf("Htons(0x1234) is stored as % x, want 12 34", b)
	}
}

// TestNS: a namespace of the test's own, entered by Do on a thread that
// never comes back, and the leak check seeing a descriptor left open.
func TestNS(t *testing.T) {
	before := OpenFDs()
	ns := NewNS(t, UniqueName("ntt"))
	var inside netns.NsHandle
	err := ns.Do(func() (err error) {
		inside, err = netns.Get()
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	defer inside.Close()
	if !inside.Equal(ns.Handle) {
		t.Error("Do ran fn outside the namespace")
	}
	here, err := netns.Get()
	if err != nil {
		t.Fatal(err)
	}
	defer here.Close()
	if here.Equal(ns.Handle) {
		t.Error("the test's own thread is in the namespace")
	}
	if len(Leaked(before)) == 0 {
		t.Error("Leaked sees none of the handles open now")
	}
}

func TestMain(m *testing.M) { os.Exit(MainCheckFDs(m)) }

// Package nettest is the one home of the helpers that tests building
// network namespaces, loading XDP programs or opening raw sockets share:
// a root check that skips, a throwaway named namespace and a veth pair in
// it, IPv6 off, the open file descriptors of the process (for leak checks
// in TestMain), htons for AF_PACKET protocol numbers and reading the
// frames an AF_PACKET socket receives. Running code inside a namespace is
// internal/nsx's (OnThread, Do); NS.Do builds on it.
package nettest

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"xlb/internal/nsx"
)

// RequireRoot skips tb, saying why, unless the process runs as root (network
// namespaces, veth, XDP and AF_XDP need it; CI runs as root).
func RequireRoot(tb testing.TB) {
	tb.Helper()
	RequireRootTo(tb, "make network namespaces, veth pairs, load XDP and open AF_XDP sockets")
}

// RequireRootTo is RequireRoot for a test that needs root for something
// else, which it names ("chown a file to another user"): the one place a
// test asks whether it runs as root, so every skip reads the same.
func RequireRootTo(tb testing.TB, what string) {
	tb.Helper()
	if os.Geteuid() != 0 {
		tb.Skipf("needs root to %s; CI runs as root", what)
	}
}

var seq atomic.Int32

// UniqueName is prefix<pid>-<n>, n counting up in this process: a
// namespace name no other test (nor another test process) uses.
func UniqueName(prefix string) string {
	return fmt.Sprintf("%s%d-%d", prefix, os.Getpid(), seq.Add(1))
}

// NS is a named network namespace (/run/netns/Name) made by NewNS.
type NS struct {
	Name   string
	Handle netns.NsHandle
}

// NewNS creates the named namespace (skipping tb without root) and deletes
// it when the test ends. Creating it moves no thread of the caller's: the
// thread that made it ends with it (nsx.OnThread).
func NewNS(tb testing.TB, name string) *NS {
	tb.Helper()
	RequireRoot(tb)
	n := &NS{Name: name}
	err := nsx.OnThread(func() (err error) {
		n.Handle, err = netns.NewNamed(name) // moves this thread, which then ends
		return err
	})
	tb.Cleanup(func() {
		if n.Handle.IsOpen() {
			n.Handle.Close()
		}
		if err := netns.DeleteNamed(name); err != nil && !errors.Is(err, os.ErrNotExist) {
			tb.Errorf("deleting netns %s: %v", name, err)
		}
	})
	if err != nil {
		tb.Fatalf("creating netns %s: %v", name, err)
	}
	return n
}

// Do runs fn on a fresh OS thread inside the namespace (nsx.OnThread): the
// sockets, links and XDP attachments fn makes, and the processes it starts,
// belong to n; no other goroutine ever runs there.
func (n *NS) Do(fn func() error) error {
	return nsx.OnThread(func() error {
		if err := netns.Set(n.Handle); err != nil {
			return fmt.Errorf("entering netns %s: %w", n.Name, err)
		}
		return fn()
	})
}

// Veth is a veth pair for NS.AddVeth to make: Name and its peer PeerName,
// with the given MACs (nil: the kernel picks one at random) and queue
// counts (0: one). Native XDP on a veth needs Name's rx queues >= the
// peer's tx queues.
type Veth struct {
	Name, PeerName             string
	MAC, PeerMAC               net.HardwareAddr
	RxQueues, TxQueues         int
	PeerRxQueues, PeerTxQueues int
	// NoIPv6 turns IPv6 off in the namespace (default and all) before the
	// pair is made, so the kernel sends nothing on the links by itself (no
	// router solicitations, DAD or MLD reports).
	NoIPv6 bool
}

// AddVeth makes the pair v inside n, sets both ends up and returns their
// ifindexes (of v.Name, then of v.PeerName); any error fails tb.
func (n *NS) AddVeth(tb testing.TB, v Veth) (index, peerIndex int) {
	tb.Helper()
	one := func(q int) int {
		if q == 0 {
			return 1
		}
		return q
	}
	err := n.Do(func() error {
		if v.NoIPv6 {
			if err := DisableIPv6(); err != nil {
				return err
			}
		}
		h, err := netlink.NewHandle()
		if err != nil {
			return err
		}
		defer h.Close()
		veth := &netlink.Veth{
			LinkAttrs: netlink.LinkAttrs{Name: v.Name, HardwareAddr: v.MAC,
				NumRxQueues: one(v.RxQueues), NumTxQueues: one(v.TxQueues)},
			PeerName:         v.PeerName,
			PeerHardwareAddr: v.PeerMAC,
			PeerNumRxQueues:  uint32(one(v.PeerRxQueues)),
			PeerNumTxQueues:  uint32(one(v.PeerTxQueues)),
		}
		if err := h.LinkAdd(veth); err != nil {
			return fmt.Errorf("adding veth %s/%s: %w", v.Name, v.PeerName, err)
		}
		for _, x := range []struct {
			name string
			idx  *int
		}{{v.Name, &index}, {v.PeerName, &peerIndex}} {
			l, err := h.LinkByName(x.name)
			if err != nil {
				return err
			}
			if err := h.LinkSetUp(l); err != nil {
				return fmt.Errorf("%s up: %w", x.name, err)
			}
			*x.idx = l.Attrs().Index
		}
		return nil
	})
	if err != nil {
		tb.Fatalf("veth pair in %s: %v", n.Name, err)
	}
	return index, peerIndex
}

// DisableIPv6 turns IPv6 off (default and all) in the namespace of the
// calling thread: run it inside one (NS.Do, nsx.Do). Links made after it
// get no IPv6, so the kernel sends nothing on them by itself. A kernel
// without IPv6 is no error.
func DisableIPv6() error {
	for _, p := range []string{"default", "all"} {
		f := "/proc/sys/net/ipv6/conf/" + p + "/disable_ipv6"
		if err := os.WriteFile(f, []byte("1"), 0); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	return nil
}

// RecvIncoming reads one frame from fd, an AF_PACKET socket, into buf. ok
// is false, with no error, when there was none to read in time (EAGAIN:
// SO_RCVTIMEO passed), the read was interrupted (EINTR) or the frame is one
// this host sent (PACKET_OUTGOING): the caller reads again.
func RecvIncoming(fd int, buf []byte) (n int, ok bool, err error) {
	n, from, err := unix.Recvfrom(fd, buf, 0)
	if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	if ll, isLL := from.(*unix.SockaddrLinklayer); isLL && ll.Pkttype == unix.PACKET_OUTGOING {
		return 0, false, nil
	}
	return n, true, nil
}

// OpenFDs maps this process's open file descriptors to what they point at,
// leaving out the one that reads the list and the runtime's poller (epoll
// and eventfd, made on first use), which are no leak.
func OpenFDs() map[string]string {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return nil
	}
	fds := make(map[string]string, len(ents))
	for _, e := range ents {
		target, err := os.Readlink("/proc/self/fd/" + e.Name())
		if err != nil || strings.HasPrefix(target, "/proc/") || target == "anon_inode:[eventpoll]" || target == "anon_inode:[eventfd]" {
			continue
		}
		fds[e.Name()] = target
	}
	return fds
}

// Leaked names the descriptors open now that were not in before (from
// OpenFDs), as "fd N -> target".
func Leaked(before map[string]string) []string {
	var leaked []string
	for fd, target := range OpenFDs() {
		if _, ok := before[fd]; !ok {
			leaked = append(leaked, fmt.Sprintf("fd %s -> %s", fd, target))
		}
	}
	return leaked
}

// MainCheckFDs runs the tests and fails the run if they passed but left
// file descriptors open (sockets, maps, programs, links, namespace
// handles). Call it from TestMain: os.Exit(nettest.MainCheckFDs(m)).
func MainCheckFDs(m *testing.M) int {
	before := OpenFDs()
	code := m.Run()
	if code != 0 {
		return code
	}
	if leaked := Leaked(before); len(leaked) > 0 {
		fmt.Fprintf(os.Stderr, "leaked file descriptors:\n%s\n", strings.Join(leaked, "\n"))
		return 1
	}
	return 0
}

// Htons is v in network byte order, as AF_PACKET sockets take a protocol
// (socket(2)'s protocol, sockaddr_ll's sll_protocol).
func Htons(v uint16) uint16 {
	var b [2]byte
	binary.BigEndian.PutUint16(b[:], v)
	return binary.NativeEndian.Uint16(b[:])
}

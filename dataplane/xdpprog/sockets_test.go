package xdpprog

import (
	"errors"
	"slices"
	"testing"

	"github.com/asavie/xdp"
	"github.com/google/gopacket/layers"
	"golang.org/x/sys/unix"
)

// TestSockets_CloseUnregisters checks that closing the AF_XDP socket takes
// it out of the XSKMAP (the kernel does, on release): a crashed worker's
// queue passes VIP frames to the kernel again.
func TestSockets_CloseUnregisters(t *testing.T) {
	o := loadObjects(t, 1)
	setVIPs(t, o, vip4)
	ns := newTestNS(t, 1)
	s := newXSK(t, ns, ns.In, 0)
	if err := o.RegisterSocket(0, s.fd); err != nil {
		t.Fatalf("RegisterSocket: %v", err)
	}
	frame := v4(t, nil, vip4, layers.IPProtocolTCP)
	run(t, o, frame, xdpRedirect, statRedirected)
	unix.Close(s.fd)
	s.fd = -1
	run(t, o, frame, xdpPass, statPassedNoSocket)
}

func TestSockets_Bookkeeping(t *testing.T) {
	o := loadObjects(t, 4)
	ns := newTestNS(t, 4)
	s := newXSK(t, ns, ns.In, 2)

	if err := o.RegisterSocket(4, s.fd); !errors.Is(err, ErrQueue) {
		t.Errorf("RegisterSocket(4) on 4 queues: %v, want ErrQueue", err)
	}
	if err := o.RegisterSocket(-1, s.fd); !errors.Is(err, ErrQueue) {
		t.Errorf("RegisterSocket(-1): %v, want ErrQueue", err)
	}
	if err := o.UnregisterSocket(4); !errors.Is(err, ErrQueue) {
		t.Errorf("UnregisterSocket(4): %v, want ErrQueue", err)
	}
	// The kernel accepts only AF_XDP sockets with a UMEM and RX ring.
	udp, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(udp)
	if err := o.RegisterSocket(1, udp); err == nil {
		t.Error("RegisterSocket accepted a UDP socket")
	}

	if err := o.RegisterSocket(2, s.fd); err != nil {
		t.Fatalf("RegisterSocket(2): %v", err)
	}
	if err := o.RegisterSocket(2, s.fd); err != nil {
		t.Errorf("registering again: %v", err)
	}
	if qs, err := o.RegisteredQueues(); err != nil || !slices.Equal(qs, []int{2}) {
		t.Errorf("RegisteredQueues = %v, %v; want [2]", qs, err)
	}
	for range 2 { // unregistering is idempotent
		if err := o.UnregisterSocket(2); err != nil {
			t.Errorf("UnregisterSocket(2): %v", err)
		}
	}
	if qs, err := o.RegisteredQueues(); err != nil || len(qs) != 0 {
		t.Errorf("RegisteredQueues after unregistering = %v, %v; want none", qs, err)
	}
}

// TestSockets_Asavie drives registration through asavie/xdp's helper over
// our program and maps.
func TestSockets_Asavie(t *testing.T) {
	o := loadObjects(t, 2)
	setVIPs(t, o, vip6)
	ns := newTestNS(t, 1)
	s := newXSK(t, ns, ns.In, 0)
	p := asavieProgram(o)
	frame := v6(t, nil, vip6, layers.IPProtocolUDP, nil)

	if err := p.Register(0, s.fd); err != nil {
		t.Fatalf("asavie Register: %v", err)
	}
	run(t, o, frame, xdpRedirect, statRedirected)
	if qs, err := o.RegisteredQueues(); err != nil || !slices.Equal(qs, []int{0}) {
		t.Errorf("RegisteredQueues = %v, %v; want [0]", qs, err)
	}
	if err := p.Unregister(0); err != nil {
		t.Fatalf("asavie Unregister: %v", err) // fails on asavie's own Array map
	}
	run(t, o, frame, xdpPass, statPassedNoSocket)
}

// asavieProgram is asavie/xdp's helper over our objects, as code that
// drives asavie's sockets would build it (the comparison in dataplane/afxdp).
// Its Register and Unregister are sound here: they write the same two maps
// as RegisterSocket (Queues is a hash, so Unregister's Delete works; it
// fails for a queue that was never registered). Its Attach and Detach are
// not: they use the legacy netlink attachment, first removing whatever
// program the interface has, and sleep-poll until it is gone. asavie/xdp is
// a test-only dependency; production code never builds one.
func asavieProgram(o *Objects) *xdp.Program {
	return &xdp.Program{Program: o.Program, Queues: o.Queues, Sockets: o.Sockets}
}

func TestObjects_Closed(t *testing.T) {
	o := loadObjects(t, 1)
	if err := o.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := o.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if err := o.SetVIPs(nil); !errors.Is(err, ErrClosed) {
		t.Errorf("SetVIPs after Close: %v", err)
	}
	if err := o.RegisterSocket(0, 0); !errors.Is(err, ErrClosed) {
		t.Errorf("RegisterSocket after Close: %v", err)
	}
	if err := o.UnregisterSocket(0); !errors.Is(err, ErrClosed) {
		t.Errorf("UnregisterSocket after Close: %v", err)
	}
	if _, err := o.RegisteredQueues(); !errors.Is(err, ErrClosed) {
		t.Errorf("RegisteredQueues after Close: %v", err)
	}
	if _, err := o.Stats(); !errors.Is(err, ErrClosed) {
		t.Errorf("Stats after Close: %v", err)
	}
	if _, _, err := o.Attach(1, ModeAuto); !errors.Is(err, ErrClosed) {
		t.Errorf("Attach after Close: %v", err)
	}
}

package appliance

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vishvananda/netlink"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"xlb/dataplane"
)

// maxMTU is the largest interface MTU whose frames fit the AF_XDP frames
// of frameSize bytes: the kernel writes a received frame after its own
// XDP_PACKET_HEADROOM (256) and the umem headroom xlb registers
// (dataplane.Headroom, for encapsulation), and a frame is the MTU plus an
// Ethernet header with one 802.1Q tag. With frame_size 2048 that is 1518,
// with 4096 3566. The kernel drops a longer frame to a VIP before xlb sees
// it, counted as rx_dropped of the queue's socket: lost without a word.
func maxMTU(frameSize int) int {
	return frameSize - unix.XDP_PACKET_HEADROOM - dataplane.Headroom - vlanEthHeader
}

// checkMTU refuses to start on an interface whose MTU lets frames longer
// than frame_size holds arrive: clamping the MTU would change the host's
// own traffic behind the operator's back, so the operator chooses.
func checkMTU(ifname string, mtu, frameSize int, path string) error {
	limit := maxMTU(frameSize)
	if mtu <= limit {
		return nil
	}
	hint := "lower the interface's MTU"
	if frameSize < 4096 && mtu <= maxMTU(4096) {
		hint = "set dataplane.frame_size = 4096, or lower the interface's MTU"
	}
	return fmt.Errorf("interface %q has MTU %d, but dataplane.frame_size = %d holds frames of MTU %d at most (%d bytes of headroom and an 18-byte Ethernet and VLAN header): longer frames to a VIP would be dropped by the kernel; %s (ip link set %s mtu %d) (%s)",
		ifname, mtu, frameSize, limit, unix.XDP_PACKET_HEADROOM+dataplane.Headroom, hint, ifname, limit, path)
}

// mtuWatch follows the interface's MTU after start: an MTU raised above
// maxMTU is an error logged and counted (the frames longer than the frames
// hold are then lost as rx_dropped), not a reason to stop forwarding the
// others.
type mtuWatch struct {
	ifindex  int
	ifname   string
	limit    int
	mtu      atomic.Int64
	tooLarge atomic.Uint64 // changes that set an MTU above limit
	log      *zap.Logger
}

func newMTUWatch(link netlink.Link, frameSize int, log *zap.Logger) *mtuWatch {
	w := &mtuWatch{ifindex: link.Attrs().Index, ifname: link.Attrs().Name, limit: maxMTU(frameSize), log: log}
	w.mtu.Store(int64(link.Attrs().MTU))
	return w
}

// observe takes the MTU a link update carries.
func (w *mtuWatch) observe(mtu int) {
	old := int(w.mtu.Swap(int64(mtu)))
	if mtu == old {
		return
	}
	switch {
	case mtu > w.limit:
		w.tooLarge.Add(1)
		w.log.Error("interface MTU raised above what dataplane.frame_size holds: VIP frames longer than the frames hold are dropped by the kernel (rx_dropped); lower the MTU, or restart with a larger frame_size",
			zap.Int("mtu", mtu), zap.Int("was", old), zap.Int("max_mtu", w.limit))
	case old > w.limit:
		w.log.Info("interface MTU back within what dataplane.frame_size holds", zap.Int("mtu", mtu), zap.Int("max_mtu", w.limit))
	default:
		w.log.Info("interface MTU changed", zap.Int("mtu", mtu), zap.Int("was", old), zap.Int("max_mtu", w.limit))
	}
}

// mtuResubscribe spaces the renewals of a link subscription that failed.
const mtuResubscribe = time.Second

// run follows the interface's link updates until ctx ends; a subscription
// that fails (the library closes its channel) is renewed, and the MTU
// read again, since updates may have been lost.
func (w *mtuWatch) run(ctx context.Context) {
	for ctx.Err() == nil {
		ch, done := make(chan netlink.LinkUpdate, 64), make(chan struct{})
		err := netlink.LinkSubscribeWithOptions(ch, done, netlink.LinkSubscribeOptions{
			ErrorCallback: func(err error) {
				if ctx.Err() == nil {
					w.log.Warn("netlink link subscription failed; renewing it", zap.Error(err))
				}
			},
		})
		if err == nil {
			if l, err := netlink.LinkByIndex(w.ifindex); err == nil {
				w.observe(l.Attrs().MTU)
			}
			w.follow(ctx, ch)
			close(done)
			for range ch { // the library's goroutine ends once it sees done
			}
		} else {
			w.log.Warn("subscribing to link updates (the MTU check); retrying", zap.Error(err))
		}
		t := time.NewTimer(mtuResubscribe)
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
	}
}

func (w *mtuWatch) follow(ctx context.Context, ch <-chan netlink.LinkUpdate) {
	for {
		select {
		case <-ctx.Done():
			return
		case u, ok := <-ch:
			if !ok {
				return
			}
			if a := u.Attrs(); a != nil && a.Index == w.ifindex && u.Header.Type == unix.RTM_NEWLINK {
				w.observe(a.MTU)
			}
		}
	}
}

// watchMTU checks the interface's MTU now, then follows it until the
// teardown.
func (s *stack) watchMTU() error {
	d := &s.cfg.Dataplane
	if err := checkMTU(d.Interface, s.link.Attrs().MTU, d.FrameSize, s.cfg.Path); err != nil {
		return err
	}
	s.mtu = newMTUWatch(s.link, d.FrameSize, s.log)
	ctx, stop := context.WithCancel(s.life)
	var wg sync.WaitGroup
	wg.Go(func() { s.mtu.run(ctx) })
	s.undo = append(s.undo, func() { stop(); wg.Wait() })
	return nil
}

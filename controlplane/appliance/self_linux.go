package appliance

import (
	"context"
	"sync"
	"time"

	"go.uber.org/zap"

	"xlb/dataplane"
	"xlb/dataplane/worker"
)

// selfEvery spaces the re-reads of the interface's addresses: one netlink
// dump, cheap, and an address added or removed while xlb runs counts as
// its own (source-is-self, a subnet's broadcast: FR8) within it. The MTU
// the link watch last saw is handed on at the same pace.
const selfEvery = 2 * time.Second

// watchSelf re-reads the interface's addresses until the teardown and
// gives the control plane those that changed (ControlPlane.SetSelf), and
// the MTU when it changed (SetMTU).
func (s *stack) watchSelf() {
	ctx, stop := context.WithCancel(s.life)
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(selfEvery)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			if mtu := s.mtuNow(); mtu > 0 && s.cp.SetMTU(mtu, mtu+vlanEthHeader, worker.NowMs()) {
				s.log.Info("interface MTU followed: packets an encapsulation makes longer than it are answered too big (X1)", zap.Int("mtu", mtu))
			}
			prefixes, err := listPrefixes(s.link)
			if err != nil {
				continue // keep the last list: an empty one would let them in
			}
			self, bcast := dataplane.SelfAddrs(prefixes)
			if s.cp.SetSelf(self, bcast, worker.NowMs()) {
				s.log.Info("interface addresses changed: the sources counted as the balancer's own follow",
					zap.Int("addresses", len(self)), zap.Int("subnet_broadcasts", len(bcast)))
			}
		}
	})
	s.undo = append(s.undo, func() { stop(); wg.Wait() })
}

// mtuNow is the MTU the link watch last saw (0: none yet).
func (s *stack) mtuNow() int {
	if s.mtu == nil {
		return 0
	}
	return int(s.mtu.mtu.Load())
}

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
// its own (source-is-self, a subnet's broadcast: FR8) within it.
const selfEvery = 2 * time.Second

// watchSelf re-reads the interface's addresses until the teardown and
// gives the control plane those that changed (ControlPlane.SetSelf).
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

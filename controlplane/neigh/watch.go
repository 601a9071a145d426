package neigh

import (
	"time"

	"github.com/vishvananda/netlink"
	"go.uber.org/zap"
)

// subs are the two kernel subscriptions; a channel is nil while its
// subscription is down (the library closes it on a socket error, e.g. an
// overrun of the receive buffer).
type subs struct {
	neigh     chan netlink.NeighUpdate
	neighStop chan struct{}
	route     chan netlink.RouteUpdate
	routeStop chan struct{}
}

const subBuffer = 256

// subscribe opens both subscriptions.
func (r *Resolver) subscribe() (subs, error) {
	var s subs
	err := r.resubscribe(&s)
	if err != nil {
		s.close()
	}
	return s, err
}

// resubscribe opens what is down in s.
func (r *Resolver) resubscribe(s *subs) error {
	if s.neigh == nil {
		ch, stop := make(chan netlink.NeighUpdate, subBuffer), make(chan struct{})
		err := netlink.NeighSubscribeWithOptions(ch, stop, netlink.NeighSubscribeOptions{
			Namespace:     r.opts.Namespace,
			ErrorCallback: r.subError("neighbour"),
		})
		if err != nil {
			return err
		}
		s.neigh, s.neighStop = ch, stop
	}
	if s.route == nil {
		ch, stop := make(chan netlink.RouteUpdate, subBuffer), make(chan struct{})
		err := netlink.RouteSubscribeWithOptions(ch, stop, netlink.RouteSubscribeOptions{
			Namespace:     r.opts.Namespace,
			ErrorCallback: r.subError("route"),
		})
		if err != nil {
			return err
		}
		s.route, s.routeStop = ch, stop
	}
	return nil
}

func (r *Resolver) subError(what string) func(error) {
	return func(err error) {
		select {
		case <-r.done: // the socket closed under it: expected
		default:
			r.log.Warn("netlink "+what+" subscription failed; renewing it", zap.Error(err))
		}
	}
}

// neighDown and routeDown release a subscription whose channel the library
// closed: the stop channel closes its socket.
func (s *subs) neighDown() { close(s.neighStop); s.neigh, s.neighStop = nil, nil }
func (s *subs) routeDown() { close(s.routeStop); s.route, s.routeStop = nil, nil }

// close stops the subscriptions and drains their channels, as the library's
// goroutines block sending until they see their socket closed.
func (s *subs) close() {
	if s.neigh != nil {
		close(s.neighStop)
		for range s.neigh {
		}
	}
	if s.route != nil {
		close(s.routeStop)
		for range s.route {
		}
	}
}

// run is the resolver's goroutine: it applies neighbour updates as they
// come, re-reads routes shortly after they change, and re-reads everything
// on a Want or Resolve of something new and every RefreshInterval.
func (r *Resolver) run(s subs) {
	defer close(r.exited)
	defer s.close()
	tick := time.NewTicker(r.opts.RefreshInterval)
	defer tick.Stop()
	// One pending re-read "soon" at a time: a burst of route changes, or a
	// next hop to solicit again, costs one.
	var soon *time.Timer
	var soonC <-chan time.Time
	later := func(d time.Duration) {
		if soonC == nil {
			soon = time.NewTimer(d)
			soonC = soon.C
		}
	}
	for {
		select {
		case <-r.done:
			if soon != nil {
				soon.Stop()
			}
			return
		case <-r.kick:
			r.refresh()
		case <-tick.C:
			r.renew(&s)
		case u, ok := <-s.neigh:
			if !ok {
				// Updates may have been lost: renew, then re-read all.
				s.neighDown()
				r.renew(&s)
				continue
			}
			r.onNeigh(u)
			if d := r.w.refreshIn; d > 0 {
				r.w.refreshIn = 0
				later(d)
			}
		case _, ok := <-s.route:
			if !ok {
				s.routeDown()
				r.renew(&s)
				continue
			}
			later(r.opts.RouteDebounce)
		case <-soonC:
			soonC = nil
			r.refresh()
		}
	}
}

// renew reopens a subscription that is down, if any, then re-reads all.
func (r *Resolver) renew(s *subs) {
	if s.neigh == nil || s.route == nil {
		if err := r.resubscribe(s); err != nil {
			r.log.Warn("renewing netlink subscriptions; retrying at the next re-read", zap.Error(err))
		}
	}
	r.refresh()
}

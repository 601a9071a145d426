package neigh

import (
	"errors"
	"maps"
	"net"
	"net/netip"
	"time"

	"github.com/vishvananda/netlink"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// worker is the state the resolver's goroutine owns.
type worker struct {
	wanted   map[key]bool         // the set the routes were looked up for
	routes   map[key]route        // per target, from the last re-read
	nexthops map[netip.Addr]bool  // next hops to resolve (non-static targets)
	neigh    map[netip.Addr]entry // our interface's neighbour entries
	probed   map[netip.Addr]time.Time
	// refreshIn, when non-zero, asks run for a re-read that much later: a
	// next hop lost too soon after its last solicitation.
	refreshIn time.Duration
	linkWhy   string // non-empty: our interface is gone
}

func (w *worker) init() {
	w.wanted = map[key]bool{}
	w.routes = map[key]route{}
	w.nexthops = map[netip.Addr]bool{}
	w.neigh = map[netip.Addr]entry{}
	w.probed = map[netip.Addr]time.Time{}
}

// refresh is the full re-read: our link, a route per target, all neighbour
// entries of the interface; then it asks the kernel to confirm every next
// hop that is missing, failed or stale, and publishes.
func (r *Resolver) refresh() {
	w := &r.w
	r.mu.Lock()
	w.wanted = maps.Clone(r.wanted)
	r.mu.Unlock()

	local := r.tab.Load().local
	if link, err := r.h.LinkByIndex(r.ifindex); err != nil {
		w.linkWhy = "interface gone: " + err.Error()
	} else {
		w.linkWhy = ""
		if mac, ok := macOf(link.Attrs().HardwareAddr); ok {
			local = mac
		}
	}

	w.routes = make(map[key]route, len(w.wanted))
	w.nexthops = make(map[netip.Addr]bool, len(w.wanted))
	for k, static := range w.wanted {
		rt := r.lookupRoute(k)
		w.routes[k] = rt
		if rt.why == "" && !static {
			w.nexthops[rt.nexthop] = true
		}
	}

	if list, err := r.listNeigh(); err != nil {
		r.log.Warn("listing neighbours; keeping the last list", zap.Error(err))
	} else {
		w.neigh = list
	}

	now := time.Now()
	for a := range w.probed {
		if !w.nexthops[a] {
			delete(w.probed, a)
		}
	}
	if w.linkWhy == "" {
		for a := range w.nexthops {
			e, ok := w.neigh[a]
			if needsProbe(e, ok) {
				r.probe(a, now)
			}
		}
	}
	r.publish(local)
}

// listNeigh reads every neighbour entry of our interface, retrying a dump
// the kernel says was interrupted by a change.
func (r *Resolver) listNeigh() (map[netip.Addr]entry, error) {
	var list []netlink.Neigh
	var err error
	for range 3 {
		list, err = r.h.NeighList(r.ifindex, netlink.FAMILY_ALL)
		if !errors.Is(err, netlink.ErrDumpInterrupted) {
			break
		}
	}
	if err != nil {
		return nil, err
	}
	m := make(map[netip.Addr]entry, len(list))
	for i := range list {
		if a, ok := addrOf(list[i].IP); ok && list[i].LinkIndex == r.ifindex {
			m[a] = entryOf(&list[i])
		}
	}
	return m, nil
}

// onNeigh applies one neighbour update. A next hop whose entry was deleted
// is solicited again at once, or by a re-read as soon as MinProbeInterval
// allows; a failed one waits for the next periodic re-read.
func (r *Resolver) onNeigh(u netlink.NeighUpdate) {
	a, ok := addrOf(u.IP)
	if !ok || u.LinkIndex != r.ifindex {
		return
	}
	w := &r.w
	if u.Type == unix.RTM_DELNEIGH {
		delete(w.neigh, a)
	} else {
		w.neigh[a] = entryOf(&u.Neigh)
	}
	if !w.nexthops[a] {
		return
	}
	if u.Type == unix.RTM_DELNEIGH && w.linkWhy == "" {
		if wait := r.probe(a, time.Now()); wait > 0 && (w.refreshIn == 0 || wait < w.refreshIn) {
			w.refreshIn = wait
		}
	}
	r.publish(r.tab.Load().local)
}

func addrOf(ip net.IP) (netip.Addr, bool) {
	a, ok := netip.AddrFromSlice(ip)
	if !ok {
		return netip.Addr{}, false
	}
	return normalize(a), true
}

// publish builds the table from the worker's state, swaps it in, logs each
// transition once and, when a MAC or source changed, calls the OnChange
// functions.
func (r *Resolver) publish(local [6]byte) {
	w := &r.w
	old := r.tab.Load()
	states := make(map[key]State, len(w.wanted))
	for k, static := range w.wanted {
		s := State{Addr: k.addr, Routed: k.routed, Static: static}
		rt, ok := w.routes[k]
		switch {
		case w.linkWhy != "":
			s.Reason = w.linkWhy
		case !ok:
			s.Reason = ReasonResolving
		case rt.why != "":
			s.Reason = rt.why
		default:
			s.NextHop, s.Source = rt.nexthop, rt.src
			if static {
				s.Reason = ReasonStatic
			} else {
				e, found := w.neigh[rt.nexthop]
				s.MAC, s.Known, s.Reason = judge(e, found)
			}
		}
		prev, had := old.states[k]
		// A failed next hop solicited again is INCOMPLETE for a while: it
		// is still "no answer" until it answers, not a new transition.
		if had && !s.Known && s.Reason == ReasonResolving && prev.Reason == ReasonNoAnswer && prev.NextHop == s.NextHop {
			s.Reason = ReasonNoAnswer
		}
		states[k] = s
		r.logTransition(prev, had, s)
	}

	changed := local != old.local
	for k, s := range states {
		if prev := old.states[k]; prev.Known != s.Known || prev.MAC != s.MAC || prev.Source != s.Source {
			changed = true
		}
	}
	for k, prev := range old.states {
		if _, still := states[k]; !still && prev.Known {
			changed = true
		}
	}
	if local != old.local {
		r.log.Info("interface MAC changed", zap.Stringer("old", net.HardwareAddr(old.local[:])),
			zap.Stringer("new", net.HardwareAddr(local[:])))
	}

	r.tab.Store(&table{local: local, states: states})
	r.mu.Lock()
	close(r.pubCh)
	r.pubCh = make(chan struct{})
	fs := r.onChange
	r.mu.Unlock()
	if changed {
		for _, f := range fs {
			f()
		}
	}
}

func (r *Resolver) logTransition(prev State, had bool, s State) {
	if s.Static {
		return
	}
	fields := func(extra ...zap.Field) []zap.Field {
		f := []zap.Field{zap.Stringer("backend", s.Addr), zap.Bool("routed", s.Routed)}
		if s.NextHop.IsValid() && s.NextHop != s.Addr {
			f = append(f, zap.Stringer("next_hop", s.NextHop))
		}
		return append(f, extra...)
	}
	switch {
	case s.Known && (!had || !prev.Known):
		r.log.Info("backend MAC resolved", fields(zap.Stringer("mac", net.HardwareAddr(s.MAC[:])))...)
	case s.Known && prev.MAC != s.MAC:
		r.log.Info("backend MAC changed", fields(zap.Stringer("old", net.HardwareAddr(prev.MAC[:])),
			zap.Stringer("mac", net.HardwareAddr(s.MAC[:])))...)
	case s.Known:
	case had && !prev.Known && prev.Reason == s.Reason:
	case s.Reason == ReasonResolving && (!had || !prev.Known):
		// The normal start of every resolution: not worth a warning.
		r.log.Debug("backend MAC unknown", fields(zap.String("reason", s.Reason))...)
	default:
		r.log.Warn("backend MAC unknown: not ready", fields(zap.String("reason", s.Reason))...)
	}
}

package neigh

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"xlb/config"
)

// Errors New and Wait can return.
var (
	// ErrNoInterface: the named interface does not exist.
	ErrNoInterface = errors.New("no such interface")
	// ErrNotEthernet: the interface has no 6-byte hardware address.
	ErrNotEthernet = errors.New("interface has no Ethernet address")
	// ErrClosed: the resolver was closed.
	ErrClosed = errors.New("resolver closed")
)

// Options tune a Resolver. Zero fields take the defaults.
type Options struct {
	Logger *zap.Logger
	// Namespace is the network namespace the interface lives in; nil means
	// the caller's. The handle is borrowed (subscriptions are renewed in
	// it): keep it open until Close, then close it.
	Namespace *netns.NsHandle
	// RefreshInterval is the period of the full re-read (default 10s).
	RefreshInterval time.Duration
	// MinProbeInterval bounds how often one next hop is solicited
	// (default 1s).
	MinProbeInterval time.Duration
	// RouteDebounce is how long after a route change the routes are re-read,
	// so a burst of changes (a routing daemon's) costs one re-read
	// (default 1s).
	RouteDebounce time.Duration
}

func (o Options) withDefaults() Options {
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	if o.RefreshInterval <= 0 {
		o.RefreshInterval = 10 * time.Second
	}
	if o.MinProbeInterval <= 0 {
		o.MinProbeInterval = time.Second
	}
	if o.RouteDebounce <= 0 {
		o.RouteDebounce = time.Second
	}
	return o
}

// Resolver follows the destination MACs of a set of backends on one
// interface. Lookup, Resolve, SourceFor and LocalMAC read an immutable table
// swapped atomically, so they are cheap and safe for concurrent use; one
// goroutine owns everything else.
type Resolver struct {
	ifname  string
	ifindex int
	opts    Options
	log     *zap.Logger
	h       *netlink.Handle

	tab atomic.Pointer[table]

	mu       sync.Mutex
	wanted   map[key]bool // value: static (route only)
	onChange []func()
	pubCh    chan struct{} // closed and replaced at each publish

	kick      chan struct{}
	done      chan struct{}
	exited    chan struct{}
	closeOnce sync.Once

	w worker // owned by the goroutine in run
}

// table is one published state of the resolver.
type table struct {
	local  [6]byte
	states map[key]State
}

// New follows neighbours on the interface ifname in the caller's network
// namespace, with default options. It returns ErrNoInterface (wrapped) when
// there is no such interface and ErrNotEthernet when it has no MAC.
func New(ifname string, log *zap.Logger) (*Resolver, error) {
	return NewWithOptions(ifname, Options{Logger: log})
}

// NewWithOptions is New with options.
func NewWithOptions(ifname string, opts Options) (*Resolver, error) {
	opts = opts.withDefaults()
	if ifname == "" || len(ifname) >= unix.IFNAMSIZ {
		return nil, fmt.Errorf("neigh: interface %q: %w", ifname, ErrNoInterface)
	}
	var h *netlink.Handle
	var err error
	if opts.Namespace != nil {
		h, err = netlink.NewHandleAt(*opts.Namespace, unix.NETLINK_ROUTE)
	} else {
		h, err = netlink.NewHandle(unix.NETLINK_ROUTE)
	}
	if err != nil {
		return nil, fmt.Errorf("neigh: netlink: %w", err)
	}
	link, err := h.LinkByName(ifname)
	if err != nil {
		h.Close()
		var nf netlink.LinkNotFoundError
		if errors.As(err, &nf) || errors.Is(err, unix.ENODEV) {
			return nil, fmt.Errorf("neigh: interface %q: %w", ifname, ErrNoInterface)
		}
		return nil, fmt.Errorf("neigh: interface %q: %w", ifname, err)
	}
	mac, ok := macOf(link.Attrs().HardwareAddr)
	if !ok {
		h.Close()
		return nil, fmt.Errorf("neigh: interface %q: %w", ifname, ErrNotEthernet)
	}
	r := &Resolver{
		ifname:  ifname,
		ifindex: link.Attrs().Index,
		opts:    opts,
		log:     opts.Logger.With(zap.String("interface", ifname)),
		h:       h,
		wanted:  map[key]bool{},
		pubCh:   make(chan struct{}),
		kick:    make(chan struct{}, 1),
		done:    make(chan struct{}),
		exited:  make(chan struct{}),
	}
	r.w.init()
	r.tab.Store(&table{local: mac, states: map[key]State{}})
	// Subscribe before the first read, so no change falls between them.
	subs, err := r.subscribe()
	if err != nil {
		h.Close()
		return nil, fmt.Errorf("neigh: subscribing to updates: %w", err)
	}
	r.refresh()
	go r.run(subs)
	return r, nil
}

// Close stops following and releases the netlink sockets. Lookups keep
// answering the last state. The netlink library closes the subscriptions'
// sockets from its own goroutines: they may outlive Close by a moment.
func (r *Resolver) Close() error {
	r.closeOnce.Do(func() {
		close(r.done)
		<-r.exited
		r.h.Close()
	})
	return nil
}

// Want makes ts the set of targets followed, replacing the previous set;
// resolution of new ones starts at once. A target listed with several
// methods of the same kind (IPIP and GUE) is followed once; it is Static
// only if every listing is.
func (r *Resolver) Want(ts []Target) {
	m := make(map[key]bool, len(ts))
	for _, t := range ts {
		if !t.Addr.IsValid() {
			continue
		}
		k := keyOf(t.Addr, t.Method)
		if static, seen := m[k]; seen {
			m[k] = static && t.Static
		} else {
			m[k] = t.Static
		}
	}
	r.mu.Lock()
	r.wanted = m
	r.mu.Unlock()
	r.poke()
}

// Lookup gives the destination MAC for frames to ip sent with method, if
// known: for L2_DSR the address's own, for IPIP/GUE its next hop's. It never
// returns a zero MAC with ok. Only followed targets (Want, Resolve) are known.
func (r *Resolver) Lookup(ip netip.Addr, method config.ForwardingMethod) (mac [6]byte, ok bool) {
	s, found := r.tab.Load().states[keyOf(ip, method)]
	if !found || !s.Known || s.MAC == ([6]byte{}) {
		return [6]byte{}, false
	}
	return s.MAC, true
}

// Resolve is controlplane.Options.Resolve: the configured MAC when the
// endpoint has one, else Lookup. A target not yet followed is added to the
// set, so its resolution starts and OnChange fires when it is known.
func (r *Resolver) Resolve(ep config.Endpoint, method config.ForwardingMethod) ([6]byte, bool) {
	if ep.HasMAC {
		return ep.MAC, ep.MAC != [6]byte{}
	}
	if !ep.IP.IsValid() {
		return [6]byte{}, false
	}
	k := keyOf(ep.IP, method)
	if s, found := r.tab.Load().states[k]; found && !s.Static {
		return r.Lookup(ep.IP, method)
	}
	r.mu.Lock()
	static, found := r.wanted[k]
	if !found || static {
		r.wanted[k] = false
	}
	r.mu.Unlock()
	if !found || static {
		r.poke()
	}
	return [6]byte{}, false
}

// SourceFor gives the source address the kernel would use towards ip (the
// outer source of IPIP/GUE frames), if ip is followed and routed out of
// this interface.
func (r *Resolver) SourceFor(ip netip.Addr) (netip.Addr, bool) {
	t := r.tab.Load()
	for _, routed := range [2]bool{true, false} {
		if s, ok := t.states[key{addr: normalize(ip), routed: routed}]; ok && s.Source.IsValid() {
			return s.Source, true
		}
	}
	return netip.Addr{}, false
}

// LocalMAC is the interface's own MAC, the source of the frames we send.
func (r *Resolver) LocalMAC() [6]byte { return r.tab.Load().local }

// OnChange registers f, called (from the resolver's goroutine, with no lock
// held) after any MAC or source becomes known, changes or is lost, and after
// the interface's own MAC changes. f should return quickly; it may call any
// method of the Resolver but Close.
func (r *Resolver) OnChange(f func()) {
	r.mu.Lock()
	r.onChange = append(r.onChange, f)
	r.mu.Unlock()
}

// Wait returns nil once every followed non-static target is known, or
// ctx.Err(), or ErrClosed.
func (r *Resolver) Wait(ctx context.Context) error {
	for {
		r.mu.Lock()
		ch := r.pubCh // before the table: a publish after this wakes us
		var need []key
		for k, static := range r.wanted {
			if !static {
				need = append(need, k)
			}
		}
		r.mu.Unlock()
		t := r.tab.Load()
		all := true
		for _, k := range need {
			if !t.states[k].Known {
				all = false
				break
			}
		}
		if all {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		case <-r.done:
			return ErrClosed
		}
	}
}

func (r *Resolver) poke() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

func macOf(hw []byte) ([6]byte, bool) {
	var m [6]byte
	if len(hw) != 6 {
		return m, false
	}
	copy(m[:], hw)
	return m, true
}

package neigh

import (
	"cmp"
	"net/netip"
	"slices"

	"github.com/vishvananda/netlink"
)

// Reasons a target's MAC is unknown, as State.Reason says them.
const (
	ReasonResolving = "resolving"                  // no entry yet, or INCOMPLETE
	ReasonNoAnswer  = "no answer to ARP/NDP"       // FAILED
	ReasonZeroMAC   = "neighbour entry has no MAC" // an entry with a zero MAC
	ReasonStatic    = "MAC configured"             // Static: never resolved
)

// State is what the resolver knows about one target, for logs and /status.
type State struct {
	Addr netip.Addr
	// Routed: the MAC is the next hop's from a route lookup (IPIP/GUE);
	// otherwise the address's own, on-link (L2_DSR).
	Routed bool
	Static bool
	// NextHop is the address whose MAC frames get; Source the address the
	// kernel would send from. Both are invalid when there is no usable route.
	NextHop netip.Addr
	Source  netip.Addr
	MAC     [6]byte
	Known   bool
	// Reason says why the MAC is not known.
	Reason string
}

// States lists the followed targets, by address, on-link ones first.
func (r *Resolver) States() []State {
	t := r.tab.Load()
	out := make([]State, 0, len(t.states))
	for _, s := range t.states {
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b State) int {
		if c := a.Addr.Compare(b.Addr); c != 0 {
			return c
		}
		return cmp.Compare(boolInt(a.Routed), boolInt(b.Routed))
	})
	return out
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// entry is one kernel neighbour entry of our interface.
type entry struct {
	mac   [6]byte
	state int
}

func entryOf(n *netlink.Neigh) entry {
	var e entry
	if len(n.HardwareAddr) == 6 {
		copy(e.mac[:], n.HardwareAddr)
	}
	e.state = n.State
	return e
}

// judge says what an entry (ok: there is one) gives: a usable MAC, or why
// not. Only a non-zero MAC in a state the kernel would send with counts.
func judge(e entry, ok bool) (mac [6]byte, known bool, reason string) {
	switch {
	case !ok, e.state == netlink.NUD_NONE, e.state&netlink.NUD_INCOMPLETE != 0:
		return mac, false, ReasonResolving
	case e.state&netlink.NUD_FAILED != 0:
		return mac, false, ReasonNoAnswer
	case e.mac == [6]byte{}:
		return mac, false, ReasonZeroMAC
	}
	return e.mac, true, ""
}

// needsProbe says whether the kernel should be asked to (re)confirm an
// entry: missing, failed, or stale (possibly out of date, and only a probe
// would tell, as the kernel never sends to it itself).
func needsProbe(e entry, ok bool) bool {
	return !ok || e.state == netlink.NUD_NONE || e.state&(netlink.NUD_FAILED|netlink.NUD_STALE) != 0
}

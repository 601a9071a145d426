package nftlb

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"strings"
	"sync"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"xlb/internal/nsx"
)

// Algo is how the rule picks a backend for a new flow.
type Algo string

const (
	// AlgoNumgen: numgen inc mod N, round-robin over new flows.
	AlgoNumgen Algo = "numgen"
	// AlgoJhash: jhash of the 5-tuple mod N, the same backend for a
	// 5-tuple whatever came before.
	AlgoJhash Algo = "jhash"
)

// DefaultTable is the nftables table Start installs unless told otherwise.
const DefaultTable = "blnf_lb"

// ErrConfig is wrapped by Start for a configuration it refuses.
var ErrConfig = errors.New("nftlb: invalid configuration")

// ErrNoNft is returned by Start when the nft command is missing.
var ErrNoNft = errors.New("nft not installed (apt-get install nftables)")

// Backend is one destination: its address (the new destination IP) and
// MAC (the new destination MAC).
type Backend struct {
	IP  netip.Addr
	MAC net.HardwareAddr
}

// Config says where the balancer runs and where it sends.
type Config struct {
	// NS is the named network namespace (/run/netns/NS) of Iface; "" is
	// the caller's.
	NS string
	// Iface is the interface frames arrive on and leave by.
	Iface string
	// VIP is the address balanced, IPv4 or IPv6.
	VIP netip.Addr
	// Proto is "udp" (default) or "tcp".
	Proto string
	// Port is the destination port balanced; 0 balances every port.
	Port uint16
	// Backends are of the VIP's family.
	Backends []Backend
	// Algo is AlgoNumgen (default) or AlgoJhash.
	Algo Algo
	// Seed is the jhash seed (AlgoJhash).
	Seed uint32
	// Table is the nftables table name (default DefaultTable).
	Table string
}

func (c *Config) withDefaults() error {
	var bad []string
	if c.Iface == "" {
		bad = append(bad, "Iface is required")
	}
	if !c.VIP.IsValid() || c.VIP.Zone() != "" || c.VIP.Is4In6() {
		bad = append(bad, fmt.Sprintf("VIP %s: want a plain IPv4 or IPv6 address", c.VIP))
	}
	switch c.Proto {
	case "":
		c.Proto = "udp"
	case "udp", "tcp":
	default:
		bad = append(bad, fmt.Sprintf("proto %q: want udp or tcp", c.Proto))
	}
	if len(c.Backends) == 0 {
		bad = append(bad, "at least one backend is required")
	}
	for _, b := range c.Backends {
		if !b.IP.IsValid() || b.IP.Is4() != c.VIP.Is4() || b.IP.Zone() != "" || b.IP.Is4In6() {
			bad = append(bad, fmt.Sprintf("backend %s: want an address of the VIP's family", b.IP))
		}
		if len(b.MAC) != 6 {
			bad = append(bad, fmt.Sprintf("backend %s MAC %q: want 6 bytes", b.IP, b.MAC))
		}
	}
	switch c.Algo {
	case "":
		c.Algo = AlgoNumgen
	case AlgoNumgen, AlgoJhash:
	default:
		bad = append(bad, fmt.Sprintf("algo %q: want numgen or jhash", c.Algo))
	}
	if c.Table == "" {
		c.Table = DefaultTable
	}
	for _, r := range c.Table {
		if !(r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
			bad = append(bad, fmt.Sprintf("table %q: letters, digits and _ only", c.Table))
			break
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("%w: %s", ErrConfig, strings.Join(bad, "; "))
	}
	return nil
}

func (c *Config) family() string {
	if c.VIP.Is4() {
		return "ip"
	}
	return "ip6"
}

// Ruleset is the nft script Start runs for c (with defaults applied): it
// replaces a table of the same name in one transaction.
func (c *Config) ruleset() string {
	fam := c.family()
	var b strings.Builder
	fmt.Fprintf(&b, "table %s %s {}\ndelete table %s %s\n", fam, c.Table, fam, c.Table)
	fmt.Fprintf(&b, "table %s %s {\n\tchain pre {\n\t\ttype nat hook prerouting priority dstnat; policy accept;\n", fam, c.Table)
	match := fmt.Sprintf("%s daddr %s", fam, c.VIP)
	if c.Port != 0 {
		match += fmt.Sprintf(" %s dport %d", c.Proto, c.Port)
	} else {
		match += fmt.Sprintf(" meta l4proto %s", c.Proto)
	}
	pick := fmt.Sprintf("numgen inc mod %d", len(c.Backends))
	if c.Algo == AlgoJhash {
		pick = fmt.Sprintf("jhash %s saddr . %s sport . %s daddr . %s dport mod %d seed 0x%x",
			fam, c.Proto, fam, c.Proto, len(c.Backends), c.Seed)
	}
	elems := make([]string, len(c.Backends))
	for i, be := range c.Backends {
		elems[i] = fmt.Sprintf("%d : %s", i, be.IP)
	}
	fmt.Fprintf(&b, "\t\t%s counter dnat to %s map { %s }\n\t}\n}\n", match, pick, strings.Join(elems, ", "))
	return b.String()
}

// LB is an installed nftables balancer.
type LB struct {
	cfg     Config
	link    nsx.Link
	script  string
	sysctls []sysctl // values found, restored by Close
	routes  []netlink.Route
	neighs  []netlink.Neigh

	mu     sync.Mutex
	closed bool
}

type sysctl struct{ path, old string }

// Start sets forwarding up in cfg.NS and installs the table. On error it
// undoes what it did. ctx bounds the nft runs.
func Start(ctx context.Context, cfg Config) (_ *LB, err error) {
	if err := cfg.withDefaults(); err != nil {
		return nil, err
	}
	if _, err := exec.LookPath("nft"); err != nil {
		return nil, ErrNoNft
	}
	l, err := nsx.LookupLink(cfg.NS, cfg.Iface)
	if err != nil {
		return nil, fmt.Errorf("nftlb: %w", err)
	}
	lb := &LB{cfg: cfg, link: l, script: cfg.ruleset()}
	defer func() {
		if err != nil {
			lb.Close()
		}
	}()
	if err := detachXDP(cfg.NS, l); err != nil {
		return nil, err
	}
	if err := lb.setSysctls(); err != nil {
		return nil, err
	}
	if err := lb.setRoutes(); err != nil {
		return nil, err
	}
	if _, err := runNft(ctx, cfg.NS, lb.script, "-f", "-"); err != nil {
		return nil, fmt.Errorf("nftlb: installing table %s: %w", cfg.Table, err)
	}
	return lb, nil
}

func runNft(ctx context.Context, ns, stdin string, args ...string) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	out, err := nsx.Run(ns, stdin, "nft", args...)
	if errors.Is(err, nsx.ErrNoCommand) {
		return "", ErrNoNft
	}
	return out, err
}

// detachXDP removes an XDP program attached through netlink; one held by a
// BPF link belongs to a running program, and is an error.
func detachXDP(ns string, l nsx.Link) error {
	return nsx.Do(ns, func() error {
		nl, err := netlink.LinkByIndex(l.Index)
		if err != nil {
			return fmt.Errorf("nftlb: %w", err)
		}
		x := nl.Attrs().Xdp
		if x == nil || !x.Attached {
			return nil
		}
		// Detach in each mode the program may be in; the kernel refuses
		// the ones it is not in, and a BPF link's program in all.
		for _, flags := range []int{0, unix.XDP_FLAGS_SKB_MODE, unix.XDP_FLAGS_DRV_MODE} {
			_ = netlink.LinkSetXdpFdWithFlags(nl, -1, flags)
		}
		nl, err = netlink.LinkByIndex(l.Index)
		if err != nil {
			return fmt.Errorf("nftlb: %w", err)
		}
		if x := nl.Attrs().Xdp; x != nil && x.Attached {
			return fmt.Errorf("nftlb: %s has XDP program %d held by a BPF link (is xlb, the reflector or xdpfwd still running?)",
				nsx.Where(l.Name, ns), x.ProgId)
		}
		return nil
	})
}

func (lb *LB) setSysctls() error {
	c := &lb.cfg
	var want [][2]string
	if c.VIP.Is4() {
		want = [][2]string{
			{"net/ipv4/ip_forward", "1"},
			{"net/ipv4/conf/all/rp_filter", "0"},
			{"net/ipv4/conf/" + c.Iface + "/rp_filter", "0"},
			// A frame forwarded out of the interface it came in on
			// would make the kernel send ICMP redirects; either flag on
			// is enough for that.
			{"net/ipv4/conf/all/send_redirects", "0"},
			{"net/ipv4/conf/" + c.Iface + "/send_redirects", "0"},
		}
	} else {
		want = [][2]string{{"net/ipv6/conf/all/forwarding", "1"}}
	}
	for _, w := range want {
		old, err := nsx.ReadSysctl(c.NS, w[0])
		if err != nil {
			return fmt.Errorf("nftlb: reading %s: %w", w[0], err)
		}
		if old == w[1] {
			continue
		}
		if err := nsx.WriteSysctl(c.NS, w[0], w[1]); err != nil {
			return fmt.Errorf("nftlb: setting %s: %w", w[0], err)
		}
		lb.sysctls = append(lb.sysctls, sysctl{path: w[0], old: old})
	}
	return nil
}

func (lb *LB) setRoutes() error {
	c := &lb.cfg
	return nsx.Do(c.NS, func() error {
		fam := netlink.FAMILY_V4
		if c.VIP.Is6() {
			fam = netlink.FAMILY_V6
		}
		for _, be := range c.Backends {
			bits := be.IP.BitLen()
			r := netlink.Route{
				LinkIndex: lb.link.Index,
				Dst:       &net.IPNet{IP: be.IP.AsSlice(), Mask: net.CIDRMask(bits, bits)},
				Scope:     netlink.SCOPE_LINK,
			}
			if err := netlink.RouteReplace(&r); err != nil {
				return fmt.Errorf("nftlb: route to %s: %w", be.IP, err)
			}
			lb.routes = append(lb.routes, r)
			n := netlink.Neigh{
				LinkIndex:    lb.link.Index,
				Family:       fam,
				State:        netlink.NUD_PERMANENT,
				IP:           be.IP.AsSlice(),
				HardwareAddr: be.MAC,
			}
			if err := netlink.NeighSet(&n); err != nil {
				return fmt.Errorf("nftlb: neighbour %s: %w", be.IP, err)
			}
			lb.neighs = append(lb.neighs, n)
		}
		return nil
	})
}

// Backends is the index → backend mapping of the rule (a copy): frames of
// a flow the rule gives index i leave with Backends()[i]'s IP and MAC.
func (lb *LB) Backends() []Backend {
	out := make([]Backend, len(lb.cfg.Backends))
	for i, b := range lb.cfg.Backends {
		out[i] = Backend{IP: b.IP, MAC: append(net.HardwareAddr(nil), b.MAC...)}
	}
	return out
}

// Ruleset is the nft script Start ran.
func (lb *LB) Ruleset() string { return lb.script }

// Link is the interface the balancer forwards on.
func (lb *LB) Link() nsx.Link { return lb.link }

// Stats are what the table counted.
type Stats struct {
	// Flows is the number of new flows DNATed (the nat chain sees the
	// first packet of each; conntrack forwards the rest).
	Flows uint64
	// Bytes are those first packets' bytes.
	Bytes uint64
}

// Stats reads the rule's counter (nft -j list table).
func (lb *LB) Stats(ctx context.Context) (Stats, error) {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	if lb.closed {
		return Stats{}, errors.New("nftlb: closed")
	}
	out, err := runNft(ctx, lb.cfg.NS, "", "-j", "list", "table", lb.cfg.family(), lb.cfg.Table)
	if err != nil {
		return Stats{}, fmt.Errorf("nftlb: %w", err)
	}
	return parseCounter(out)
}

func parseCounter(js string) (Stats, error) {
	var doc struct {
		Nftables []struct {
			Rule *struct {
				Expr []struct {
					Counter *struct {
						Packets uint64 `json:"packets"`
						Bytes   uint64 `json:"bytes"`
					} `json:"counter"`
				} `json:"expr"`
			} `json:"rule"`
		} `json:"nftables"`
	}
	if err := json.Unmarshal([]byte(js), &doc); err != nil {
		return Stats{}, fmt.Errorf("nftlb: reading nft's JSON: %w", err)
	}
	for _, o := range doc.Nftables {
		if o.Rule == nil {
			continue
		}
		for _, e := range o.Rule.Expr {
			if e.Counter != nil {
				return Stats{Flows: e.Counter.Packets, Bytes: e.Counter.Bytes}, nil
			}
		}
	}
	return Stats{}, errors.New("nftlb: no counter in the table")
}

// Close deletes the table, the routes, the neighbour entries and the
// conntrack entries to the VIP, and restores the sysctls. It goes on past
// errors and returns them all; it is idempotent.
func (lb *LB) Close() error {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	if lb.closed {
		return nil
	}
	lb.closed = true
	c := &lb.cfg
	var errs []error
	if _, err := runNft(context.Background(), c.NS, fmt.Sprintf("table %s %s {}\ndelete table %s %s\n", c.family(), c.Table, c.family(), c.Table), "-f", "-"); err != nil {
		errs = append(errs, fmt.Errorf("deleting table %s: %w", c.Table, err))
	}
	errs = append(errs, nsx.Do(c.NS, func() error {
		var errs []error
		for _, r := range lb.routes {
			if err := netlink.RouteDel(&r); err != nil && !errors.Is(err, unix.ESRCH) {
				errs = append(errs, fmt.Errorf("deleting route to %s: %w", r.Dst, err))
			}
		}
		for _, n := range lb.neighs {
			if err := netlink.NeighDel(&n); err != nil && !errors.Is(err, unix.ENOENT) {
				errs = append(errs, fmt.Errorf("deleting neighbour %s: %w", n.IP, err))
			}
		}
		fam := netlink.InetFamily(unix.AF_INET)
		if c.VIP.Is6() {
			fam = unix.AF_INET6
		}
		f := &netlink.ConntrackFilter{}
		if err := f.AddIP(netlink.ConntrackOrigDstIP, c.VIP.AsSlice()); err == nil {
			if _, err := netlink.ConntrackDeleteFilters(netlink.ConntrackTable, fam, f); err != nil {
				errs = append(errs, fmt.Errorf("deleting conntrack entries to %s: %w", c.VIP, err))
			}
		}
		return errors.Join(errs...)
	}))
	for i := len(lb.sysctls) - 1; i >= 0; i-- {
		s := lb.sysctls[i]
		if err := nsx.WriteSysctl(c.NS, s.path, s.old); err != nil {
			errs = append(errs, fmt.Errorf("restoring %s: %w", s.path, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("nftlb: closing: %w", err)
	}
	return nil
}

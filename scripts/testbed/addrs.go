package testbed

import (
	"fmt"
	"net"
	"net/netip"
)

// The addresses of scripts/testbed.sh, which owns them; a test checks that
// the two agree. They are private ranges, used only inside the namespaces.
var (
	VIP4 = netip.MustParseAddr("10.99.0.10")
	VIP6 = netip.MustParseAddr("fd00:99::10")

	// The balancer's addresses: the clients' next hop to the VIPs, and its
	// address on the backends' subnet (health checks leave from it).
	LBClientSide4  = netip.MustParseAddr("10.98.0.2")
	LBClientSide6  = netip.MustParseAddr("fd00:98::2")
	LBBackendSide4 = netip.MustParseAddr("10.97.0.2")
	LBBackendSide6 = netip.MustParseAddr("fd00:97::2")
	LBMAC          = net.HardwareAddr{0x02, 0x97, 0, 0, 0, 0x02}

	// The fleet bed's router: its address on the instances' and backends'
	// segment (the instances' BGP neighbor, the backends' way back to the
	// clients) and on the clients' (their default route).
	RouterSegment4    = netip.MustParseAddr("10.97.0.1")
	RouterSegment6    = netip.MustParseAddr("fd00:97::1")
	RouterClientSide4 = netip.MustParseAddr("10.98.0.1")
	RouterClientSide6 = netip.MustParseAddr("fd00:98::1")
)

// The fleet bed's AS numbers: the router's (BIRD), and the one every
// instance shares.
const (
	RouterASN   = 65000
	InstanceASN = 65010
)

// Ports the backends' servers listen on, IPv4 and IPv6.
const (
	HTTPPort    = 80
	HealthPort  = 8080
	UDPEchoPort = 53
)

// Host is one namespace with its one interface on the bridge.
type Host struct {
	Name  string // c1, lb, b1, ...
	NS    string // namespace, P-c1
	Iface string // interface in NS, P-c1eth
	MAC   net.HardwareAddr
	Addr4 netip.Addr // on the clients' or the backends' subnet
	Addr6 netip.Addr
}

// Backend is a backend host; failover backends come after the primaries.
type Backend struct {
	Host
	Failover bool
	Weight   int // reported by /healthz; -1 when the bed was made without weights
}

func clientHost(prefix string, i int) Host {
	return Host{
		Name:  fmt.Sprintf("c%d", i),
		NS:    fmt.Sprintf("%s-c%d", prefix, i),
		Iface: fmt.Sprintf("%s-c%deth", prefix, i),
		MAC:   net.HardwareAddr{0x02, 0x98, 0, 0, 0, byte(i)},
		Addr4: netip.AddrFrom4([4]byte{10, 98, 0, byte(100 + i)}),
		Addr6: netip.MustParseAddr(fmt.Sprintf("fd00:98::%d", 100+i)),
	}
}

func backendHost(prefix string, i int) Host {
	return Host{
		Name:  fmt.Sprintf("b%d", i),
		NS:    fmt.Sprintf("%s-b%d", prefix, i),
		Iface: fmt.Sprintf("%s-b%deth", prefix, i),
		MAC:   net.HardwareAddr{0x02, 0x97, 0, 0, 0, byte(10 + i)},
		Addr4: netip.AddrFrom4([4]byte{10, 97, 0, byte(10 + i)}),
		Addr6: netip.MustParseAddr(fmt.Sprintf("fd00:97::%d", 10+i)),
	}
}

// instanceHost is the fleet bed's balancer instance i (1..8).
func instanceHost(prefix string, i int) Host {
	return Host{
		Name:  fmt.Sprintf("l%d", i),
		NS:    fmt.Sprintf("%s-l%d", prefix, i),
		Iface: fmt.Sprintf("%s-l%deth", prefix, i),
		MAC:   net.HardwareAddr{0x02, 0x97, 0, 0, 0x01, byte(i)},
		Addr4: netip.AddrFrom4([4]byte{10, 97, 0, byte(1 + i)}),
		Addr6: netip.MustParseAddr(fmt.Sprintf("fd00:97::%d", 1+i)),
	}
}

// routerHost is the fleet bed's router, by its interface on the segment.
func routerHost(prefix string) Host {
	return Host{
		Name:  "r",
		NS:    prefix + "-r",
		Iface: prefix + "-reth",
		MAC:   net.HardwareAddr{0x02, 0x97, 0, 0, 0, 0x01},
		Addr4: RouterSegment4,
		Addr6: RouterSegment6,
	}
}

func lbHost(prefix string) Host {
	return Host{
		Name:  "lb",
		NS:    prefix + "-lb",
		Iface: prefix + "-lbeth",
		MAC:   LBMAC,
		Addr4: LBClientSide4,
		Addr6: LBClientSide6,
	}
}

package e2e

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"xlb/scripts/testbed"
)

// GUE destination port of the config: not fou's usual 5555, so that the
// frame checks see the configured value arrive.
const guePort = 6080

// UDP ports of the VIPs whose services encapsulate; each has one backend,
// so the frame checks know where to capture.
const (
	portIPIP4 = 7001 // VIP4, IPIP to b1
	portGUE4  = 7002 // VIP4, GUE over IPv4 to b2
	portGUE6  = 7003 // VIP6, GUE over IPv6 to b3
)

// decapCase is one encapsulation and family mix carried end to end to a
// backend that runs `xlb decap`: a TCP and a UDP service on vip:port, each
// with the one endpoint be (its IPv6 address when outer6).
type decapCase struct {
	name   string
	vip    netip.Addr
	port   uint16
	be     string
	outer6 bool
	gue    bool
}

var decapCases = []decapCase{
	{"IPIP/4-in-4", testbed.VIP4, 8080, "b1", false, false},
	{"GUE/4-in-4", testbed.VIP4, 8081, "b2", false, true},
	{"IPIP/6-in-6", testbed.VIP6, 8080, "b1", true, false},
	{"GUE/6-in-6", testbed.VIP6, 8081, "b2", true, true},
	{"IPIP/4-in-6", testbed.VIP4, 8082, "b3", true, false},
	{"GUE/4-in-6", testbed.VIP4, 8083, "b3", true, true},
	{"IPIP/6-in-4", testbed.VIP6, 8082, "b3", false, false},
	{"GUE/6-in-4", testbed.VIP6, 8083, "b3", false, true},
}

// service is the case's service name for proto ("tcp" or "udp").
func (c decapCase) service(proto string) string {
	n := strings.ToLower(strings.NewReplacer("/", "-").Replace(c.name))
	return n + "-" + proto
}

// endpoint is the backend address the case's services forward to.
func (c decapCase) endpoint() netip.Addr {
	i := int(c.be[1] - '0')
	if c.outer6 {
		return netip.MustParseAddr(fmt.Sprintf("fd00:97::%d", 10+i))
	}
	return netip.AddrFrom4([4]byte{10, 97, 0, byte(10 + i)})
}

// configText is the configuration of the tests for a bed's balancer
// interface: unweighted Maglev over the three primaries b1-b3 (a third of
// new flows each) with b4 as failover, for TCP 80 and UDP 53 on both VIPs,
// L2 DSR; single-backend IPIP and GUE services on other ports for the
// frame checks; and the decapCases' services.
func configText(iface, sock string) string {
	primaries := func(a, b, c, spare string) string {
		return fmt.Sprintf(`
  [[backend_service.backend]]
  group = "primary"
  endpoints = [ %s, %s, %s ]
  [[backend_service.backend]]
  group = "spare"
  failover = true
  endpoints = [ %s ]
`, a, b, c, spare)
	}
	v4 := primaries(`{ ip = "10.97.0.11" }`, `{ ip = "10.97.0.12" }`, `{ ip = "10.97.0.13" }`, `{ ip = "10.97.0.14" }`)
	v6 := primaries(`{ ip = "fd00:97::11" }`, `{ ip = "fd00:97::12" }`, `{ ip = "fd00:97::13" }`, `{ ip = "fd00:97::14" }`)
	svc := func(name, proto, method, body string) string {
		extra := ""
		if method == "GUE" {
			extra = fmt.Sprintf("gue_port = %d\n", guePort)
		}
		return fmt.Sprintf(`
[[backend_service]]
name = %q
protocol = %q
health_checks = ["hc"]
forwarding_method = %q
%s%s`, name, proto, method, extra, body)
	}
	one := func(ip string) string {
		return fmt.Sprintf("\n  [[backend_service.backend]]\n  group = \"only\"\n  endpoints = [ { ip = %q } ]\n", ip)
	}
	rule := func(name, vip, proto string, port int, service string) string {
		return fmt.Sprintf(`
[[forwarding_rule]]
name = %q
ip_address = %q
ip_protocol = %q
ports = ["%d"]
backend_service = %q
`, name, vip, proto, port, service)
	}
	vip4, vip6 := testbed.VIP4.String(), testbed.VIP6.String()
	return bedHead(iface, sock, `zero_copy = "auto"`, "frame_size = 2048") + tcpCheck +
		svc("web", "TCP", "L2_DSR", v4) + svc("web6", "TCP", "L2_DSR", v6) +
		svc("echo", "UDP", "L2_DSR", v4) + svc("echo6", "UDP", "L2_DSR", v6) +
		svc("ipip", "UDP", "IPIP", one("10.97.0.11")) + svc("gue", "UDP", "GUE", one("10.97.0.12")) +
		svc("gue6", "UDP", "GUE", one("fd00:97::13")) +
		rule("web-v4", vip4, "TCP", testbed.HTTPPort, "web") + rule("web-v6", vip6, "TCP", testbed.HTTPPort, "web6") +
		rule("echo-v4", vip4, "UDP", testbed.UDPEchoPort, "echo") + rule("echo-v6", vip6, "UDP", testbed.UDPEchoPort, "echo6") +
		rule("ipip", vip4, "UDP", portIPIP4, "ipip") + rule("gue", vip4, "UDP", portGUE4, "gue") +
		rule("gue6", vip6, "UDP", portGUE6, "gue6") + decapServices(svc, one, rule)
}

// decapServices are the services and rules of decapCases.
func decapServices(svc func(name, proto, method, body string) string, one func(ip string) string,
	rule func(name, vip, proto string, port int, service string) string) string {
	var s strings.Builder
	for _, c := range decapCases {
		method := "IPIP"
		if c.gue {
			method = "GUE"
		}
		for _, proto := range []string{"tcp", "udp"} {
			name := c.service(proto)
			s.WriteString(svc(name, strings.ToUpper(proto), method, one(c.endpoint().String())))
			s.WriteString(rule(name, c.vip.String(), strings.ToUpper(proto), int(c.port), name))
		}
	}
	return s.String()
}

// writeConfig writes the tests' configuration for b into a temporary file.
func writeConfig(t *testing.T, b *testbed.Bed) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "xlb.toml")
	if err := os.WriteFile(path, []byte(configText(b.LB.Iface, adminSocket(b.LB.NS))), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

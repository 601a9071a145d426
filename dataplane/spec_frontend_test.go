package dataplane_test

// Engine-level proofs of SPEC §1 (FR1–FR7) and §2 (A1, A2), driven through
// cptest's rig: the real control plane, the real engine and real frames.
// The helpers at the top are shared by the other spec_*_test.go files of
// this package.

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

	"xlb/config"
	"xlb/conntrack"
	"xlb/controlplane/cptest"
	"xlb/dataplane"
	"xlb/dataplane/craft"
	"xlb/dataplane/packet"
	"xlb/maglev"
)

// Addresses of the test configurations.
const (
	specVIP4    = "203.0.113.10"
	specVIP6    = "2001:db8:f::10"
	specClient4 = "198.51.100.7"
	specClient6 = "2001:db8:c::7"
)

// specFileCap is a configuration file: a conntrack capacity, the health
// check every service names, and the given services and rules.
func specFileCap(capacity int, parts ...string) string {
	return fmt.Sprintf(`
[dataplane]
conntrack_capacity = %d

[[health_check]]
name = "hc"
type = "TCP"
`, capacity) + strings.Join(parts, "\n")
}

// specFile is specFileCap with a table large enough for every test but X3.
func specFile(parts ...string) string { return specFileCap(65536, parts...) }

// specSvc is one [[backend_service]] of a test configuration. Empty fields
// take the schema's defaults.
type specSvc struct {
	Name     string
	Protocol string // TCP | UDP | UNSPECIFIED
	Affinity string
	Mode     string // tracking_mode
	Method   string // forwarding_method
	// Primary and Failover are the endpoints of one primary and one failover
	// group: "IP" or "IP MAC".
	Primary, Failover []string
	Extra             []string // more `key = value` lines of the service table
}

func (s specSvc) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "\n[[backend_service]]\nname = %q\nhealth_checks = [\"hc\"]\n", s.Name)
	for _, kv := range [][2]string{{"protocol", s.Protocol}, {"session_affinity", s.Affinity}, {"forwarding_method", s.Method}} {
		if kv[1] != "" {
			fmt.Fprintf(&b, "%s = %q\n", kv[0], kv[1])
		}
	}
	for _, l := range s.Extra {
		b.WriteString(l + "\n")
	}
	if s.Mode != "" {
		fmt.Fprintf(&b, "  [backend_service.connection_tracking_policy]\n  tracking_mode = %q\n", s.Mode)
	}
	group := func(name string, failover bool, eps []string) {
		if len(eps) == 0 {
			return
		}
		fmt.Fprintf(&b, "  [[backend_service.backend]]\n  group = %q\n  failover = %t\n  endpoints = [\n", name, failover)
		for _, ep := range eps {
			f := strings.Fields(ep)
			if len(f) == 2 {
				fmt.Fprintf(&b, "    { ip = %q, mac = %q },\n", f[0], f[1])
			} else {
				fmt.Fprintf(&b, "    { ip = %q },\n", f[0])
			}
		}
		b.WriteString("  ]\n")
	}
	group(s.Name+"-primary", false, s.Primary)
	group(s.Name+"-failover", true, s.Failover)
	return b.String()
}

// specRule is one [[forwarding_rule]]. Ports is the TOML line that gives the
// ports (`ports = ["80"]`, `port_range = "1-9"`); "" means all_ports = true.
type specRule struct {
	Name, VIP, Proto, Ports, Service string
	Sources                          []string
}

func (r specRule) String() string {
	ports := r.Ports
	if ports == "" {
		ports = "all_ports = true"
	}
	src := ""
	if len(r.Sources) > 0 {
		src = fmt.Sprintf("source_ip_ranges = [\"%s\"]\n", strings.Join(r.Sources, `", "`))
	}
	return fmt.Sprintf("\n[[forwarding_rule]]\nname = %q\nip_address = %q\nip_protocol = %q\n%s\n%sbackend_service = %q\n",
		r.Name, r.VIP, r.Proto, ports, src, r.Service)
}

// specAddr returns base + i (as an address).
func specAddr(base string, i int) netip.Addr {
	b := netip.MustParseAddr(base).As16()
	carry := i
	for j := 15; j >= 0 && carry > 0; j-- {
		v := int(b[j]) + carry
		b[j], carry = byte(v), v>>8
	}
	return dataplane.AddrFrom16(b)
}

// specAddrs returns n addresses from base + 1, as text.
func specAddrs(base string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = specAddr(base, i+1).String()
	}
	return out
}

// specL3Rig is a rig with one UNSPECIFIED service (IPIP, so that both VIP
// families can use it) behind L3_DEFAULT rules on specVIP4 and specVIP6,
// with n IPv4 backends 10.1.0.1... .
func specL3Rig(tb testing.TB, affinity, mode string, n int) *cptest.Rig {
	tb.Helper()
	svc := specSvc{Name: "l3", Protocol: "UNSPECIFIED", Affinity: affinity, Mode: mode, Method: "IPIP",
		Primary: specAddrs("10.1.0.0", n)}
	return cptest.New(tb, specFile(svc.String(),
		specRule{Name: "l3-v4", VIP: specVIP4, Proto: "L3_DEFAULT", Service: "l3"}.String(),
		specRule{Name: "l3-v6", VIP: specVIP6, Proto: "L3_DEFAULT", Service: "l3"}.String()))
}

// specPacket describes a packet of any protocol, with ports for TCP and UDP.
func specPacket(src, dst netip.Addr, proto packet.Proto, sport, dport uint16, frag craft.Frag) craft.Packet {
	p := craft.Packet{Src: src, Dst: dst, Proto: proto, Frag: frag}
	switch proto {
	case packet.ProtoTCP, packet.ProtoUDP:
		p.SrcPort, p.DstPort = sport, dport
	case packet.ProtoICMP:
		p.ICMPType = 8 // echo request
	case packet.ProtoICMPv6:
		p.ICMPType = 128
	}
	return p
}

// specForward checks that res was forwarded and returns its backend's name.
func specForward(tb testing.TB, res *cptest.Result, what string) string {
	tb.Helper()
	if res.Verdict != dataplane.VerdictForward || res.Backend == nil {
		tb.Fatalf("%s: verdict %s (reason %q), want forward", what, res.Verdict, res.Reason)
	}
	return res.Backend.Name
}

// specDrop checks that res was dropped for reason.
func specDrop(tb testing.TB, res *cptest.Result, reason dataplane.Reason, what string) {
	tb.Helper()
	if res.Verdict != dataplane.VerdictDrop || res.Reason != reason {
		tb.Fatalf("%s: verdict %s reason %q, want drop %q", what, res.Verdict, res.Reason, reason)
	}
}

// specService returns the current snapshot's service of that name.
func specService(tb testing.TB, r *cptest.Rig, name string) *dataplane.Service {
	tb.Helper()
	snap := r.CP.Snapshot()
	for _, s := range snap.Services {
		if s != nil && s.Name == name {
			return s
		}
	}
	tb.Fatalf("no service %q in the snapshot", name)
	return nil
}

// specHash is the selection hash of SPEC §2 for a tuple of the given kind,
// computed from the packet fields with dataplane.FlowHash: the fields the
// kind leaves out are zero.
func specHash(kind conntrack.Kind, src, dst netip.Addr, sport, dport uint16, proto packet.Proto) uint64 {
	s, d := dataplane.Addr16(src), dataplane.Addr16(dst)
	switch kind {
	case conntrack.Kind2T:
		return dataplane.FlowHash(&s, &d, 0, 0, 0, uint8(kind))
	case conntrack.Kind3T:
		return dataplane.FlowHash(&s, &d, 0, 0, proto, uint8(kind))
	}
	return dataplane.FlowHash(&s, &d, sport, dport, proto, uint8(kind))
}

// specPick is the backend the service's current Maglev table gives hash h
// (S1), looked up independently of the engine's decision.
func specPick(tb testing.TB, r *cptest.Rig, service string, h uint64) *dataplane.Backend {
	tb.Helper()
	svc := specService(tb, r, service)
	if len(svc.Eligible) == 0 {
		tb.Fatalf("service %q has no eligible backend", service)
	}
	b := r.CP.Snapshot().Backend(svc.Eligible[maglev.Lookup(svc.Table, h)])
	if b == nil {
		tb.Fatalf("service %q: table names a stale backend", service)
	}
	return b
}

// specDecideRaw decides a raw frame like Rig.SendFrame but returns the whole
// buffer after the decision, so that a test can see the frame was not
// touched.
func specDecideRaw(r *cptest.Rig, frame []byte) (dataplane.Decision, []byte, []byte) {
	buf := make([]byte, dataplane.Headroom+len(frame)+dataplane.Headroom)
	copy(buf[dataplane.Headroom:], frame)
	before := append([]byte(nil), buf...)
	f := dataplane.Frame{Buf: buf, Off: dataplane.Headroom, Len: len(frame)}
	d := r.D.Decide(&f, r.Now)
	return d, before, buf
}

// specBuild serializes layers with lengths and checksums fixed.
func specBuild(tb testing.TB, ls ...gopacket.SerializableLayer) []byte {
	tb.Helper()
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, ls...); err != nil {
		tb.Fatalf("serialize: %v", err)
	}
	return buf.Bytes()
}

// specServiceDrops is a service's drop counter for a reason (0 before the
// worker has seen the service).
func specServiceDrops(r *cptest.Rig, id uint16, reason dataplane.Reason) uint64 {
	if c := r.D.Stats().Service(id); c != nil {
		return c.Drops[reason].Load()
	}
	return 0
}

// ---------------------------------------------------------------- FR1

func TestFR1_NonVIPTrafficPassesUntouched(t *testing.T) {
	web := specSvc{Name: "web", Protocol: "UNSPECIFIED", Method: "IPIP", Primary: specAddrs("10.1.0.0", 4)}
	r := cptest.New(t, specFile(web.String(),
		specRule{Name: "v4", VIP: specVIP4, Proto: "L3_DEFAULT", Service: "web"}.String(),
		specRule{Name: "v6", VIP: specVIP6, Proto: "L3_DEFAULT", Service: "web"}.String()))
	host4, host6 := "203.0.113.2", "2001:db8:f::2" // the balancer's own addresses
	client4 := netip.MustParseAddr(specClient4)

	arp := specBuild(t,
		&layers.Ethernet{SrcMAC: craft.ClientMAC, DstMAC: net.HardwareAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, EthernetType: layers.EthernetTypeARP},
		&layers.ARP{AddrType: layers.LinkTypeEthernet, Protocol: layers.EthernetTypeIPv4, HwAddressSize: 6, ProtAddressSize: 4,
			Operation: layers.ARPRequest, SourceHwAddress: craft.ClientMAC, SourceProtAddress: client4.AsSlice(),
			DstHwAddress: make([]byte, 6), DstProtAddress: netip.MustParseAddr(specVIP4).AsSlice()})
	build := func(p craft.Packet) []byte {
		t.Helper()
		f, err := craft.Build(&p)
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	ndp := func(dst string, typ uint8) []byte {
		p := cptest.Proto(specClient6, dst, packet.ProtoICMPv6)
		p.ICMPType = typ
		return build(p)
	}
	fromBackend := cptest.TCP("10.1.0.1", host4, 8080, 40000, "SA") // a health-check reply

	pass := []struct {
		name  string
		frame []byte
	}{
		{"ssh to the host (v4)", build(cptest.TCP(specClient4, host4, 50000, 22, "S"))},
		{"ssh to the host (v6)", build(cptest.TCP(specClient6, host6, 50000, 22, "S"))},
		{"bgp to the host", build(cptest.TCP("203.0.113.1", host4, 179, 50000, "A"))},
		{"health-check reply", build(fromBackend)},
		{"udp to another address", build(cptest.UDP(specClient4, "203.0.113.11", 5000, 53))},
		{"icmp echo to the host", build(cptest.Proto(specClient4, host4, packet.ProtoICMP))},
		{"arp who-has VIP", arp},
		{"ndp neighbour solicitation to the VIP", ndp(specVIP6, 135)},
		{"ndp neighbour advertisement to the VIP", ndp(specVIP6, 136)},
		{"ndp router solicitation to the VIP", ndp(specVIP6, 133)},
		{"ndp solicitation to the VIP's solicited-node group", ndp("ff02::1:ff00:10", 135)},
		// An IPv6 packet to ::ffff:VIP4 is not addressed to the IPv4 VIP,
		// although both have the same 16-byte form inside the engine.
		{"ipv6 to the IPv4 VIP's mapped address", build(cptest.TCP(specClient6, "::ffff:"+specVIP4, 50000, 80, "S"))},
		{"ipv6 from a mapped source to the mapped VIP", build(cptest.TCP("::ffff:"+specClient4, "::ffff:"+specVIP4, 50000, 80, "S"))},
	}
	for _, tc := range pass {
		t.Run("pass/"+tc.name, func(t *testing.T) {
			passed := r.D.Stats().Pass.Load()
			d, before, after := specDecideRaw(r, tc.frame)
			if d.Verdict != dataplane.VerdictPass {
				t.Fatalf("verdict %s (reason %q, rule %v), want pass", d.Verdict, d.Reason, d.Rule)
			}
			if !bytes.Equal(before, after) {
				t.Error("a passed frame (or its headroom) was modified")
			}
			if d.Rule != nil || d.Service != nil || d.Backend != nil {
				t.Errorf("a passed frame got rule %v service %v backend %v", d.Rule, d.Service, d.Backend)
			}
			if got := r.D.Stats().Pass.Load() - passed; got != 1 {
				t.Errorf("pass counter moved by %d, want 1", got)
			}
		})
	}
	// The same VIPs' traffic is the balancer's to decide.
	decided := []craft.Packet{
		cptest.TCP(specClient4, specVIP4, 50000, 22, "S"),
		cptest.UDP(specClient6, specVIP6, 5000, 53),
		cptest.Proto(specClient4, specVIP4, packet.ProtoICMP),
		cptest.Proto(specClient6, specVIP6, packet.ProtoICMPv6), // echo: not NDP
		specPacket(client4, netip.MustParseAddr(specVIP4), packet.ProtoESP, 0, 0, craft.FragNone),
	}
	for _, p := range decided {
		res := r.Send(p)
		specForward(t, res, fmt.Sprintf("%s %s -> %s", p.Proto.String(), p.Src, p.Dst))
		if res.Rule == nil || res.Service.Name != "web" {
			t.Errorf("VIP packet %s: rule %v, want a rule of service web", p.Proto.String(), res.Rule)
		}
	}
}

// ---------------------------------------------------------------- FR2

func TestFR2_RuleProtocolsAndPrecedence(t *testing.T) {
	// The L3_DEFAULT rule comes first in the file: precedence must not depend
	// on the order of the rules.
	tcp := specSvc{Name: "tcp", Protocol: "TCP", Primary: specAddrs("10.1.0.0", 2)}
	udp := specSvc{Name: "udp", Protocol: "UDP", Primary: specAddrs("10.2.0.0", 2)}
	l3 := specSvc{Name: "l3", Protocol: "UNSPECIFIED", Primary: specAddrs("10.3.0.0", 2)}
	tcp6 := specSvc{Name: "tcp6", Protocol: "TCP", Primary: specAddrs("2001:db8:a::", 2)}
	l36 := specSvc{Name: "l36", Protocol: "UNSPECIFIED", Primary: specAddrs("2001:db8:b::", 2)}
	r := cptest.New(t, specFile(tcp.String(), udp.String(), l3.String(), tcp6.String(), l36.String(),
		specRule{Name: "all", VIP: specVIP4, Proto: "L3_DEFAULT", Service: "l3"}.String(),
		specRule{Name: "web", VIP: specVIP4, Proto: "TCP", Ports: `ports = ["80", "443"]`, Service: "tcp"}.String(),
		specRule{Name: "dns", VIP: specVIP4, Proto: "UDP", Ports: `ports = ["53"]`, Service: "udp"}.String(),
		specRule{Name: "all6", VIP: specVIP6, Proto: "L3_DEFAULT", Service: "l36"}.String(),
		specRule{Name: "web6", VIP: specVIP6, Proto: "TCP", Ports: `ports = ["443"]`, Service: "tcp6"}.String(),
		// A VIP with only protocol-specific rules: nothing else is taken.
		specRule{Name: "only-tcp", VIP: "203.0.113.20", Proto: "TCP", Ports: `ports = ["80"]`, Service: "tcp"}.String()))

	c4, c6 := netip.MustParseAddr(specClient4), netip.MustParseAddr(specClient6)
	v4, v6, only := netip.MustParseAddr(specVIP4), netip.MustParseAddr(specVIP6), netip.MustParseAddr("203.0.113.20")
	cases := []struct {
		name   string
		p      craft.Packet
		rule   string // "" means dropped, no-rule
		svcFor string
	}{
		{"tcp on a listed port takes the TCP rule", specPacket(c4, v4, packet.ProtoTCP, 40000, 80, craft.FragNone), "web", "tcp"},
		{"tcp on the other listed port", specPacket(c4, v4, packet.ProtoTCP, 40000, 443, craft.FragNone), "web", "tcp"},
		{"tcp on an unlisted port falls to L3_DEFAULT", specPacket(c4, v4, packet.ProtoTCP, 40000, 8080, craft.FragNone), "all", "l3"},
		{"udp on the listed port takes the UDP rule", specPacket(c4, v4, packet.ProtoUDP, 5000, 53, craft.FragNone), "dns", "udp"},
		{"udp on port 80 is not taken by the TCP rule", specPacket(c4, v4, packet.ProtoUDP, 5000, 80, craft.FragNone), "all", "l3"},
		{"esp", specPacket(c4, v4, packet.ProtoESP, 0, 0, craft.FragNone), "all", "l3"},
		{"gre", specPacket(c4, v4, packet.ProtoGRE, 0, 0, craft.FragNone), "all", "l3"},
		{"icmp", specPacket(c4, v4, packet.ProtoICMP, 0, 0, craft.FragNone), "all", "l3"},
		{"sctp (132) is not L3_DEFAULT's", specPacket(c4, v4, 132, 0, 0, craft.FragNone), "", ""},
		{"ah-less protocol 103 (PIM) is not L3_DEFAULT's", specPacket(c4, v4, 103, 0, 0, craft.FragNone), "", ""},
		{"v6 tcp on the listed port", specPacket(c6, v6, packet.ProtoTCP, 40000, 443, craft.FragNone), "web6", "tcp6"},
		{"v6 tcp elsewhere", specPacket(c6, v6, packet.ProtoTCP, 40000, 22, craft.FragNone), "all6", "l36"},
		{"v6 udp", specPacket(c6, v6, packet.ProtoUDP, 5000, 53, craft.FragNone), "all6", "l36"},
		{"v6 icmpv6 echo", specPacket(c6, v6, packet.ProtoICMPv6, 0, 0, craft.FragNone), "all6", "l36"},
		{"v6 esp", specPacket(c6, v6, packet.ProtoESP, 0, 0, craft.FragNone), "all6", "l36"},
		{"v6 gre", specPacket(c6, v6, packet.ProtoGRE, 0, 0, craft.FragNone), "all6", "l36"},
		{"v6 sctp", specPacket(c6, v6, 132, 0, 0, craft.FragNone), "", ""},
		{"TCP-only VIP: tcp on its port", specPacket(c4, only, packet.ProtoTCP, 40000, 80, craft.FragNone), "only-tcp", "tcp"},
		{"TCP-only VIP: udp", specPacket(c4, only, packet.ProtoUDP, 40000, 80, craft.FragNone), "", ""},
		{"TCP-only VIP: icmp", specPacket(c4, only, packet.ProtoICMP, 0, 0, craft.FragNone), "", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			res := r.Send(tc.p)
			if tc.rule == "" {
				specDrop(t, res, dataplane.ReasonNoRule, tc.name)
				return
			}
			specForward(t, res, tc.name)
			if res.Rule.Name != tc.rule || res.Service.Name != tc.svcFor {
				t.Errorf("rule %q service %q, want rule %q service %q", res.Rule.Name, res.Service.Name, tc.rule, tc.svcFor)
			}
		})
	}
}

// ---------------------------------------------------------------- FR3

func TestFR3_PortsRangesAllPortsAndFragments(t *testing.T) {
	list := specSvc{Name: "list", Protocol: "TCP", Primary: specAddrs("10.1.0.0", 4)}
	rng := specSvc{Name: "range", Protocol: "TCP", Primary: specAddrs("10.2.0.0", 4)}
	allTCP := specSvc{Name: "alltcp", Protocol: "TCP", Primary: specAddrs("10.3.0.0", 4)}
	allUDP := specSvc{Name: "alludp", Protocol: "UDP", Primary: specAddrs("10.4.0.0", 4)}
	l3 := specSvc{Name: "l3", Protocol: "UNSPECIFIED", Primary: specAddrs("10.5.0.0", 4)}
	list6 := specSvc{Name: "list6", Protocol: "UDP", Primary: specAddrs("2001:db8:a::", 4)}
	const vipAll, vipL3 = "203.0.113.20", "203.0.113.30"
	r := cptest.New(t, specFile(list.String(), rng.String(), allTCP.String(), allUDP.String(), l3.String(), list6.String(),
		specRule{Name: "list", VIP: specVIP4, Proto: "TCP", Ports: `ports = ["80", "443", "8000-8010"]`, Service: "list"}.String(),
		specRule{Name: "range", VIP: specVIP4, Proto: "TCP", Ports: `port_range = "9000-9100"`, Service: "range"}.String(),
		specRule{Name: "alludp", VIP: specVIP4, Proto: "UDP", Service: "alludp"}.String(),
		specRule{Name: "alltcp", VIP: vipAll, Proto: "TCP", Service: "alltcp"}.String(),
		specRule{Name: "tcp80", VIP: vipL3, Proto: "TCP", Ports: `ports = ["80"]`, Service: "list"}.String(),
		specRule{Name: "l3", VIP: vipL3, Proto: "L3_DEFAULT", Service: "l3"}.String(),
		specRule{Name: "list6", VIP: specVIP6, Proto: "UDP", Ports: `ports = ["53", "5000-5010"]`, Service: "list6"}.String()))

	c4, c6 := netip.MustParseAddr(specClient4), netip.MustParseAddr(specClient6)
	v4, v6 := netip.MustParseAddr(specVIP4), netip.MustParseAddr(specVIP6)
	all, l3v := netip.MustParseAddr(vipAll), netip.MustParseAddr(vipL3)
	tcp := func(dst netip.Addr, dport uint16, f craft.Frag) craft.Packet {
		return specPacket(c4, dst, packet.ProtoTCP, 40000, dport, f)
	}
	cases := []struct {
		name string
		p    craft.Packet
		rule string // "" means dropped, no-rule
	}{
		{"listed port 80", tcp(v4, 80, craft.FragNone), "list"},
		{"listed port 443", tcp(v4, 443, craft.FragNone), "list"},
		{"listed range start", tcp(v4, 8000, craft.FragNone), "list"},
		{"listed range inside", tcp(v4, 8005, craft.FragNone), "list"},
		{"listed range end", tcp(v4, 8010, craft.FragNone), "list"},
		{"below the listed range", tcp(v4, 7999, craft.FragNone), ""},
		{"above the listed range", tcp(v4, 8011, craft.FragNone), ""},
		{"unlisted port 81", tcp(v4, 81, craft.FragNone), ""},
		{"port_range start", tcp(v4, 9000, craft.FragNone), "range"},
		{"port_range end", tcp(v4, 9100, craft.FragNone), "range"},
		{"above port_range", tcp(v4, 9101, craft.FragNone), ""},
		{"all_ports udp, any port", specPacket(c4, v4, packet.ProtoUDP, 1, 65535, craft.FragNone), "alludp"},
		{"all_ports tcp, port 1", tcp(all, 1, craft.FragNone), "alltcp"},
		{"all_ports tcp, port 65535", tcp(all, 65535, craft.FragNone), "alltcp"},
		// Fragments.
		{"first fragment on a listed port matches on its ports", tcp(v4, 443, craft.FragFirst), "list"},
		{"first fragment in port_range", tcp(v4, 9050, craft.FragFirst), "range"},
		{"first fragment on an unlisted port", tcp(v4, 81, craft.FragFirst), ""},
		{"middle fragment: no port, listed rules do not match", tcp(v4, 443, craft.FragMiddle), ""},
		{"last fragment: no port, listed rules do not match", tcp(v4, 443, craft.FragLast), ""},
		{"middle fragment matches an all_ports rule", tcp(all, 443, craft.FragMiddle), "alltcp"},
		{"last fragment matches an all_ports rule", tcp(all, 443, craft.FragLast), "alltcp"},
		{"udp middle fragment matches all_ports udp", specPacket(c4, v4, packet.ProtoUDP, 5000, 53, craft.FragMiddle), "alludp"},
		{"udp last fragment matches all_ports udp", specPacket(c4, v4, packet.ProtoUDP, 5000, 53, craft.FragLast), "alludp"},
		{"L3_DEFAULT VIP: first fragment on the TCP rule's port", tcp(l3v, 80, craft.FragFirst), "tcp80"},
		{"L3_DEFAULT VIP: middle fragment falls to L3_DEFAULT", tcp(l3v, 80, craft.FragMiddle), "l3"},
		{"L3_DEFAULT VIP: last fragment falls to L3_DEFAULT", tcp(l3v, 80, craft.FragLast), "l3"},
		{"v6 listed port", specPacket(c6, v6, packet.ProtoUDP, 7000, 53, craft.FragNone), "list6"},
		{"v6 listed range", specPacket(c6, v6, packet.ProtoUDP, 7000, 5010, craft.FragNone), "list6"},
		{"v6 first fragment on a listed port", specPacket(c6, v6, packet.ProtoUDP, 7000, 5001, craft.FragFirst), "list6"},
		{"v6 middle fragment", specPacket(c6, v6, packet.ProtoUDP, 7000, 5001, craft.FragMiddle), ""},
		{"v6 last fragment", specPacket(c6, v6, packet.ProtoUDP, 7000, 5001, craft.FragLast), ""},
		{"v6 unlisted port", specPacket(c6, v6, packet.ProtoUDP, 7000, 5011, craft.FragNone), ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			res := r.Send(tc.p)
			if tc.rule == "" {
				specDrop(t, res, dataplane.ReasonNoRule, tc.name)
				return
			}
			specForward(t, res, tc.name)
			if res.Rule.Name != tc.rule {
				t.Errorf("rule %q, want %q", res.Rule.Name, tc.rule)
			}
			// §0: a first fragment carries ports but has no port
			// information, so it hashes on 3T (affinity NONE here).
			if tc.p.Frag == craft.FragFirst && res.SelKind != conntrack.Kind3T {
				t.Errorf("first fragment hashed on %s, want 3T", res.SelKind)
			}
		})
	}
}

// ---------------------------------------------------------------- FR4

func TestFR4_NoRuleIsDroppedAndCounted(t *testing.T) {
	web := specSvc{Name: "web", Protocol: "TCP", Primary: specAddrs("10.1.0.0", 2)}
	r := cptest.New(t, specFile(web.String(),
		specRule{Name: "web", VIP: specVIP4, Proto: "TCP", Ports: `ports = ["80"]`, Service: "web"}.String()))
	c4, v4 := netip.MustParseAddr(specClient4), netip.MustParseAddr(specVIP4)
	for i, p := range []craft.Packet{
		specPacket(c4, v4, packet.ProtoTCP, 40000, 81, craft.FragNone),
		specPacket(c4, v4, packet.ProtoUDP, 40000, 80, craft.FragNone),
		specPacket(c4, v4, packet.ProtoICMP, 0, 0, craft.FragNone),
		specPacket(c4, v4, packet.ProtoTCP, 40000, 80, craft.FragMiddle),
	} {
		before := r.D.Stats().Drops[dataplane.ReasonNoRule].Load()
		res := r.Send(p)
		specDrop(t, res, dataplane.ReasonNoRule, fmt.Sprintf("packet %d", i))
		if res.Out != nil {
			t.Errorf("packet %d: a dropped packet has an output frame", i)
		}
		if got := r.D.Stats().Drops[dataplane.ReasonNoRule].Load() - before; got != 1 {
			t.Errorf("packet %d: no-rule counter moved by %d, want 1", i, got)
		}
	}
	if n := r.Conntrack().Len(); n != 0 {
		t.Errorf("dropped packets left %d tracking entries", n)
	}
	// The control: the rule's own traffic is forwarded.
	specForward(t, r.Send(specPacket(c4, v4, packet.ProtoTCP, 40000, 80, craft.FragNone)), "tcp 80")
}

// ---------------------------------------------------------------- FR5

// TestFR5_FragmentsFollowTheClient: with all_ports, CLIENT_IP or
// CLIENT_IP_PROTO and PER_SESSION, every fragment of every datagram of a
// client reaches the backend of that client's unfragmented packets, whichever
// arrives first.
func TestFR5_FragmentsFollowTheClient(t *testing.T) {
	for _, aff := range []string{"CLIENT_IP", "CLIENT_IP_PROTO"} {
		t.Run(aff, func(t *testing.T) {
			u4 := specSvc{Name: "u4", Protocol: "UDP", Affinity: aff, Mode: "PER_SESSION", Primary: specAddrs("10.1.0.0", 8)}
			u6 := specSvc{Name: "u6", Protocol: "UDP", Affinity: aff, Mode: "PER_SESSION", Primary: specAddrs("2001:db8:a::", 8)}
			r := cptest.New(t, specFile(u4.String(), u6.String(),
				specRule{Name: "u4", VIP: specVIP4, Proto: "UDP", Service: "u4"}.String(),
				specRule{Name: "u6", VIP: specVIP6, Proto: "UDP", Service: "u6"}.String()))
			rng := rand.New(rand.NewPCG(5, 1))
			used := map[string]bool{}
			for i := range 300 {
				client, vip := specAddr("198.18.0.0", i+1), netip.MustParseAddr(specVIP4)
				if i%3 == 2 {
					client, vip = specAddr("2001:db8:c::", i+1), netip.MustParseAddr(specVIP6)
				}
				port := func() uint16 { return uint16(1024 + rng.IntN(60000)) }
				whole := specPacket(client, vip, packet.ProtoUDP, port(), port(), craft.FragNone)
				sport, dport := port(), port()
				frags := []craft.Packet{
					specPacket(client, vip, packet.ProtoUDP, sport, dport, craft.FragFirst),
					specPacket(client, vip, packet.ProtoUDP, sport, dport, craft.FragMiddle),
					specPacket(client, vip, packet.ProtoUDP, sport, dport, craft.FragLast),
				}
				seq := append([]craft.Packet{whole}, frags...)
				if i%2 == 1 { // fragments first
					seq = append(frags, whole)
				}
				want := ""
				for k, p := range seq {
					got := specForward(t, r.Send(p), fmt.Sprintf("client %s packet %d", client, k))
					if want == "" {
						want = got
					} else if got != want {
						t.Fatalf("client %s: packet %d (frag %d) went to %s, earlier packets to %s", client, k, p.Frag, got, want)
					}
				}
				used[want] = true
			}
			if len(used) < 8 {
				t.Errorf("300 clients used %d of 8 backends per family; the test would not see a mismatch", len(used))
			}
		})
	}

	// Why the configuration matters: with a 5-tuple affinity a datagram's
	// fragments (3T) and the client's unfragmented packets (5T) part ways.
	t.Run("control/CLIENT_IP_PORT_PROTO", func(t *testing.T) {
		u := specSvc{Name: "u", Protocol: "UDP", Affinity: "CLIENT_IP_PORT_PROTO", Mode: "PER_SESSION", Primary: specAddrs("10.1.0.0", 8)}
		r := cptest.New(t, specFile(u.String(), specRule{Name: "u", VIP: specVIP4, Proto: "UDP", Service: "u"}.String()))
		split := 0
		for i := range 50 {
			client, vip := specAddr("198.18.0.0", i+1), netip.MustParseAddr(specVIP4)
			a := specForward(t, r.Send(specPacket(client, vip, packet.ProtoUDP, 5000, 53, craft.FragNone)), "whole")
			b := specForward(t, r.Send(specPacket(client, vip, packet.ProtoUDP, 5000, 53, craft.FragMiddle)), "fragment")
			if a != b {
				split++
			}
		}
		if split == 0 {
			t.Error("no client's fragments left its backend under CLIENT_IP_PORT_PROTO; FR5 above proves nothing")
		}
	})
}

// ---------------------------------------------------------------- FR6

func TestFR6_SourceRanges(t *testing.T) {
	s4 := specSvc{Name: "s4", Protocol: "TCP", Primary: specAddrs("10.1.0.0", 2)}
	s6 := specSvc{Name: "s6", Protocol: "TCP", Primary: specAddrs("2001:db8:a::", 2)}
	l3 := specSvc{Name: "l3", Protocol: "UNSPECIFIED", Primary: specAddrs("10.3.0.0", 2)}
	r := cptest.New(t, specFile(s4.String(), s6.String(), l3.String(),
		specRule{Name: "r4", VIP: specVIP4, Proto: "TCP", Ports: `ports = ["443"]`, Service: "s4",
			Sources: []string{"198.51.100.0/24", "192.0.2.77"}}.String(),
		// The same VIP's L3_DEFAULT rule would take the packet: FR6 drops it
		// "whatever else matches".
		specRule{Name: "l3", VIP: specVIP4, Proto: "L3_DEFAULT", Service: "l3"}.String(),
		specRule{Name: "r6", VIP: specVIP6, Proto: "TCP", Ports: `ports = ["443"]`, Service: "s6",
			Sources: []string{"2001:db8:c::/48", "2001:db8:d::77"}}.String()))

	cases := []struct {
		src, dst string
		allowed  bool
	}{
		{"198.51.100.1", specVIP4, true},
		{"198.51.100.255", specVIP4, true},
		{"192.0.2.77", specVIP4, true},
		{"192.0.2.78", specVIP4, false},
		{"198.51.101.1", specVIP4, false},
		{"10.1.0.9", specVIP4, false},
		{"2001:db8:c::1", specVIP6, true},
		{"2001:db8:c:ffff:ffff:ffff:ffff:ffff", specVIP6, true},
		{"2001:db8:d::77", specVIP6, true},
		{"2001:db8:d::78", specVIP6, false},
		{"2001:db8:c0::1", specVIP6, false},
	}
	entries := 0
	for i, tc := range cases {
		t.Run(tc.src, func(t *testing.T) {
			svc := specService(t, r, map[string]string{specVIP4: "s4", specVIP6: "s6"}[tc.dst])
			before := r.D.Stats().Drops[dataplane.ReasonSourceNotAllowed].Load()
			svcBefore := specServiceDrops(r, svc.ID, dataplane.ReasonSourceNotAllowed)
			res := r.Send(cptest.TCP(tc.src, tc.dst, uint16(40000+i), 443, "S"))
			if tc.allowed {
				specForward(t, res, tc.src)
				entries++
				return
			}
			specDrop(t, res, dataplane.ReasonSourceNotAllowed, tc.src)
			if got := r.D.Stats().Drops[dataplane.ReasonSourceNotAllowed].Load() - before; got != 1 {
				t.Errorf("source-not-allowed counter moved by %d, want 1", got)
			}
			if got := specServiceDrops(r, svc.ID, dataplane.ReasonSourceNotAllowed) - svcBefore; got != 1 {
				t.Errorf("service %s source-not-allowed counter moved by %d, want 1", svc.Name, got)
			}
		})
	}
	// An IPv4-mapped source is not inside an IPv4 range of another VIP:
	// FR8 drops it before the ranges are looked at (a mapped address is
	// never on the wire).
	specDrop(t, r.Send(cptest.TCP("::ffff:198.51.100.1", specVIP6, 40999, 443, "S")),
		dataplane.ReasonMartianSource, "mapped source")
	// The allow-list belongs to the TCP rule only: the L3_DEFAULT rule of the
	// same VIP takes anyone's other traffic.
	res := r.Send(cptest.TCP("192.0.2.78", specVIP4, 40000, 80, "S"))
	specForward(t, res, "tcp 80 from outside the list")
	if res.Rule.Name != "l3" {
		t.Errorf("tcp 80 took rule %q, want l3", res.Rule.Name)
	}
	entries++
	if n := r.Conntrack().Len(); n != entries {
		t.Errorf("%d tracking entries, want %d: one per forwarded SYN, none for dropped packets", n, entries)
	}
}

// ---------------------------------------------------------------- FR7

func TestFR7_ConfigRejections(t *testing.T) {
	tcp := specSvc{Name: "tcp", Protocol: "TCP", Primary: []string{"10.1.0.1"}}.String()
	udp := specSvc{Name: "udp", Protocol: "UDP", Primary: []string{"10.1.0.2"}}.String()
	unspec := specSvc{Name: "any", Protocol: "UNSPECIFIED", Primary: []string{"10.1.0.3"}}.String()
	rule := func(name, vip, proto, ports, svc string) string {
		return specRule{Name: name, VIP: vip, Proto: proto, Ports: ports, Service: svc}.String()
	}
	bad := []struct {
		name  string
		rules []string
		field string // the field path the error names
		msg   string
	}{
		{"same port twice", []string{rule("a", specVIP4, "TCP", `ports = ["80"]`, "tcp"), rule("b", specVIP4, "TCP", `ports = ["80"]`, "tcp")},
			"forwarding_rule[1].ports[0]", "overlaps"},
		{"port inside a range", []string{rule("a", specVIP4, "TCP", `ports = ["8000-8010"]`, "tcp"), rule("b", specVIP4, "TCP", `ports = ["443", "8005"]`, "tcp")},
			"forwarding_rule[1].ports[1]", "overlaps"},
		{"port_range over ports", []string{rule("a", specVIP4, "UDP", `ports = ["53"]`, "udp"), rule("b", specVIP4, "UDP", `port_range = "1-1024"`, "udp")},
			"forwarding_rule[1].port_range", "overlaps"},
		{"all_ports over ports", []string{rule("a", specVIP4, "TCP", `ports = ["80"]`, "tcp"), rule("b", specVIP4, "TCP", "", "tcp")},
			"forwarding_rule[1].all_ports", "overlaps"},
		{"two L3_DEFAULT rules on one VIP", []string{rule("a", specVIP4, "L3_DEFAULT", "", "any"), rule("b", specVIP4, "L3_DEFAULT", "", "any")},
			"forwarding_rule[1].all_ports", "overlaps"},
		{"L3_DEFAULT without all_ports", []string{rule("a", specVIP4, "L3_DEFAULT", `ports = ["80"]`, "any")},
			"forwarding_rule[0].ports", "all_ports"},
		{"L3_DEFAULT with port_range", []string{rule("a", specVIP4, "L3_DEFAULT", `port_range = "1-100"`, "any")},
			"forwarding_rule[0].port_range", "all_ports"},
		{"L3_DEFAULT with a TCP service", []string{rule("a", specVIP4, "L3_DEFAULT", "", "tcp")},
			"forwarding_rule[0].backend_service", "UNSPECIFIED"},
		{"TCP rule with an UNSPECIFIED service", []string{rule("a", specVIP4, "TCP", `ports = ["80"]`, "any")},
			"forwarding_rule[0].backend_service", "TCP"},
		{"UDP rule with a TCP service", []string{rule("a", specVIP4, "UDP", `ports = ["53"]`, "tcp")},
			"forwarding_rule[0].backend_service", "UDP"},
		{"TCP rule with a UDP service", []string{rule("a", specVIP4, "TCP", `ports = ["53"]`, "udp")},
			"forwarding_rule[0].backend_service", "TCP"},
	}
	for _, tc := range bad {
		t.Run("reject/"+tc.name, func(t *testing.T) {
			text := specFile(append([]string{tcp, udp, unspec}, tc.rules...)...)
			_, err := config.Parse("fr7.toml", []byte(text))
			var es config.Errors
			if !errors.As(err, &es) || len(es) == 0 {
				t.Fatalf("accepted (err %v):\n%s", err, text)
			}
			found := false
			for _, e := range es {
				if e.Field == tc.field && strings.Contains(e.Msg, tc.msg) && e.File == "fr7.toml" {
					found = true
				}
			}
			if !found {
				t.Errorf("no error at %s mentioning %q; got:\n%v", tc.field, tc.msg, err)
			}
		})
	}
	// What FR7 allows: the same ports under different protocols or VIPs, and
	// a protocol-specific rule beside an L3_DEFAULT rule.
	good := map[string][]string{
		"tcp and udp on the same port": {rule("a", specVIP4, "TCP", `ports = ["53"]`, "tcp"), rule("b", specVIP4, "UDP", `ports = ["53"]`, "udp")},
		"same port on two VIPs":        {rule("a", specVIP4, "TCP", `ports = ["80"]`, "tcp"), rule("b", "203.0.113.11", "TCP", `ports = ["80"]`, "tcp")},
		"adjacent ranges":              {rule("a", specVIP4, "TCP", `ports = ["8000-8010"]`, "tcp"), rule("b", specVIP4, "TCP", `port_range = "8011-8020"`, "tcp")},
		"TCP rule and L3_DEFAULT":      {rule("a", specVIP4, "TCP", `ports = ["80"]`, "tcp"), rule("b", specVIP4, "L3_DEFAULT", "", "any")},
		"all_ports TCP and L3_DEFAULT": {rule("a", specVIP4, "TCP", "", "tcp"), rule("b", specVIP4, "L3_DEFAULT", "", "any")},
	}
	for name, rules := range good {
		t.Run("accept/"+name, func(t *testing.T) {
			if _, err := config.Parse("fr7.toml", []byte(specFile(append([]string{tcp, udp, unspec}, rules...)...))); err != nil {
				t.Errorf("rejected: %v", err)
			}
		})
	}
}

// ---------------------------------------------------------------- A1

// specA1Kind is SPEC §2's table: the tuple the selection hash is built from.
func specA1Kind(affinity string, proto packet.Proto, frag craft.Frag) conntrack.Kind {
	portInfo := (proto == packet.ProtoTCP || proto == packet.ProtoUDP) && frag == craft.FragNone
	switch affinity {
	case "CLIENT_IP":
		return conntrack.Kind2T
	case "CLIENT_IP_PROTO":
		return conntrack.Kind3T
	}
	if portInfo { // NONE, CLIENT_IP_PORT_PROTO
		return conntrack.Kind5T
	}
	return conntrack.Kind3T
}

var specAffinities = []string{"NONE", "CLIENT_IP_PORT_PROTO", "CLIENT_IP_PROTO", "CLIENT_IP"}

// TestA1_SelectionHashPerAffinity checks, for every affinity and many random
// packets of every protocol and fragment position, the hash kind, the hash
// value and the backend, against the §2 table and an independent
// FlowHash + Maglev lookup.
func TestA1_SelectionHashPerAffinity(t *testing.T) {
	protos4 := []packet.Proto{packet.ProtoTCP, packet.ProtoUDP, packet.ProtoESP, packet.ProtoGRE, packet.ProtoICMP}
	protos6 := []packet.Proto{packet.ProtoTCP, packet.ProtoUDP, packet.ProtoESP, packet.ProtoGRE, packet.ProtoICMPv6}
	frags := []craft.Frag{craft.FragNone, craft.FragFirst, craft.FragMiddle, craft.FragLast}
	for _, aff := range specAffinities {
		t.Run(aff, func(t *testing.T) {
			r := specL3Rig(t, aff, "", 16)
			rng := rand.New(rand.NewPCG(1, 2))
			for i := range 2000 {
				src, dst, protos := specAddr("198.18.0.0", rng.IntN(1000)), netip.MustParseAddr(specVIP4), protos4
				if i%4 == 3 {
					src, dst, protos = specAddr("2001:db8:c::", rng.IntN(1000)), netip.MustParseAddr(specVIP6), protos6
				}
				proto := protos[rng.IntN(len(protos))]
				frag := craft.FragNone
				if rng.IntN(3) == 0 && proto != packet.ProtoICMP && proto != packet.ProtoICMPv6 {
					frag = frags[1+rng.IntN(3)]
				}
				sport, dport := uint16(1+rng.IntN(65535)), uint16(1+rng.IntN(65535))
				p := specPacket(src, dst, proto, sport, dport, frag)
				if proto == packet.ProtoTCP {
					p.Flags = "S" // a new connection: selected, not looked up
				}
				res := r.Send(p)
				what := fmt.Sprintf("%s %s frag %d", proto.String(), src, frag)
				got := specForward(t, res, what)
				kind := specA1Kind(aff, proto, frag)
				if res.SelKind != kind {
					t.Fatalf("%s: selection kind %s, want %s", what, res.SelKind, kind)
				}
				h := specHash(kind, src, dst, sport, dport, proto)
				if res.SelHash != h {
					t.Fatalf("%s: selection hash %#x, want FlowHash %#x", what, res.SelHash, h)
				}
				if want := specPick(t, r, "l3", h).Name; got != want {
					t.Fatalf("%s: backend %s, want %s (Maglev lookup of the hash)", what, got, want)
				}
			}
		})
	}
}

// TestA1_WhichFieldsMoveTheBackend checks the table from the other side: the
// fields a kind leaves out never change the backend, over many samples, while
// the fields it includes do (somewhere in the samples).
func TestA1_WhichFieldsMoveTheBackend(t *testing.T) {
	vip := netip.MustParseAddr(specVIP4)
	type variation struct {
		name  string
		proto packet.Proto
		frag  craft.Frag
		// vary returns the i-th variant of a base packet of one client.
		vary func(p craft.Packet, i int) craft.Packet
	}
	sport := func(p craft.Packet, i int) craft.Packet { p.SrcPort = uint16(1024 + 7*i); return p }
	dport := func(p craft.Packet, i int) craft.Packet { p.DstPort = uint16(1 + 13*i); return p }
	protos := []packet.Proto{packet.ProtoTCP, packet.ProtoUDP, packet.ProtoESP, packet.ProtoGRE, packet.ProtoICMP}
	proto := func(p craft.Packet, i int) craft.Packet {
		return specPacket(p.Src, p.Dst, protos[i%len(protos)], uint16(1024+i), uint16(1+i), craft.FragNone)
	}
	vars := []variation{
		{"tcp sport", packet.ProtoTCP, craft.FragNone, sport},
		{"tcp dport", packet.ProtoTCP, craft.FragNone, dport},
		{"udp sport", packet.ProtoUDP, craft.FragNone, sport},
		{"udp first-fragment sport", packet.ProtoUDP, craft.FragFirst, sport},
		{"tcp first-fragment dport", packet.ProtoTCP, craft.FragFirst, dport},
		{"proto and ports", packet.ProtoTCP, craft.FragNone, proto},
	}
	// moves says whether the variation may change the backend: SPEC §2 for
	// the affinity and packet kind.
	moves := func(aff string, v variation) bool {
		if v.name == "proto and ports" {
			return aff != "CLIENT_IP"
		}
		return specA1Kind(aff, v.proto, v.frag) == conntrack.Kind5T
	}
	for _, aff := range specAffinities {
		for _, v := range vars {
			t.Run(aff+"/"+v.name, func(t *testing.T) {
				r := specL3Rig(t, aff, "", 16)
				moved := 0
				for c := range 40 {
					base := specPacket(specAddr("198.18.0.0", c+1), vip, v.proto, 40000, 443, v.frag)
					first, firstHash := "", uint64(0)
					for i := range 25 {
						p := v.vary(base, i)
						if p.Proto == packet.ProtoTCP {
							p.Flags = "S"
						}
						res := r.Send(p)
						got := specForward(t, res, v.name)
						if first == "" {
							first, firstHash = got, res.SelHash
						} else if !moves(aff, v) && res.SelHash != firstHash {
							t.Fatalf("client %s: varying %s changed the selection hash", p.Src, v.name)
						} else if got != first {
							moved++
							if !moves(aff, v) {
								t.Fatalf("client %s: varying %s moved the backend %s -> %s", p.Src, v.name, first, got)
							}
						}
					}
				}
				if moves(aff, v) && moved == 0 {
					t.Errorf("varying %s never moved the backend in 1000 samples; it is part of the %s hash",
						v.name, specA1Kind(aff, v.proto, v.frag))
				}
			})
		}
	}
	// The source address is part of every kind: some clients must differ.
	for _, aff := range specAffinities {
		r := specL3Rig(t, aff, "", 16)
		seen := map[string]bool{}
		for c := range 100 {
			seen[specForward(t, r.Send(cptest.TCP(specAddr("198.18.0.0", c+1).String(), specVIP4, 40000, 443, "S")), "client")] = true
		}
		if len(seen) < 8 {
			t.Errorf("%s: 100 clients reached only %d of 16 backends", aff, len(seen))
		}
	}
}

// ---------------------------------------------------------------- A2

func TestA2_ConnectionsOfOneSourceShareABackend(t *testing.T) {
	for _, aff := range []string{"CLIENT_IP_PROTO", "CLIENT_IP"} {
		for _, mode := range []string{"PER_CONNECTION", "PER_SESSION"} {
			t.Run(aff+"/"+mode, func(t *testing.T) {
				web := specSvc{Name: "web", Protocol: "TCP", Affinity: aff, Mode: mode, Primary: specAddrs("10.1.0.0", 16)}
				r := cptest.New(t, specFile(web.String(),
					specRule{Name: "web", VIP: specVIP4, Proto: "TCP", Ports: `ports = ["80", "443", "8000-8999"]`, Service: "web"}.String()))
				rng := rand.New(rand.NewPCG(3, 4))
				dports := []uint16{80, 443, 8000, 8500, 8999}
				clients := map[string]bool{}
				for c := range 60 {
					src := specAddr("198.18.0.0", c+1).String()
					want := ""
					for i := range 30 {
						sport := uint16(1024 + rng.IntN(64000))
						res := r.Send(cptest.TCP(src, specVIP4, sport, dports[i%len(dports)], "S"))
						got := specForward(t, res, "SYN")
						if want == "" {
							want = got
						} else if got != want {
							t.Fatalf("client %s: connection %d went to %s, the first to %s", src, i, got, want)
						}
						// and the rest of the connection stays there
						if ack := specForward(t, r.Send(cptest.TCP(src, specVIP4, sport, dports[i%len(dports)], "A")), "ACK"); ack != want {
							t.Fatalf("client %s: ACK went to %s, SYN to %s", src, ack, want)
						}
					}
					clients[want] = true
				}
				if len(clients) < 8 {
					t.Errorf("60 clients reached only %d of 16 backends", len(clients))
				}
			})
		}
	}
}

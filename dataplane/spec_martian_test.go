package dataplane_test

// Proofs of FR8 (sources no client can have) and FR9 (frames not sent to
// us): each is dropped with its own reason, counted, and creates no
// tracking entry, while the same frame from a client, to our MAC, is
// forwarded.

import (
	"net"
	"net/netip"
	"testing"

	"xlb/conntrack"
	"xlb/controlplane"
	"xlb/controlplane/cptest"
	"xlb/controlplane/sim"
	"xlb/dataplane"
	"xlb/dataplane/craft"
	"xlb/dataplane/packet"
)

// martianRig has a TCP service "web" (backends 10.1.0.1, 10.1.0.2 and
// 2001:db8:a::1) behind 203.0.113.10:80 and [2001:db8:f::10]:80, and a
// UDP service "dns" (backend 10.9.0.1) behind 203.0.113.53:53. The
// balancer's own addresses are sim's encapsulation sources (192.0.2.1,
// 2001:db8::1).
func martianRig(t *testing.T) *cptest.Rig {
	t.Helper()
	web := specSvc{Name: "web", Protocol: "TCP", Method: "IPIP",
		Primary: []string{"10.1.0.1", "10.1.0.2", "2001:db8:a::1"}, Extra: []string{"connection_draining_timeout_sec = 60"}}
	dns := specSvc{Name: "dns", Protocol: "UDP", Primary: []string{"10.9.0.1"}}
	return cptest.New(t, specFile(web.String(), dns.String(),
		specRule{Name: "web4", VIP: specVIP4, Proto: "TCP", Ports: `ports = ["80"]`, Service: "web"}.String(),
		specRule{Name: "web6", VIP: specVIP6, Proto: "TCP", Ports: `ports = ["80"]`, Service: "web"}.String(),
		specRule{Name: "dns", VIP: "203.0.113.53", Proto: "UDP", Ports: `ports = ["53"]`, Service: "dns"}.String()))
}

func TestFR8_SourcesNoClientHasAreDroppedByReason(t *testing.T) {
	r := martianRig(t)
	cases := []struct {
		src, dst string
		reason   dataplane.Reason
	}{
		{"0.0.0.0", specVIP4, dataplane.ReasonMartianSource},
		{"0.1.2.3", specVIP4, dataplane.ReasonMartianSource},
		{"127.0.0.1", specVIP4, dataplane.ReasonMartianSource},
		{"127.200.0.9", specVIP4, dataplane.ReasonMartianSource},
		{"224.0.0.1", specVIP4, dataplane.ReasonMartianSource},
		{"239.255.255.250", specVIP4, dataplane.ReasonMartianSource},
		{"255.255.255.255", specVIP4, dataplane.ReasonMartianSource},
		{"::", specVIP6, dataplane.ReasonMartianSource},
		{"::1", specVIP6, dataplane.ReasonMartianSource},
		{"::198.51.100.7", specVIP6, dataplane.ReasonMartianSource},      // IPv4-compatible
		{"::ffff:198.51.100.7", specVIP6, dataplane.ReasonMartianSource}, // IPv4-mapped
		{"ff02::1", specVIP6, dataplane.ReasonMartianSource},
		{"ff0e::1234", specVIP6, dataplane.ReasonMartianSource},
		{specVIP4, specVIP4, dataplane.ReasonSourceIsVIP},
		{"203.0.113.53", specVIP4, dataplane.ReasonSourceIsVIP}, // another VIP
		{specVIP6, specVIP6, dataplane.ReasonSourceIsVIP},
		{sim.SimEncapV4.String(), specVIP4, dataplane.ReasonSourceIsSelf},
		{sim.SimEncapV6.String(), specVIP6, dataplane.ReasonSourceIsSelf},
		{"10.1.0.1", specVIP4, dataplane.ReasonSourceIsBackend},
		{"10.1.0.2", specVIP4, dataplane.ReasonSourceIsBackend},
		{"2001:db8:a::1", specVIP6, dataplane.ReasonSourceIsBackend},
	}
	for i, tc := range cases {
		t.Run(tc.src, func(t *testing.T) {
			before := r.D.Stats().Drops[tc.reason].Load()
			entries := r.Conntrack().Len()
			for _, flags := range []string{"S", "A"} {
				res := r.Send(cptest.TCP(tc.src, tc.dst, uint16(30000+i), 80, flags))
				specDrop(t, res, tc.reason, tc.src+" "+flags)
			}
			if got := r.D.Stats().Drops[tc.reason].Load() - before; got != 2 {
				t.Errorf("%s counter moved by %d, want 2", tc.reason, got)
			}
			if n := r.Conntrack().Len(); n != entries {
				t.Errorf("%d tracking entries after the drops, want %d", n, entries)
			}
		})
	}

	// Sources that stay allowed: clients, a backend of another service
	// (backends may be clients of other services), link-local and class E
	// (see martianSource), and the neighbours of the martian prefixes.
	for i, src := range []string{"198.51.100.7", "10.9.0.1", "169.254.10.1", "240.0.0.1",
		"1.0.0.1", "126.255.255.255", "128.0.0.1", "223.255.255.255", "255.255.255.254",
		"fe80::1", "2001:db8:c::7", "::1:0:0:1", "fe00::1"} {
		dst := specVIP4
		if netip.MustParseAddr(src).Is6() {
			dst = specVIP6
		}
		specForward(t, r.Send(cptest.TCP(src, dst, uint16(31000+i), 80, "S")), src)
	}
}

func TestFR8_SourceIsBackendCountsForItsService(t *testing.T) {
	r := martianRig(t)
	web := specService(t, r, "web")
	dns := specService(t, r, "dns")
	specDrop(t, r.Send(cptest.UDP("10.9.0.1", "203.0.113.53", 5353, 53)), dataplane.ReasonSourceIsBackend, "dns backend to dns")
	specForward(t, r.Send(cptest.UDP("10.1.0.1", "203.0.113.53", 5353, 53)), "web backend to dns")
	specDrop(t, r.Send(cptest.TCP("10.1.0.2", specVIP4, 5353, 80, "S")), dataplane.ReasonSourceIsBackend, "web backend to web")
	if got := specServiceDrops(r, dns.ID, dataplane.ReasonSourceIsBackend); got != 1 {
		t.Errorf("dns source-is-backend %d, want 1", got)
	}
	if got := specServiceDrops(r, web.ID, dataplane.ReasonSourceIsBackend); got != 1 {
		t.Errorf("web source-is-backend %d, want 1", got)
	}
	// A removed backend's address stays refused while it drains (its
	// slot is kept until then).
	cfg := specFile(specSvc{Name: "web", Protocol: "TCP", Method: "IPIP", Primary: []string{"10.1.0.2", "2001:db8:a::1"},
		Extra: []string{"connection_draining_timeout_sec = 60"}}.String(),
		specSvc{Name: "dns", Protocol: "UDP", Primary: []string{"10.9.0.1"}}.String(),
		specRule{Name: "web4", VIP: specVIP4, Proto: "TCP", Ports: `ports = ["80"]`, Service: "web"}.String(),
		specRule{Name: "web6", VIP: specVIP6, Proto: "TCP", Ports: `ports = ["80"]`, Service: "web"}.String(),
		specRule{Name: "dns", VIP: "203.0.113.53", Proto: "UDP", Ports: `ports = ["53"]`, Service: "dns"}.String())
	r.Reload(cfg)
	specDrop(t, r.Send(cptest.TCP("10.1.0.1", specVIP4, 5354, 80, "S")), dataplane.ReasonSourceIsBackend, "removed web backend")
}

// An ICMP error is judged by who sent it (the router), not by the client
// its quoted packet names: a router's error is steered (X1), the same
// error from a backend of the service, or from a martian source, is not.
func TestFR8_ICMPErrorsAreJudgedByTheirSender(t *testing.T) {
	r := martianRig(t)
	specForward(t, r.Send(cptest.TCP(specClient4, specVIP4, 40000, 80, "S")), "syn")
	icmpFrom := func(src string) *cptest.Result {
		p := craft.Packet{Src: netip.MustParseAddr(src), Dst: netip.MustParseAddr(specVIP4), Proto: packet.ProtoICMP,
			ICMPType: 3, ICMPCode: 4,
			Inner: &craft.Packet{Src: netip.MustParseAddr(specVIP4), Dst: netip.MustParseAddr(specClient4),
				Proto: packet.ProtoTCP, SrcPort: 80, DstPort: 40000}}
		return r.Send(p)
	}
	res := icmpFrom("198.51.100.254")
	specForward(t, res, "router's error")
	if !res.ICMPSteered {
		t.Errorf("router's error not steered")
	}
	specDrop(t, icmpFrom("10.1.0.1"), dataplane.ReasonSourceIsBackend, "backend's error")
	specDrop(t, icmpFrom("127.0.0.1"), dataplane.ReasonMartianSource, "loopback error")
}

func TestFR9_FramesNotSentToOurMACAreDropped(t *testing.T) {
	r := martianRig(t)
	for i, mac := range []net.HardwareAddr{
		{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, // broadcast
		{0x01, 0x00, 0x5e, 0x00, 0x00, 0x01}, // IPv4 multicast
		{0x33, 0x33, 0x00, 0x00, 0x00, 0x01}, // IPv6 multicast
		{0x02, 0x1b, 0x00, 0x00, 0x00, 0x02}, // another host's unicast
	} {
		t.Run(mac.String(), func(t *testing.T) {
			before := r.D.Stats().Drops[dataplane.ReasonNotOurMAC].Load()
			entries := r.Conntrack().Len()
			for _, dst := range []string{specVIP4, specVIP6} {
				p := cptest.TCP(specClient4, dst, uint16(20000+i), 80, "S")
				if dst == specVIP6 {
					p.Src = netip.MustParseAddr(specClient6)
				}
				p.DstMAC = mac
				specDrop(t, r.Send(p), dataplane.ReasonNotOurMAC, dst)
			}
			if got := r.D.Stats().Drops[dataplane.ReasonNotOurMAC].Load() - before; got != 2 {
				t.Errorf("not-our-mac moved by %d, want 2", got)
			}
			if n := r.Conntrack().Len(); n != entries {
				t.Errorf("%d tracking entries, want %d", n, entries)
			}
		})
	}
	// Our own MAC (craft's default destination, sim's local MAC) forwards,
	// and non-VIP traffic to broadcast (ARP's kind) stays with the kernel.
	specForward(t, r.Send(cptest.TCP(specClient4, specVIP4, 20100, 80, "S")), "our mac")
	p := cptest.UDP(specClient4, "198.51.100.255", 20101, 53)
	p.DstMAC = net.HardwareAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
	if res := r.Send(p); res.Verdict != dataplane.VerdictPass {
		t.Errorf("broadcast to a non-VIP: %s, want pass", res.Verdict)
	}
}

// The balancer's own addresses and its subnets' broadcasts, as `xlb run`
// reads them from the interface (SelfAddrs), are refused as sources.
func TestFR8_InterfaceAddressesAndSubnetBroadcasts(t *testing.T) {
	self, bcast := dataplane.SelfAddrs([]netip.Prefix{
		netip.MustParsePrefix("10.20.0.5/24"),
		netip.MustParsePrefix("10.30.0.1/31"),
		netip.MustParsePrefix("2001:db8:77::5/64"),
	})
	wantSelf := []string{"10.20.0.5", "10.30.0.1", "2001:db8:77::5"}
	if len(self) != len(wantSelf) || len(bcast) != 1 || bcast[0] != netip.MustParseAddr("10.20.0.255") {
		t.Fatalf("SelfAddrs = %v, %v; want %v and [10.20.0.255]", self, bcast, wantSelf)
	}
	ct, err := conntrack.New(1024)
	if err != nil {
		t.Fatal(err)
	}
	eng := dataplane.NewEngine(ct)
	local := sim.SimLocal()
	local.Self, local.SubnetBroadcasts = self, bcast
	web := specSvc{Name: "web", Protocol: "TCP", Method: "IPIP", Primary: []string{"10.1.0.1"}}
	cfg := cptest.Config(t, specFile(web.String(),
		specRule{Name: "web4", VIP: specVIP4, Proto: "TCP", Ports: `ports = ["80"]`, Service: "web"}.String(),
		specRule{Name: "web6", VIP: specVIP6, Proto: "TCP", Ports: `ports = ["80"]`, Service: "web"}.String()))
	if _, err := controlplane.New(cfg, eng, controlplane.Options{Local: local, InitialHealthy: true, InitialWeight: 1000}, 0); err != nil {
		t.Fatal(err)
	}
	dc := eng.NewDecider()
	for _, tc := range []struct {
		src, dst string
		reason   dataplane.Reason
	}{
		{"10.20.0.5", specVIP4, dataplane.ReasonSourceIsSelf},
		{"10.30.0.1", specVIP4, dataplane.ReasonSourceIsSelf},
		{"2001:db8:77::5", specVIP6, dataplane.ReasonSourceIsSelf},
		{"10.20.0.255", specVIP4, dataplane.ReasonMartianSource},
		{"10.20.0.254", specVIP4, dataplane.ReasonNone},
	} {
		p := cptest.TCP(tc.src, tc.dst, 40000, 80, "S")
		frame, err := craft.Build(&p)
		if err != nil {
			t.Fatal(err)
		}
		d, _ := decideFrame(dc, frame, 0)
		want := dataplane.VerdictDrop
		if tc.reason == dataplane.ReasonNone {
			want = dataplane.VerdictForward
		}
		if d.Verdict != want || d.Reason != tc.reason {
			t.Errorf("%s: %s %q, want %s %q", tc.src, d.Verdict, d.Reason, want, tc.reason)
		}
	}
}

// TestFR8_InterfaceAddressesFollowed: the interface's addresses changed
// while xlb runs (ControlPlane.SetSelf, from the appliance's re-read): a
// source added is the balancer's own from the next snapshot on, one
// removed is a client's again; the same lists again publish nothing.
func TestFR8_InterfaceAddressesFollowed(t *testing.T) {
	ct, err := conntrack.New(1024)
	if err != nil {
		t.Fatal(err)
	}
	eng := dataplane.NewEngine(ct)
	local := sim.SimLocal()
	local.Self, local.SubnetBroadcasts = dataplane.SelfAddrs([]netip.Prefix{netip.MustParsePrefix("10.30.0.1/31")})
	web := specSvc{Name: "web", Protocol: "TCP", Method: "IPIP", Primary: []string{"10.1.0.1"}}
	cfg := cptest.Config(t, specFile(web.String(),
		specRule{Name: "web4", VIP: specVIP4, Proto: "TCP", Ports: `ports = ["80"]`, Service: "web"}.String()))
	cp, err := controlplane.New(cfg, eng, controlplane.Options{Local: local, InitialHealthy: true, InitialWeight: 1000}, 0)
	if err != nil {
		t.Fatal(err)
	}
	dc := eng.NewDecider()
	verdict := func(src string) (dataplane.Verdict, dataplane.Reason) {
		p := cptest.TCP(src, specVIP4, 40000, 80, "S")
		frame, err := craft.Build(&p)
		if err != nil {
			t.Fatal(err)
		}
		d, _ := decideFrame(dc, frame, 0)
		return d.Verdict, d.Reason
	}
	if v, r := verdict("10.20.0.6"); v != dataplane.VerdictForward {
		t.Fatalf("10.20.0.6 before it is ours: %s %q, want forward", v, r)
	}
	self, bcast := dataplane.SelfAddrs([]netip.Prefix{netip.MustParsePrefix("10.20.0.6/24")})
	if !cp.SetSelf(self, bcast, 1000) {
		t.Fatal("SetSelf with new addresses reported no change")
	}
	for _, tc := range []struct {
		src    string
		v      dataplane.Verdict
		reason dataplane.Reason
	}{
		{"10.20.0.6", dataplane.VerdictDrop, dataplane.ReasonSourceIsSelf},
		{"10.20.0.255", dataplane.VerdictDrop, dataplane.ReasonMartianSource},
		{"10.30.0.1", dataplane.VerdictForward, dataplane.ReasonNone},
	} {
		if v, r := verdict(tc.src); v != tc.v || r != tc.reason {
			t.Errorf("%s after the change: %s %q, want %s %q", tc.src, v, r, tc.v, tc.reason)
		}
	}
	gen := cp.Snapshot().Gen
	if cp.SetSelf(self, bcast, 2000) || cp.Snapshot().Gen != gen {
		t.Error("SetSelf with the same addresses published a snapshot")
	}
}

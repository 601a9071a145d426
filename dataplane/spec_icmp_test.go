package dataplane_test

// Engine-level proof of SPEC X1: ICMP errors for a VIP are steered by the
// quoted flow, reversed, to the backend that owns it, and never create or
// replace an entry.

import (
	"bytes"
	"net/netip"
	"testing"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"

	"xlb/conntrack"
	"xlb/controlplane/cptest"
	"xlb/dataplane"
	"xlb/dataplane/craft"
	"xlb/dataplane/packet"
)

const specRouter4, specRouter6 = "198.51.100.254", "2001:db8:e::1"

// specX1Config has a TCP service on VIP:443 for each family and an
// untracked UDP service (affinity NONE) on specVIP4:53; n backends each.
func specX1Config(n int) string {
	return specFile(
		specSvc{Name: "web4", Protocol: "TCP", Primary: specAddrs("10.1.0.0", n)}.String(),
		specSvc{Name: "web6", Protocol: "TCP", Primary: specAddrs("2001:db8:a::", n)}.String(),
		specSvc{Name: "dns", Protocol: "UDP", Primary: specAddrs("10.2.0.0", n)}.String(),
		specRule{Name: "web4", VIP: specVIP4, Proto: "TCP", Ports: `ports = ["443"]`, Service: "web4"}.String(),
		specRule{Name: "web6", VIP: specVIP6, Proto: "TCP", Ports: `ports = ["443"]`, Service: "web6"}.String(),
		specRule{Name: "dns", VIP: specVIP4, Proto: "UDP", Ports: `ports = ["53"]`, Service: "dns"}.String())
}

// specICMPError is an ICMP error from a router to the VIP that quotes the
// packet q (sent by the VIP to a client): v4 type/code or v6 type/code
// according to q's family.
func specICMPError(q craft.Packet, typ, code uint8) craft.Packet {
	if q.Src.Is4() {
		return craft.Packet{Src: netip.MustParseAddr(specRouter4), Dst: q.Src, Proto: packet.ProtoICMP, ICMPType: typ, ICMPCode: code, Inner: &q}
	}
	return craft.Packet{Src: netip.MustParseAddr(specRouter6), Dst: q.Src, Proto: packet.ProtoICMPv6, ICMPType: typ, ICMPCode: code, Inner: &q}
}

// specReply is the packet a backend sends back to a client (DSR: from the
// VIP), which an ICMP error on its path would quote.
func specReply(p craft.Packet) craft.Packet {
	return craft.Packet{Src: p.Dst, Dst: p.Src, Proto: p.Proto, SrcPort: p.DstPort, DstPort: p.SrcPort, Flags: "SA"}
}

// specNoTableChange fails when the table stored, updated or dropped anything
// since st was taken.
func specNoTableChange(tb testing.TB, r *cptest.Rig, st conntrack.Stats, n int, what string) {
	tb.Helper()
	now := r.Conntrack().Stats()
	if now.Inserts != st.Inserts || now.Updates != st.Updates || now.Deletes != st.Deletes || r.Conntrack().Len() != n {
		tb.Fatalf("%s changed the table: %+v -> %+v, %d -> %d entries", what, st, now, n, r.Conntrack().Len())
	}
}

func TestX1_ICMPErrorsFollowTheQuotedFlow(t *testing.T) {
	r := cptest.New(t, specX1Config(4))
	type conn struct {
		syn     craft.Packet
		svc     string
		backend string
	}
	var conns []*conn
	for i := range specClients {
		conns = append(conns,
			&conn{syn: cptest.TCP(specClientN(i), specVIP4, uint16(40000+i), 443, "S"), svc: "web4"},
			&conn{syn: cptest.TCP(specAddr("2001:db8:c::", i+1).String(), specVIP6, uint16(40000+i), 443, "S"), svc: "web6"})
	}
	for _, c := range conns {
		c.backend = specForward(t, r.Send(c.syn), "SYN")
		// The handshake completes: the entry is established and keeps the
		// service's idle timeout, not the short one of a SYN alone.
		ack := c.syn
		ack.Flags = "A"
		specForward(t, r.Send(ack), "ACK")
	}
	// Grow the sets: about half of the flows would now hash elsewhere, so a
	// hit is told apart from a fresh selection.
	r.At(5).Reload(specX1Config(8))

	t.Run("tracked flow: hit", func(t *testing.T) {
		moved := 0
		for _, c := range conns {
			typ, code, what := uint8(3), uint8(4), "fragmentation needed"
			if c.syn.Src.Is6() {
				typ, code, what = 2, 0, "packet too big"
			}
			q := specReply(c.syn)
			st, n := r.Conntrack().Stats(), r.Conntrack().Len()
			res := r.Send(specICMPError(q, typ, code))
			got := specForward(t, res, what)
			if !res.ICMPSteered || res.Track != dataplane.TrackHit || got != c.backend {
				t.Fatalf("%s for %v: steered %v track %s backend %s, want a hit on the flow's %s",
					what, c.syn.Src, res.ICMPSteered, res.Track, got, c.backend)
			}
			// The decision is about the client's flow: the quote reversed.
			if res.Flow.Src != dataplane.Addr16(c.syn.Src) || res.Flow.Dst != dataplane.Addr16(c.syn.Dst) ||
				res.Flow.SrcPort != c.syn.SrcPort || res.Flow.DstPort != c.syn.DstPort || res.Flow.Proto != packet.ProtoTCP {
				t.Fatalf("%s: decided for flow %+v, want the reversed quote", what, res.Flow)
			}
			specNoTableChange(t, r, st, n, what)
			// L2_DSR: the error itself goes to the backend unchanged but for
			// the MACs, so the backend's stack sees the original ICMP.
			if !bytes.Equal(res.Out[12:], res.In[12:]) || !bytes.Equal(res.Out[0:6], res.Backend.MAC[:]) {
				t.Fatalf("%s: rewritten frame differs beyond the MACs", what)
			}
			h := specHash(conntrack.Kind5T, c.syn.Src, c.syn.Dst, c.syn.SrcPort, c.syn.DstPort, packet.ProtoTCP)
			if specPick(t, r, c.svc, h).Name != c.backend {
				moved++
			}
		}
		if moved == 0 {
			t.Fatal("no flow's hash moved: a hit cannot be told from a selection")
		}
	})

	t.Run("other unreachable codes", func(t *testing.T) {
		c := conns[0]
		for _, code := range []uint8{0, 1, 3, 13} {
			res := r.Send(specICMPError(specReply(c.syn), 3, code))
			if got := specForward(t, res, "unreachable"); !res.ICMPSteered || got != c.backend {
				t.Errorf("dest unreachable code %d: steered %v backend %s, want %s", code, res.ICMPSteered, got, c.backend)
			}
		}
	})

	t.Run("RFC 792 minimal quote", func(t *testing.T) {
		// Only the IP header and 8 bytes of TCP, as old routers send.
		c := conns[0]
		q := specReply(c.syn)
		inner, err := craft.BuildIP(&q)
		if err != nil {
			t.Fatal(err)
		}
		frame := specBuild(t,
			&layers.Ethernet{SrcMAC: craft.ClientMAC, DstMAC: craft.LocalMAC, EthernetType: layers.EthernetTypeIPv4},
			&layers.IPv4{Version: 4, IHL: 5, TTL: 64, Protocol: layers.IPProtocolICMPv4,
				SrcIP: netip.MustParseAddr(specRouter4).AsSlice(), DstIP: c.syn.Dst.AsSlice()},
			&layers.ICMPv4{TypeCode: layers.CreateICMPv4TypeCode(3, 4), Seq: 1400},
			gopacket.Payload(inner[:28]))
		res := r.SendFrame(frame)
		if got := specForward(t, res, "short quote"); !res.ICMPSteered || res.Track != dataplane.TrackHit || got != c.backend {
			t.Errorf("short quote: steered %v track %s backend %s, want a hit on %s", res.ICMPSteered, res.Track, got, c.backend)
		}
	})

	t.Run("untracked flow: the reversed flow's hash", func(t *testing.T) {
		unseen := []craft.Packet{
			cptest.TCP("198.18.200.1", specVIP4, 50000, 443, "S"),          // tracked protocol, no entry
			cptest.TCP("2001:db8:c::200:1", specVIP6, 50000, 443, "S"),     // idem, IPv6
			cptest.UDP("198.18.200.2", specVIP4, 5353, 53),                 // untracked protocol (NONE)
			cptest.UDP(specClientN(0), specVIP4, conns[0].syn.SrcPort, 53), // a client with a TCP entry: other service
		}
		for _, p := range unseen {
			typ, code, svc := uint8(3), uint8(4), map[packet.Proto]string{packet.ProtoTCP: "web4", packet.ProtoUDP: "dns"}[p.Proto]
			if p.Src.Is6() {
				typ, code, svc = 2, 0, "web6"
			}
			st, n := r.Conntrack().Stats(), r.Conntrack().Len()
			res := r.Send(specICMPError(specReply(p), typ, code))
			got := specForward(t, res, "error for an unseen flow")
			want := specPick(t, r, svc, specHash(conntrack.Kind5T, p.Src, p.Dst, p.SrcPort, p.DstPort, p.Proto)).Name
			if !res.ICMPSteered || res.Track != dataplane.TrackUntracked || got != want || res.Service.Name != svc {
				t.Fatalf("error quoting %v→%v: steered %v track %s service %s backend %s, want untracked on %s's %s",
					p.Dst, p.Src, res.ICMPSteered, res.Track, res.Service.Name, got, svc, want)
			}
			specNoTableChange(t, r, st, n, "an error for an unseen flow")
			// The flow itself, arriving later, lands where its error went.
			if first := specForward(t, r.Send(p), "the flow"); first != got {
				t.Errorf("the flow went to %s, its earlier ICMP error to %s", first, got)
			}
		}
	})

	t.Run("entry of a removed backend is not replaced", func(t *testing.T) {
		c := conns[0]
		// Remove the flow's backend (draining 0: its entries are invalid at
		// once, M5). The error is steered by selection and leaves the stale
		// entry for the flow's own next packet to replace.
		keep := specAddrs("10.1.0.0", 8)
		var rest []string
		for _, ip := range keep {
			if ip != c.backend {
				rest = append(rest, ip)
			}
		}
		text := specFile(
			specSvc{Name: "web4", Protocol: "TCP", Primary: rest}.String(),
			specSvc{Name: "web6", Protocol: "TCP", Primary: specAddrs("2001:db8:a::", 8)}.String(),
			specSvc{Name: "dns", Protocol: "UDP", Primary: specAddrs("10.2.0.0", 8)}.String(),
			specRule{Name: "web4", VIP: specVIP4, Proto: "TCP", Ports: `ports = ["443"]`, Service: "web4"}.String(),
			specRule{Name: "web6", VIP: specVIP6, Proto: "TCP", Ports: `ports = ["443"]`, Service: "web6"}.String(),
			specRule{Name: "dns", VIP: specVIP4, Proto: "UDP", Ports: `ports = ["53"]`, Service: "dns"}.String())
		r.At(10).Reload(text)
		st, n := r.Conntrack().Stats(), r.Conntrack().Len()
		res := r.Send(specICMPError(specReply(c.syn), 3, 4))
		got := specForward(t, res, "error for a removed backend's flow")
		want := specPick(t, r, "web4", specHash(conntrack.Kind5T, c.syn.Src, c.syn.Dst, c.syn.SrcPort, c.syn.DstPort, packet.ProtoTCP)).Name
		if res.Track != dataplane.TrackUntracked || got != want || got == c.backend {
			t.Fatalf("track %s backend %s, want untracked on %s (not the removed %s)", res.Track, got, want, c.backend)
		}
		specNoTableChange(t, r, st, n, "an error for a stale entry")
		ack := c.syn
		ack.Flags = "A"
		if res := r.Send(ack); res.Track != dataplane.TrackReplaced || res.BackendName() != want {
			t.Errorf("the flow's next packet: track %s backend %s, want replaced on %s", res.Track, res.BackendName(), want)
		}
	})

	t.Run("NDP is passed", func(t *testing.T) {
		for _, typ := range []uint8{133, 134, 135, 136, 137} {
			p := cptest.Proto(specRouter6, specVIP6, packet.ProtoICMPv6)
			p.ICMPType = typ
			frame, err := craft.Build(&p)
			if err != nil {
				t.Fatal(err)
			}
			st, n := r.Conntrack().Stats(), r.Conntrack().Len()
			d, before, after := specDecideRaw(r, frame)
			if d.Verdict != dataplane.VerdictPass || !bytes.Equal(before, after) {
				t.Errorf("NDP type %d to the VIP: verdict %s (touched %v), want pass untouched", typ, d.Verdict, !bytes.Equal(before, after))
			}
			specNoTableChange(t, r, st, n, "NDP")
		}
	})
}

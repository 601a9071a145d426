package neigh

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/vishvananda/netlink"

	"xlb/config"
)

func TestJudge(t *testing.T) {
	mac := [6]byte{2, 0, 0, 0, 0, 1}
	for _, c := range []struct {
		name   string
		e      entry
		ok     bool
		known  bool
		reason string
		probe  bool
	}{
		{"missing", entry{}, false, false, ReasonResolving, true},
		{"none", entry{mac, netlink.NUD_NONE}, true, false, ReasonResolving, true},
		{"incomplete", entry{mac, netlink.NUD_INCOMPLETE}, true, false, ReasonResolving, false},
		{"failed with old MAC", entry{mac, netlink.NUD_FAILED}, true, false, ReasonNoAnswer, true},
		{"reachable zero MAC", entry{[6]byte{}, netlink.NUD_REACHABLE}, true, false, ReasonZeroMAC, false},
		{"noarp zero MAC", entry{[6]byte{}, netlink.NUD_NOARP}, true, false, ReasonZeroMAC, false},
		{"reachable", entry{mac, netlink.NUD_REACHABLE}, true, true, "", false},
		{"stale", entry{mac, netlink.NUD_STALE}, true, true, "", true},
		{"delay", entry{mac, netlink.NUD_DELAY}, true, true, "", false},
		{"probe", entry{mac, netlink.NUD_PROBE}, true, true, "", false},
		{"permanent", entry{mac, netlink.NUD_PERMANENT}, true, true, "", false},
	} {
		got, known, reason := judge(c.e, c.ok)
		if known != c.known || reason != c.reason {
			t.Errorf("%s: known %v reason %q; want %v %q", c.name, known, reason, c.known, c.reason)
		}
		if known && got != mac || !known && got != ([6]byte{}) {
			t.Errorf("%s: MAC %x with known=%v", c.name, got, known)
		}
		if p := needsProbe(c.e, c.ok); p != c.probe {
			t.Errorf("%s: needsProbe %v, want %v", c.name, p, c.probe)
		}
	}
}

func TestKeysShareIPIPAndGUE(t *testing.T) {
	a := netip.MustParseAddr("10.1.2.3")
	mapped := netip.AddrFrom16(a.As16())
	if keyOf(a, config.ForwardIPIP) != keyOf(mapped, config.ForwardGUE) {
		t.Error("IPIP and GUE (and the v4-mapped form) do not share a key")
	}
	if keyOf(a, config.ForwardIPIP) == keyOf(a, config.ForwardL2DSR) {
		t.Error("L2_DSR shares a key with IPIP")
	}
	ll := netip.MustParseAddr("fe80::1%eth0")
	if keyOf(ll, config.ForwardL2DSR).addr != netip.MustParseAddr("fe80::1") {
		t.Error("zone kept in key")
	}
}

func TestTargetsOf(t *testing.T) {
	ep := func(s string, mac bool) config.Endpoint {
		return config.Endpoint{IP: netip.MustParseAddr(s), HasMAC: mac, MAC: [6]byte{2, 0, 0, 0, 0, 9}}
	}
	cfg := &config.Config{Services: []config.Service{
		{ForwardingMethod: config.ForwardL2DSR, Groups: []config.Group{
			{Endpoints: []config.Endpoint{ep("10.0.0.1", false), ep("10.0.0.2", true)}},
		}},
		{ForwardingMethod: config.ForwardGUE, Groups: []config.Group{
			{Endpoints: []config.Endpoint{ep("10.0.0.3", true)}},
			{Failover: true, Endpoints: []config.Endpoint{ep("fd00::4", false)}},
		}},
	}}
	want := []Target{
		{Addr: netip.MustParseAddr("10.0.0.1"), Method: config.ForwardL2DSR},
		{Addr: netip.MustParseAddr("10.0.0.3"), Method: config.ForwardGUE, Static: true},
		{Addr: netip.MustParseAddr("fd00::4"), Method: config.ForwardGUE},
	}
	if got := TargetsOf(cfg); !slices.Equal(got, want) {
		t.Errorf("TargetsOf = %+v\nwant %+v", got, want)
	}
}

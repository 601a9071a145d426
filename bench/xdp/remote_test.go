package xdp

import (
	"net"
	"strings"
	"testing"

	"xlb/config"
)

func TestRemoteXLBConfig(t *testing.T) {
	mac := net.HardwareAddr{0x02, 0x11, 0x22, 0x33, 0x44, 0x55}
	text, err := RemoteXLBConfig(Remote{GenIface: "enp1s0f0", SinkIface: "enp1s0f1", SinkMAC: mac, XLBIface: "eth1", CPU: 2, Backends: 3})
	if err != nil {
		t.Fatal(err)
	}
	c, err := config.Parse("xlb.toml", []byte(text))
	if err != nil {
		t.Fatalf("%v\n%s", err, text)
	}
	if c.Dataplane.Interface != "eth1" || c.Dataplane.ZeroCopy != config.ZeroCopyOn {
		t.Errorf("interface %q, zero_copy %v; want eth1, on", c.Dataplane.Interface, c.Dataplane.ZeroCopy)
	}
	if len(c.Services) != 2 || len(c.Rules) != 2 {
		t.Fatalf("%d services, %d rules", len(c.Services), len(c.Rules))
	}
	for _, s := range c.Services {
		eps := s.Groups[0].Endpoints
		if len(eps) != 3 {
			t.Fatalf("service %s: %d endpoints", s.Name, len(eps))
		}
		for _, e := range eps {
			if net.HardwareAddr(e.MAC[:]).String() != mac.String() {
				t.Errorf("service %s endpoint %s: mac %v, want the sink's %v", s.Name, e.Name, e.MAC, mac)
			}
		}
	}
	if !strings.Contains(text, "enp1s0f1") {
		t.Errorf("config does not name the sink port:\n%s", text)
	}
	for _, bad := range []Remote{
		{SinkMAC: mac},                       // no xlb interface
		{SinkMAC: mac[:4], XLBIface: "eth1"}, // short MAC
		{SinkMAC: net.HardwareAddr{1, 0, 0, 0, 0, 1}, XLBIface: "eth1"}, // multicast
		{SinkMAC: mac, XLBIface: "eth1", Backends: 65},
	} {
		if _, err := RemoteXLBConfig(bad); err == nil {
			t.Errorf("%+v: accepted", bad)
		}
	}
}

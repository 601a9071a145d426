package main

import (
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"xlb/bench/xdp"
	"xlb/config"
	"xlb/internal/nettest"
)

// TestXDPRemoteFlagsRefused: the real-NIC flags that are not implemented,
// or incomplete, fail before anything is touched.
func TestXDPRemoteFlagsRefused(t *testing.T) {
	for _, args := range [][]string{
		{"--remote-xlb"},       // no --gen-iface
		{"--sink-iface", "x0"}, // no --gen-iface
		{"--gen-iface", "x0"},  // xlb local on an existing port: not implemented
		{"--gen-iface", "x0", "--sink-iface", "x1", "--remote-xlb"}, // two ports: not implemented
		{"--gen-iface", "nosuch-zc0", "--remote-xlb"},               // no such interface
	} {
		var c common
		if _, err := runXDP(args, &c, io.Discard); err == nil || errors.Is(err, xdp.ErrExistingNotImplemented) {
			t.Errorf("%v: err %v, want a refusal before the config is written", args, err)
		}
	}
}

// TestXDPRemoteConfigOnVeth (root) passes a veth of its own namespace as
// the "existing" port: the configuration written for the remote xlb must
// parse, name the xlb host's interface and carry the port's MAC as every
// backend's; the run then says that measuring is not implemented.
func TestXDPRemoteConfigOnVeth(t *testing.T) {
	nettest.RequireRoot(t)
	ns := nettest.NewNS(t, nettest.UniqueName("lbzc"))
	mac := net.HardwareAddr{0x02, 0x5a, 0x43, 0, 0, 1}
	ns.AddVeth(t, nettest.Veth{Name: "zcgen", PeerName: "zcxlb", MAC: mac, NoIPv6: true})
	out := filepath.Join(t.TempDir(), "xlb.toml")
	var runErr error
	if err := ns.Do(func() error {
		var c common
		_, runErr = runXDP([]string{"--gen-iface", "zcgen", "--remote-xlb", "--xlb-iface", "ens1f0", "--xlb-cpu", "3", "--backends", "2", "--xlb-config", out}, &c, io.Discard)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(runErr, xdp.ErrExistingNotImplemented) {
		t.Fatalf("err %v, want %v", runErr, xdp.ErrExistingNotImplemented)
	}
	text, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Parse("xlb.toml", text)
	if err != nil {
		t.Fatalf("%v\n%s", err, text)
	}
	if cfg.Dataplane.Interface != "ens1f0" || cfg.Dataplane.ZeroCopy != config.ZeroCopyOn || len(cfg.Dataplane.CPUs) != 1 || cfg.Dataplane.CPUs[0] != 3 {
		t.Errorf("dataplane %+v: want ens1f0, zero_copy on, cpus [3]", cfg.Dataplane)
	}
	for _, s := range cfg.Services {
		if n := len(s.Groups[0].Endpoints); n != 2 {
			t.Errorf("service %s: %d endpoints, want 2", s.Name, n)
		}
		for _, e := range s.Groups[0].Endpoints {
			if got := net.HardwareAddr(e.MAC[:]).String(); got != mac.String() {
				t.Errorf("service %s endpoint %s: mac %s, want the port's %s", s.Name, e.Name, got, mac)
			}
		}
	}
	if !strings.Contains(string(text), "zcgen") {
		t.Errorf("config does not name the load host's port:\n%s", text)
	}
}

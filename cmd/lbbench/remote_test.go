package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"xlb/bench/baseline/xdpfwd"
	"xlb/bench/report"
	"xlb/bench/xdp"
	"xlb/bench/xdp/topo"
	"xlb/config"
	"xlb/dataplane/xdpprog"
	"xlb/internal/nettest"
)

// TestXDPRemoteFlagsRefused: the real-NIC flags that are not implemented,
// or incomplete, fail before anything is touched.
func TestXDPRemoteFlagsRefused(t *testing.T) {
	for _, args := range [][]string{
		{"--remote-xlb"},                              // no --gen-iface
		{"--sink-iface", "x0"},                        // no --gen-iface
		{"--gen-iface", "x0"},                         // xlb local on an existing port: not implemented
		{"--gen-iface", "nosuch-zc0", "--remote-xlb"}, // no such interface
		{"--gen-iface", "lo", "--sink-iface", "nosuch-zc1", "--remote-xlb"}, // no such sink port
		{"--gen-iface", "lo", "--remote-xlb", "--xlb-mac", "zz"},            // bad MAC
		{"--serve-xdpfwd", "nosuch-zc0", "--sink-mac", "zz"},                // bad sink MAC
		{"--serve-xdpfwd", "nosuch-zc0", "--sink-mac", "01:00:5e:00:00:01"}, // multicast sink MAC
	} {
		var c common
		if _, err := runXDP(args, &c, io.Discard); err == nil || errors.Is(err, errNoXLBMAC) {
			t.Errorf("%v: err %v, want a refusal before the config is written", args, err)
		}
	}
}

// TestXDPRemoteConfigOnVeth (root) passes a veth of its own namespace as
// the "existing" port: the configuration written for the remote xlb must
// parse, name the xlb host's interface and carry the port's MAC as every
// backend's; without --xlb-mac the run stops there and says so.
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
	if !errors.Is(runErr, errNoXLBMAC) {
		t.Fatalf("err %v, want %v", runErr, errNoXLBMAC)
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

// TestXDPExistingVeth (root) measures over "existing" interfaces: a veth
// pair in a namespace of its own stands for the NIC pair, the in-kernel
// XDP forwarder (b) on the far end for the remote xlb (it sends each
// frame of the VIP back to the port's MAC, as RemoteXLBConfig's backends
// do). lbbench gets only the port's name and the far end's MAC; frames
// must come back and the report must be made. The namespace, and so the
// pair, is removed when the test ends, also on failure.
func TestXDPExistingVeth(t *testing.T) {
	nettest.RequireRoot(t)
	ns := nettest.NewNS(t, nettest.UniqueName("lbzc"))
	mac := net.HardwareAddr{0x02, 0x5a, 0x43, 0, 0, 1}
	farMAC := net.HardwareAddr{0x02, 0x5a, 0x43, 0, 0, 2}
	ns.AddVeth(t, nettest.Veth{Name: "zcgen", PeerName: "zcxlb", MAC: mac, PeerMAC: farMAC, NoIPv6: true})
	fwd, err := xdpfwd.Start(context.Background(), xdpfwd.Config{NS: ns.Name, Iface: "zcxlb", VIPs: []netip.Addr{topo.VIP},
		Backends: []net.HardwareAddr{mac}, Mode: xdpprog.ModeNative})
	if err != nil {
		t.Fatal(err)
	}
	defer fwd.Close()
	var r report.Report
	var runErr error
	if err := ns.Do(func() error {
		var c common
		r, runErr = runXDP([]string{"--quick", "--gen-iface", "zcgen", "--remote-xlb", "--xlb-mac", farMAC.String(), "--forwarders", "xlb",
			"--duration", "200ms", "--trial", "100ms", "--trials", "3"}, &c, io.Discard)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if runErr != nil {
		t.Fatal(runErr)
	}
	data, ok := r.Data.(xdp.Data)
	if !ok || len(r.Tables) != 1 || len(r.Notes) == 0 {
		t.Fatalf("data %T, %d tables, %d notes", r.Data, len(r.Tables), len(r.Notes))
	}
	loads := map[string]bool{}
	for _, c := range data.Cases {
		loads[c.Load] = true
		if c.Variant != "xlb" || c.Size != 64 {
			t.Errorf("case %s %d B: want xlb, 64 B", c.Variant, c.Size)
		}
		if c.Load == "full" && (c.Sent == 0 || c.Forwarded == 0 || c.Other != 0) {
			t.Errorf("full load: sent %d, back %d (%d to another MAC): frames did not come back", c.Sent, c.Forwarded, c.Other)
		}
	}
	for _, l := range []string{"full", "lossless", "half"} {
		if !loads[l] {
			t.Errorf("no %s case: %v", l, loads)
		}
	}
	st, err := fwd.Stats()
	if err != nil || st.TX == 0 {
		t.Errorf("the far end sent back %d frames (%v)", st.TX, err)
	}
	t.Logf("%v", r.Tables[0].Rows)
}

// TestXDPExistingTwoPorts (root): generator and sink on separate ports. A
// namespace of the test's own holds a bridge (the switch a NIC pair would
// be cabled to) with three veth pairs on it: the generator's port, the
// sink's port and the far host's port, where the in-kernel forwarder (b)
// stands for the remote xlb, started as --serve-xdpfwd starts it (the VIP's
// frames back to the sink port's MAC). Frames sent from the generator's
// port must come back on the sink's, none on the generator's, and the
// report must name both ports. Removed with the namespace, also on
// failure.
func TestXDPExistingTwoPorts(t *testing.T) {
	nettest.RequireRoot(t)
	ns := nettest.NewNS(t, nettest.UniqueName("lbzt"))
	genMAC := net.HardwareAddr{0x02, 0x5a, 0x54, 0, 0, 1}
	sinkMAC := net.HardwareAddr{0x02, 0x5a, 0x54, 0, 0, 2}
	farMAC := net.HardwareAddr{0x02, 0x5a, 0x54, 0, 0, 3}
	ns.AddVeth(t, nettest.Veth{Name: "ztgen", PeerName: "ztgb", MAC: genMAC, NoIPv6: true})
	ns.AddVeth(t, nettest.Veth{Name: "ztsink", PeerName: "ztsb", MAC: sinkMAC})
	ns.AddVeth(t, nettest.Veth{Name: "ztfar", PeerName: "ztfb", MAC: farMAC})
	if err := ns.Do(func() error {
		br := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: "ztbr"}}
		if err := netlink.LinkAdd(br); err != nil {
			return err
		}
		for _, port := range []struct {
			name string
			mac  net.HardwareAddr
		}{{"ztgb", genMAC}, {"ztsb", sinkMAC}, {"ztfb", farMAC}} {
			l, err := netlink.LinkByName(port.name)
			if err != nil {
				return err
			}
			if err := netlink.LinkSetMaster(l, br); err != nil {
				return err
			}
			// Static entries: the bridge never floods the bench's frames
			// to a port they are not for (the sink would count them).
			if err := netlink.NeighSet(&netlink.Neigh{LinkIndex: l.Attrs().Index, Family: unix.AF_BRIDGE,
				Flags: netlink.NTF_MASTER, State: netlink.NUD_NOARP, HardwareAddr: port.mac}); err != nil {
				return fmt.Errorf("fdb %s on %s: %w", port.mac, port.name, err)
			}
		}
		return netlink.LinkSetUp(br)
	}); err != nil {
		t.Fatal(err)
	}
	// The far end: what `lbbench xdp --serve-xdpfwd ztfar --sink-mac S`
	// runs, on a thread in the namespace until the measurement is done,
	// with a pass program on its bridge port (the veth's peer), without
	// which veth drops its XDP_TX frames (a NIC needs nothing of the kind).
	serveCtx, stopServe := context.WithCancel(context.Background())
	served := make(chan error, 1)
	var serveSt xdpfwd.Stats
	go func() {
		served <- ns.Do(func() error {
			var err error
			serveSt, err = xdp.ServeXDPFwd(serveCtx, "ztfar", "ztfb", sinkMAC, xdpprog.ModeNative)
			return err
		})
	}()
	defer func() {
		stopServe()
		<-served
	}()
	// Started when its program is on the port.
	for deadline := time.Now().Add(10 * time.Second); ; {
		var attached bool
		if err := ns.Do(func() error {
			l, err := netlink.LinkByName("ztfar")
			attached = err == nil && l.Attrs().Xdp != nil && l.Attrs().Xdp.Attached
			return err
		}); err != nil {
			t.Fatal(err)
		}
		if attached {
			break
		}
		select {
		case err := <-served:
			served <- err // for the deferred stop
			t.Fatalf("--serve-xdpfwd ended before the run: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("--serve-xdpfwd: no XDP program on ztfar after 10s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	var r report.Report
	var runErr error
	if err := ns.Do(func() error {
		var c common
		r, runErr = runXDP([]string{"--quick", "--gen-iface", "ztgen", "--sink-iface", "ztsink", "--remote-xlb", "--xlb-mac", farMAC.String(),
			"--forwarders", "xdpfwd", "--duration", "200ms", "--trial", "100ms", "--trials", "3"}, &c, io.Discard)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if runErr != nil {
		t.Fatal(runErr)
	}
	stopServe()
	if err := <-served; err != nil {
		t.Fatalf("--serve-xdpfwd: %v", err)
	}
	served <- nil // for the deferred stop
	if serveSt.TX == 0 {
		t.Errorf("the far end forwarded nothing: %+v", serveSt)
	}
	data, ok := r.Data.(xdp.Data)
	if !ok || len(r.Tables) != 1 {
		t.Fatalf("data %T, %d tables", r.Data, len(r.Tables))
	}
	if title := r.Tables[0].Title; !strings.Contains(title, "ztgen (generator) and ztsink (sink)") {
		t.Errorf("table title %q does not name both ports", title)
	}
	loads := map[string]bool{}
	for _, c := range data.Cases {
		loads[c.Load] = true
		if c.Variant != "xdpfwd" {
			t.Errorf("case %s: want xdpfwd", c.Variant)
		}
		if c.Load == "full" && (c.Sent == 0 || c.Forwarded == 0 || c.Other != 0) {
			t.Errorf("full load: sent %d, back %d (%d to another MAC)", c.Sent, c.Forwarded, c.Other)
		}
	}
	for _, l := range []string{"full", "lossless", "half"} {
		if !loads[l] {
			t.Errorf("no %s case: %v", l, loads)
		}
	}
	// Nothing came back to the generator's port: its counters show
	// frames sent only.
	var genRx uint64
	if err := ns.Do(func() error {
		l, err := netlink.LinkByName("ztgen")
		if err == nil && l.Attrs().Statistics != nil {
			genRx = l.Attrs().Statistics.RxPackets
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if genRx > 10 {
		t.Errorf("the generator's port received %d frames: the far end's frames went there, not to the sink's", genRx)
	}
	t.Logf("%v", r.Tables[0].Rows)
}

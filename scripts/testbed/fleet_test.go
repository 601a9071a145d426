package testbed

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// routeWait bounds how long a BGP change may take to reach the router's
// kernel table: sessions connect within the speakers' connect retry (2 s in
// startBirdSpeaker) and routes follow at once; generous for a loaded
// machine, and only a bound on waiting, never an expectation.
const routeWait = 60 * time.Second

// TestFleetBed brings the fleet bed up (router + 3 instances) and checks
// what the fleet tests will rely on: names and addresses, that the router
// forwards with a layer-4 multipath hash, that clients reach the backends'
// own addresses through it both ways (the path of DSR replies), that
// nothing answers on the VIPs while no instance announces them, and that
// scripts/bird/bird.conf makes the router install a VIP announced by
// several BGP speakers as one ECMP route over all of them, and drops an
// instance from it when its session ends. The speakers here are BIRD
// itself in two instance namespaces, so the router's side is proven
// without xlb.
func TestFleetBed(t *testing.T) {
	b := Up(t, Options{Prefix: "tbf", Instances: 3})
	c1 := b.Clients[0]

	t.Run("names and addresses", func(t *testing.T) {
		want := []string{"tbf-b1", "tbf-b2", "tbf-b3", "tbf-b4", "tbf-c1", "tbf-l1", "tbf-l2", "tbf-l3", "tbf-r", "tbf-sw"}
		if got := namespaces(t, "tbf"); !slices.Equal(got, want) {
			t.Fatalf("namespaces %v, want %v", got, want)
		}
		if b.LB.NS != "" {
			t.Errorf("fleet bed has a single balancer %+v", b.LB)
		}
		for _, h := range append(append([]Host{b.Router, c1}, b.Instances...), backendHosts(b)...) {
			checkIface(t, h)
		}
		for _, in := range b.Instances {
			if got := sysctl(t, in.NS, "net.ipv4.ip_forward"); got != "0" {
				t.Errorf("%s forwards (ip_forward %s): it must leave VIP traffic to xlb", in.NS, got)
			}
			out := mustExec(t, in.NS, "ip", "-4", "route", "show", "to", VIP4.String())
			if !strings.HasPrefix(out, "blackhole "+VIP4.String()) {
				t.Errorf("%s: route to %s: %q, want a blackhole", in.NS, VIP4, out)
			}
		}
		for key, want := range map[string]string{
			"net.ipv4.ip_forward": "1", "net.ipv6.conf.all.forwarding": "1",
			"net.ipv4.fib_multipath_hash_policy": "3", "net.ipv6.fib_multipath_hash_policy": "3",
			"net.ipv4.fib_multipath_hash_fields": "55", "net.ipv6.fib_multipath_hash_fields": "55",
		} {
			if got := sysctl(t, b.Router.NS, key); got != want {
				t.Errorf("router: %s = %s, want %s", key, got, want)
			}
		}
	})

	t.Run("clients reach the backends through the router", func(t *testing.T) {
		for _, be := range b.Backends {
			for _, v6 := range families() {
				addr := be.Addr4
				if v6 {
					addr = be.Addr6
				}
				r, err := HTTPGet(c1.NS, netip.AddrPortFrom(addr, HTTPPort), "/", answerTimeout)
				if err != nil || r.Backend != be.Name {
					t.Errorf("%s %s from %s: %+v, %v", be.Name, family(v6), c1.NS, r, err)
				}
			}
		}
	})

	t.Run("no answer on the VIPs while nobody announces them", func(t *testing.T) {
		assertSilent(t, c1.NS)
		if out, _ := b.BirdC("show", "route", "for", VIP4.String()); strings.Contains(out, VIP4.String()) {
			t.Errorf("router has a route for %s:\n%s", VIP4, out)
		}
	})

	t.Run("VIP announced by two speakers is one ECMP route", func(t *testing.T) {
		speakers := b.Instances[:2]
		for _, in := range speakers {
			birdSpeaker(t, b, in, false)
		}
		for _, v6 := range families() {
			waitNexthops(t, b, v6, []Host{speakers[0], speakers[1]})
		}
		// RFC 8326: a route with the GRACEFUL_SHUTDOWN community leaves the
		// ECMP set while its speaker still announces it...
		birdSpeaker(t, b, speakers[0], true)
		for _, v6 := range families() {
			waitNexthops(t, b, v6, []Host{speakers[1]})
		}
		// ...and is still the way when nothing else is: the other
		// speaker's session ends.
		mustExec(t, speakers[1].NS, "birdc", "-s", filepath.Join(b.RunDir, speakers[1].Name+"-bird.ctl"), "down")
		for _, v6 := range families() {
			waitNexthops(t, b, v6, []Host{speakers[0]})
		}
	})
}

// birdSpeaker runs BIRD in instance in as a stand-in for xlb's BGP
// speaker: AS InstanceASN, announcing both VIPs with the instance's own
// addresses as next hops, with the GRACEFUL_SHUTDOWN community if gshut.
// A second call reconfigures the running one.
func birdSpeaker(t *testing.T, b *Bed, in Host, gshut bool) {
	t.Helper()
	conf := filepath.Join(b.RunDir, in.Name+"-bird.conf")
	ctl := filepath.Join(b.RunDir, in.Name+"-bird.ctl")
	community := ""
	if gshut {
		community = "bgp_community.add((65535, 0)); "
	}
	text := fmt.Sprintf(`log %q all;
router id %s;
protocol device {}
protocol static { ipv4; route %s/32 blackhole; }
protocol static { ipv6; route %s/128 blackhole; }
protocol bgp uplink {
	local as %d;
	neighbor %s as %d;
	direct;
	connect retry time 2;
	ipv4 { import none; export filter { if source != RTS_STATIC then reject; %[9]saccept; }; next hop self; };
	ipv6 { import none; export filter { if source != RTS_STATIC then reject; %[9]saccept; }; next hop address %[8]s; };
}
`, filepath.Join(b.RunDir, in.Name+"-bird.log"), in.Addr4, VIP4, VIP6, InstanceASN, RouterSegment4, RouterASN, in.Addr6, community)
	if err := os.WriteFile(conf, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(ctl); err == nil {
		mustExec(t, in.NS, "birdc", "-s", ctl, "configure")
		return
	}
	mustExec(t, in.NS, "bird", "-c", conf, "-s", ctl, "-P", filepath.Join(b.RunDir, in.Name+"-bird.pid"))
}

// waitNexthops waits until the router's kernel route to the VIP of family
// v6 goes via exactly the addresses of hosts, and fails with the route and
// BIRD's view if it does not within routeWait.
func waitNexthops(t *testing.T, b *Bed, v6 bool, hosts []Host) {
	t.Helper()
	fam, dst := "-4", VIP4.String()
	var want []string
	for _, h := range hosts {
		if v6 {
			want = append(want, h.Addr6.String())
		} else {
			want = append(want, h.Addr4.String())
		}
	}
	if v6 {
		fam, dst = "-6", VIP6.String()
	}
	slices.Sort(want)
	var out string
	for deadline := time.Now().Add(routeWait); ; {
		out = mustExec(t, b.Router.NS, "ip", fam, "route", "show", "to", dst)
		if got := viaAddrs(out); slices.Equal(got, want) {
			return
		}
		if time.Now().After(deadline) {
			bird, _ := b.BirdC("show", "protocols", "all")
			t.Fatalf("router's route to %s: %q, want next hops %v\nBIRD:\n%s", dst, out, want, bird)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// viaAddrs lists the gateways of `ip route show` output (one route, single
// or multipath), sorted.
func viaAddrs(out string) []string {
	var vias []string
	f := strings.Fields(out)
	for i := 0; i+1 < len(f); i++ {
		if f[i] == "via" {
			a := f[i+1]
			if i+2 < len(f) && (a == "inet" || a == "inet6") {
				a = f[i+2]
			}
			vias = append(vias, a)
		}
	}
	slices.Sort(vias)
	return vias
}

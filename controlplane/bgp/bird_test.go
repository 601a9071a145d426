package bgp

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"xlb/internal/nettest"
)

// TestBIRD peers two speakers with BIRD 2, the router of the fleet test bed,
// each in a network namespace of its own (xbgpt-s1, xbgpt-s2) joined to the
// router's (xbgpt-r) by a veth pair, with private addresses only inside the
// namespaces. It shows that BIRD takes the speaker's /32 and /128 (IPv6 over
// the IPv4 session, MP-BGP), over a session with a TCP MD5 password too
// (instance 1), that with `merge paths on` the router's kernel
// spreads the VIP over both instances (ECMP), that GRACEFUL_SHUTDOWN lowers
// one instance's route (BIRD's import filter sets local-pref 0, RFC 8326) so
// the kernel keeps only the other, and that the withdrawal removes it.
// It needs root, ip and bird; it skips, saying which is missing, otherwise.
// Run it under flock /tmp/xlb-nettest.lock like every namespace test.
func TestBIRD(t *testing.T) {
	if os.Getenv("XBGPT_HELPER") != "" {
		t.Skip("helper process")
	}
	nettest.RequireRoot(t)
	for _, bin := range []string{"ip", "bird", "birdc"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Skipf("%s is not installed (apt-get install bird2 iproute2)", bin)
		}
	}
	bed := newBirdBed(t)
	s1 := bed.speaker(t, 1)
	s2 := bed.speaker(t, 2)
	bed.waitBIRD(t, "both sessions established", "show protocols", func(out string) bool {
		return strings.Count(out, "Established") == 2
	})

	// Both instances' routes, merged into one multipath kernel route.
	bed.waitKernel(t, "-4", "203.0.113.10", "nexthop via 10.99.1.1", "nexthop via 10.99.2.1")
	bed.waitKernel(t, "-6", "2001:db8::10", "nexthop via fd00:99:1::1", "nexthop via fd00:99:2::1")
	t.Logf("kernel ECMP routes:\n%s%s", bed.ip(t, "-4", "route", "show", "203.0.113.10"), bed.ip(t, "-6", "route", "show", "2001:db8::10"))
	bed.waitBIRD(t, "/32 with the instance's next hop", "show route 203.0.113.10/32 all", func(out string) bool {
		return strings.Contains(out, "203.0.113.10/32") && strings.Contains(out, "BGP.next_hop: 10.99.1.1") &&
			strings.Contains(out, "BGP.next_hop: 10.99.2.1")
	})

	// Graceful shutdown of instance 1: while it settles, its route carries
	// (65535,0) and BIRD prefers instance 2 alone.
	t.Logf("BIRD:\n%s", bed.birdc(t, "show route all"))
	s1.send(t, "gshut")
	bed.waitBIRD(t, "GRACEFUL_SHUTDOWN community", "show route 203.0.113.10/32 all", func(out string) bool {
		return strings.Contains(out, "(65535,0)")
	})
	t.Logf("BIRD while instance 1 settles:\n%s", bed.birdc(t, "show route 203.0.113.10/32 all"))
	eventually(t, "kernel route to instance 2 alone", func() (bool, string) {
		out := bed.ip(t, "-4", "route", "show", "203.0.113.10")
		return strings.Contains(out, "via 10.99.2.1") && !strings.Contains(out, "10.99.1.1"), out
	})
	t.Logf("kernel while instance 1 settles: %s", bed.ip(t, "-4", "route", "show", "203.0.113.10"))
	s1.send(t, "withdraw")
	s1.expect(t, "withdrawn")
	bed.waitBIRD(t, "instance 1 withdrawn", "show route 203.0.113.10/32 all", func(out string) bool {
		return strings.Contains(out, "10.99.2.1") && !strings.Contains(out, "10.99.1.1")
	})
	s2.send(t, "withdraw")
	s2.expect(t, "withdrawn")
	bed.waitBIRD(t, "everything withdrawn", "show route 203.0.113.10/32", func(out string) bool {
		return !strings.Contains(out, "203.0.113.10")
	})
	conf, _ := os.ReadFile(filepath.Join(bed.dir, "bird.conf"))
	t.Logf("bird.conf that worked:\n%s", conf)
}

// birdConf is the router's configuration: passive sessions (the speakers
// dial), every route imported, GRACEFUL_SHUTDOWN honoured, and the kernel
// protocols merging equal routes into multipath (ECMP) routes.
const birdConf = `router id 10.99.0.254;
log "%s" all;

protocol device {}

filter gshut {
	if (65535, 0) ~ bgp_community then bgp_local_pref = 0;
	accept;
}

protocol kernel {
	ipv4 { export all; };
	merge paths on;
}

protocol kernel {
	ipv6 { export all; };
	merge paths on;
}

template bgp xlb {
	local as 65000;
	passive on;
	ipv4 { import filter gshut; export none; };
	ipv6 { import filter gshut; export none; };
}

protocol bgp xlb1 from xlb { neighbor 10.99.1.1 as 65010; password "s3cret"; }
protocol bgp xlb2 from xlb { neighbor 10.99.2.1 as 65010; }
`

type birdBed struct {
	dir  string
	sock string
}

// run runs a command, failing the test with its output on error.
func run(tb testing.TB, name string, args ...string) string {
	tb.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		tb.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

func newBirdBed(t *testing.T) *birdBed {
	cleanup := func() {
		for _, ns := range []string{"xbgpt-r", "xbgpt-s1", "xbgpt-s2"} {
			_ = exec.Command("ip", "netns", "del", ns).Run() // the veths go with them
		}
	}
	cleanup() // a previous run that died
	t.Cleanup(cleanup)
	run(t, "ip", "netns", "add", "xbgpt-r")
	for i := 1; i <= 2; i++ {
		ns, r, s := fmt.Sprintf("xbgpt-s%d", i), fmt.Sprintf("xbgpt-r%d", i), fmt.Sprintf("xbgpt-s%d", i)
		run(t, "ip", "netns", "add", ns)
		run(t, "ip", "link", "add", r, "netns", "xbgpt-r", "type", "veth", "peer", "name", s, "netns", ns)
		run(t, "ip", "-n", "xbgpt-r", "addr", "add", fmt.Sprintf("10.99.%d.2/24", i), "dev", r)
		run(t, "ip", "-n", "xbgpt-r", "addr", "add", fmt.Sprintf("fd00:99:%d::2/64", i), "dev", r, "nodad")
		run(t, "ip", "-n", "xbgpt-r", "link", "set", r, "up")
		run(t, "ip", "-n", ns, "addr", "add", fmt.Sprintf("10.99.%d.1/24", i), "dev", s)
		run(t, "ip", "-n", ns, "addr", "add", fmt.Sprintf("fd00:99:%d::1/64", i), "dev", s, "nodad")
		run(t, "ip", "-n", ns, "link", "set", s, "up")
		run(t, "ip", "-n", ns, "link", "set", "lo", "up")
	}
	run(t, "ip", "-n", "xbgpt-r", "link", "set", "lo", "up")

	b := &birdBed{dir: t.TempDir()}
	b.sock = filepath.Join(b.dir, "bird.ctl")
	conf := filepath.Join(b.dir, "bird.conf")
	if err := os.WriteFile(conf, []byte(fmt.Sprintf(birdConf, filepath.Join(b.dir, "bird.log"))), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("ip", "netns", "exec", "xbgpt-r", "bird", "-f", "-c", conf, "-s", b.sock)
	out, _ := os.Create(filepath.Join(b.dir, "bird.out"))
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			for _, f := range []string{"bird.out", "bird.log"} {
				data, _ := os.ReadFile(filepath.Join(b.dir, f))
				t.Logf("%s:\n%s", f, data)
			}
		}
	})
	return b
}

func (b *birdBed) birdc(tb testing.TB, cmd string) string {
	out, _ := exec.Command("birdc", append([]string{"-s", b.sock}, strings.Fields(cmd)...)...).CombinedOutput()
	return string(out)
}

func (b *birdBed) waitBIRD(tb testing.TB, what, cmd string, ok func(string) bool) {
	tb.Helper()
	eventually(tb, what, func() (bool, string) {
		out := b.birdc(tb, cmd)
		return ok(out), out
	})
}

func (b *birdBed) ip(tb testing.TB, args ...string) string {
	out, _ := exec.Command("ip", append([]string{"-n", "xbgpt-r"}, args...)...).CombinedOutput()
	return string(out)
}

// waitKernel waits for the router's kernel route to dst to name every want.
func (b *birdBed) waitKernel(tb testing.TB, family, dst string, want ...string) {
	tb.Helper()
	eventually(tb, "kernel route to "+dst, func() (bool, string) {
		out := b.ip(tb, family, "route", "show", dst)
		for _, w := range want {
			if !strings.Contains(out, w) {
				return false, out
			}
		}
		return true, out
	})
}

// helperProc is a speaker running in its own namespace: this test binary
// again, in TestBIRDHelper.
type helperProc struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Scanner
}

func (b *birdBed) speaker(t *testing.T, i int) *helperProc {
	cmd := exec.Command("ip", "netns", "exec", fmt.Sprintf("xbgpt-s%d", i), os.Args[0], "-test.run=^TestBIRDHelper$", "-test.v")
	cmd.Env = append(os.Environ(), "XBGPT_HELPER="+fmt.Sprint(i))
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	h := &helperProc{cmd: cmd, in: in, out: bufio.NewScanner(out)}
	t.Cleanup(func() {
		in.Close()
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(patience):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	h.expect(t, "announced")
	return h
}

func (h *helperProc) send(tb testing.TB, line string) {
	tb.Helper()
	if _, err := fmt.Fprintln(h.in, line); err != nil {
		tb.Fatal(err)
	}
}

// expect reads the helper's output up to a line that is word.
func (h *helperProc) expect(tb testing.TB, word string) {
	tb.Helper()
	for h.out.Scan() {
		if strings.TrimSpace(h.out.Text()) == word {
			return
		}
	}
	tb.Fatalf("helper ended before %q", word)
}

// TestBIRDHelper is the speaker of instance XBGPT_HELPER in TestBIRD; it
// does nothing in a plain run. Commands on stdin: gshut (graceful shutdown,
// settling until the next line), withdraw; EOF stops it.
func TestBIRDHelper(t *testing.T) {
	i := os.Getenv("XBGPT_HELPER")
	if i == "" {
		t.Skip("run by TestBIRD")
	}
	nh4 := netip.MustParseAddr("10.99." + i + ".1")
	nh6 := netip.MustParseAddr("fd00:99:" + i + "::1")
	log, _ := zap.NewDevelopment()
	s, err := New(Config{ASN: 65010, RouterID: nh4, ConnectRetry: time.Second}, log)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	nb := Neighbor{Address: netip.MustParseAddr("10.99." + i + ".2"), ASN: 65000}
	if i == "1" {
		nb.Password = "s3cret" // TCP MD5, dialing out
	}
	if err := s.SetNeighbors([]Neighbor{nb}); err != nil {
		t.Fatal(err)
	}
	if err := s.SetVIPs(map[netip.Addr]VIP{
		netip.MustParseAddr("203.0.113.10"): {Announce: true, NextHop: nh4},
		netip.MustParseAddr("2001:db8::10"): {Announce: true, NextHop: nh6},
	}); err != nil {
		t.Fatal(err)
	}
	fmt.Println("announced")
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		switch in.Text() {
		case "gshut":
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- s.GracefulShutdown(ctx, time.Hour) }()
			in.Scan() // the next line ends the settling
			cancel()
			if err := <-done; err != nil {
				t.Error(err)
			}
			fmt.Println("withdrawn")
		case "withdraw":
			if err := s.SetVIPs(nil); err != nil {
				t.Error(err)
			}
			fmt.Println("withdrawn")
		}
	}
}

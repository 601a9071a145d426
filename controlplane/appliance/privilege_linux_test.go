package appliance

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"xlb/dataplane/craft"
	"xlb/dataplane/packet"
	"xlb/internal/nettest"
	"xlb/internal/syncbuf"
)

// The test binary's other roles, for TestRun_LeastPrivilege's children:
// each starts as root and becomes uid 65534 before it does anything.
const (
	// tryEnv names the admin socket: try to change state as an
	// unprivileged user, print what happened as JSON.
	tryEnv = "XLB_APPLIANCE_TEST_TRY"
	// floodEnv is a count of slow connections to open to the TCP admin
	// listener; print "held N" and hold them until stdin closes.
	floodEnv = "XLB_APPLIANCE_TEST_FLOOD"
)

// nobody is the unprivileged user of the children.
const nobody = 65534

// childRole runs the test binary as one of the children, if it is one.
func childRole() (code int, ok bool) {
	if sock := os.Getenv(tryEnv); sock != "" {
		return tryChild(sock), true
	}
	if n := os.Getenv(floodEnv); n != "" {
		count, err := strconv.Atoi(n)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1, true
		}
		return floodChild(count), true
	}
	return 0, false
}

// becomeNobody drops to uid and gid 65534 (on every thread: the runtime
// does so for Setuid), after raising the descriptor limit to nofile when
// asked, which only root may.
func becomeNobody(nofile uint64) error {
	if nofile > 0 {
		if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &unix.Rlimit{Cur: nofile, Max: nofile}); err != nil {
			return fmt.Errorf("RLIMIT_NOFILE %d: %w", nofile, err)
		}
	}
	if err := syscall.Setgroups(nil); err != nil {
		return err
	}
	if err := syscall.Setgid(nobody); err != nil {
		return err
	}
	return syscall.Setuid(nobody)
}

// tryResult is what tryChild saw.
type tryResult struct {
	UID        int    `json:"uid"`
	TCPDrain   int    `json:"tcp_drain"`    // status of POST /drain on TCP
	TCPCSRF    int    `json:"tcp_csrf"`     // a browser's text/plain POST, foreign Origin and Host
	TCPNode    int    `json:"tcp_node"`     // POST /drain-node on TCP
	SocketDial string `json:"socket_dial"`  // the error dialling the socket ("" if it connected)
	SocketCode int    `json:"socket_drain"` // status of POST /drain on the socket, if it connected
}

func tryChild(sock string) int {
	if err := becomeNobody(0); err != nil {
		fmt.Fprintln(os.Stderr, "becoming nobody:", err)
		return 1
	}
	r := tryResult{UID: os.Getuid()}
	post := func(path string, body io.Reader, hdr map[string]string) int {
		req, _ := http.NewRequest("POST", "http://127.0.0.1:9110"+path, body)
		for k, v := range hdr {
			if k == "Host" {
				req.Host = v
			} else {
				req.Header.Set(k, v)
			}
		}
		resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
		if err != nil {
			return -1
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	r.TCPDrain = post("/drain?backend=be1", nil, nil)
	r.TCPCSRF = post("/drain?backend=be1", strings.NewReader("backend=be1"),
		map[string]string{"Content-Type": "text/plain", "Origin": "http://rebound.example", "Host": "rebound.example:9110"})
	r.TCPNode = post("/drain-node", nil, nil)
	c, err := net.Dial("unix", sock)
	if err != nil {
		r.SocketDial = err.Error()
		if errors.Is(err, syscall.EACCES) {
			r.SocketDial = "EACCES"
		}
	} else {
		io.WriteString(c, "POST /drain?backend=be1 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err == nil {
			r.SocketCode = resp.StatusCode
		}
		c.Close()
	}
	_ = json.NewEncoder(os.Stdout).Encode(r)
	return 0
}

// floodChild opens count connections to the TCP admin listener, each with
// a request header begun and never finished, from 8 goroutines; prints
// "held N" (the connections made) and holds them until stdin closes.
func floodChild(count int) int {
	if err := becomeNobody(uint64(count + 256)); err != nil {
		fmt.Fprintln(os.Stderr, "becoming nobody:", err)
		return 1
	}
	const workers = 8
	conns := make([][]net.Conn, workers)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	for w := range workers {
		wg.Go(func() {
			for i := w; i < count; i += workers {
				var c net.Conn
				var err error
				for try := 0; try < 3; try++ {
					if c, err = net.DialTimeout("tcp", "127.0.0.1:9110", time.Minute); err == nil {
						break
					}
				}
				if err != nil {
					mu.Lock()
					firstErr = cmp(firstErr, err)
					mu.Unlock()
					continue
				}
				// Written or not (a connection the listener closed at
				// once), it stays open here.
				_, _ = io.WriteString(c, "GET /status HTTP/1.1\r\nHost: x\r\n")
				conns[w] = append(conns[w], c)
			}
		})
	}
	wg.Wait()
	held := 0
	for _, cs := range conns {
		held += len(cs)
	}
	if firstErr != nil {
		fmt.Fprintln(os.Stderr, "connect:", firstErr)
	}
	fmt.Printf("held %d\n", held)
	_, _ = io.Copy(io.Discard, os.Stdin)
	return 0
}

func cmp(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// buildXLB builds cmd/xlb without cgo, as `make build` does (a cgo build
// drops its capabilities as well: TestRun_DropsPrivilegesEveryBuild).
func buildXLB(t *testing.T, dir string) string {
	t.Helper()
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command to build xlb with")
	}
	bin := filepath.Join(dir, "xlb")
	cmd := exec.Command("go", "build", "-o", bin, "xlb/cmd/xlb")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// privConfig: one UDP service with backend be1 (MAC configured) on vips,
// a TCP health check every second on port 53, the admin socket sock, no
// table kept (not the default /run/xlb: tests run side by side).
func privConfig(ifname, sock string, vips ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, `
[dataplane]
interface = %q
queues = "all"
frame_size = 2048
ring_size = 256
conntrack_capacity = 1024
state_dir = ""

[admin]
socket = %q

[[health_check]]
name = "hc"
type = "TCP"
port = 53
check_interval_sec = 1
timeout_sec = 1
healthy_threshold = 1
unhealthy_threshold = 1

[[backend_service]]
name = "dns"
protocol = "UDP"
health_checks = ["hc"]
  [[backend_service.backend]]
  group = "a"
  endpoints = [ { name = "be1", ip = "10.201.0.2", mac = %q } ]
`, ifname, sock, backendMAC.String())
	for i, v := range vips {
		fmt.Fprintf(&b, "\n[[forwarding_rule]]\nname = \"dns%d\"\nip_address = %q\nip_protocol = \"UDP\"\nports = [\"53\"]\nbackend_service = \"dns\"\n", i, v)
	}
	return b.String()
}

// privStatus is the part of /status TestRun_LeastPrivilege reads.
type privStatus struct {
	Services []struct {
		Eligible []string `json:"eligible"`
	} `json:"services"`
	Runtime struct {
		HealthChecks []struct {
			Healthy bool   `json:"healthy"`
			Probes  uint64 `json:"probes"`
			Pass    *bool  `json:"last_pass"`
		} `json:"health_checks"`
	} `json:"runtime"`
	LastReload *struct {
		OK bool `json:"ok"`
	} `json:"last_reload"`
}

// socketStatus reads /status through the admin socket.
func socketStatus(t *testing.T, sock string) privStatus {
	t.Helper()
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		// One connection per request, closed after it: none left idle in
		// xlb to count among its descriptors.
		DisableKeepAlives: true,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", sock)
		},
	}}
	resp, err := c.Get("http://xlb/status")
	if err != nil {
		t.Fatalf("/status through the socket: %v", err)
	}
	defer resp.Body.Close()
	var st privStatus
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatalf("/status: %v", err)
	}
	return st
}

// waitFor polls cond every 100 ms for up to a minute (a loaded machine's
// bound, not an expectation).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); !cond(); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no %s within a minute", what)
		}
	}
}

// procCaps reads the capability sets of /proc/PID[/task/TID]/status.
func procCaps(t *testing.T, path string) map[string]uint64 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	caps := map[string]uint64{}
	for l := range strings.Lines(string(b)) {
		k, v, ok := strings.Cut(l, ":")
		if !ok || !strings.HasPrefix(k, "Cap") {
			continue
		}
		n, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
		if err != nil {
			t.Fatalf("%s: %s: %v", path, l, err)
		}
		caps[k] = n
	}
	return caps
}

// tryAsNobody runs tryChild in n and returns what it saw.
func tryAsNobody(t *testing.T, n *runNS, sock string) tryResult {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	child := exec.Command(self)
	child.Env = append(os.Environ(), tryEnv+"="+sock)
	var out, errb bytes.Buffer
	child.Stdout, child.Stderr = &out, &errb
	if err := n.start(child); err != nil {
		t.Fatal(err)
	}
	if err := child.Wait(); err != nil {
		t.Fatalf("child: %v\n%s", err, errb.String())
	}
	var r tryResult
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatalf("child said %q: %v", out.String(), err)
	}
	return r
}

// forwards sends a UDP frame to vip from the peer and reports whether it
// came back out rewritten for be1 (L2 DSR: be1's MAC).
func forwards(t *testing.T, n *runNS, ps *packetSocket, vip string, sport uint16) bool {
	t.Helper()
	return forwardsFrom(t, n, ps, runClient, vip, sport)
}

// forwardsFrom is forwards with the frames' source src.
func forwardsFrom(t *testing.T, n *runNS, ps *packetSocket, src netip.Addr, vip string, sport uint16) bool {
	t.Helper()
	sent, err := craft.Build(&craft.Packet{
		Src: src, Dst: netip.MustParseAddr(vip), Proto: packet.ProtoUDP, SrcPort: sport, DstPort: 53,
		SrcMAC: n.pMAC, DstMAC: n.bMAC,
	})
	if err != nil {
		t.Fatal(err)
	}
	for try := 0; try < 3; try++ {
		if err := ps.send(sent); err != nil {
			t.Fatalf("sending to %s: %v", vip, err)
		}
		for {
			f, err := ps.recv(time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if f == nil {
				break
			}
			if bytes.Equal(f[:6], backendMAC) && bytes.Equal(f[12:], sent[12:]) {
				return true
			}
		}
	}
	return false
}

// TestRun_LeastPrivilege runs the real binary (built without cgo) in a
// namespace, with a descriptor limit of 4096, a backend whose TCP health
// check passes (a listener on 10.201.0.2:53 in the namespace) and checks,
// once it runs:
//   - Capabilities: /proc/PID/status of the process and of every thread
//     shows CAP_NET_ADMIN alone in the effective, permitted and bounding
//     sets, nothing inheritable or ambient.
//   - Unprivileged: uid 65534 gets 403 for POST /drain and /drain-node on
//     the TCP listener (also a browser-like text/plain POST with a foreign
//     Origin and Host: 413), and EACCES connecting to the socket, or 403
//     from its peer check were its mode loosened; nothing is drained. Root drains and undrains through the socket with `xlb
//     drain`.
//   - Slow connections: while uid 65534 holds 20,000 connections to the
//     TCP listener, each with a header begun and never finished, xlb holds
//     at most its limit of them (its descriptors stay bounded), health
//     checks keep probing and passing, a frame to the VIP is forwarded,
//     and /status answers on the socket.
//   - Reload without the dropped capabilities: a VIP added by SIGHUP is
//     forwarded.
//
// SIGTERM then ends it with exit 0 and the socket removed.
func TestRun_LeastPrivilege(t *testing.T) {
	n := newRunNS(t)
	dir, err := os.MkdirTemp("", "xrt-priv-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	// Traversable by uid 65534, so that the socket's own mode is what
	// keeps it out.
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := buildXLB(t, dir)
	sock := filepath.Join(dir, "admin.sock")
	cfg := filepath.Join(dir, "xlb.toml")
	if err := os.WriteFile(cfg, []byte(privConfig(n.bName, sock, runVIP.String())), 0o644); err != nil {
		t.Fatal(err)
	}

	// The backend's health-check port, on an address of the namespace.
	var hcln net.Listener
	err = n.Do(func() error {
		lo, err := netlink.LinkByName("lo")
		if err != nil {
			return err
		}
		if err := netlink.AddrAdd(lo, &netlink.Addr{IPNet: &net.IPNet{IP: net.ParseIP("10.201.0.2"), Mask: net.CIDRMask(32, 32)}}); err != nil {
			return err
		}
		hcln, err = net.Listen("tcp", "10.201.0.2:53")
		return err
	})
	if err != nil {
		t.Fatalf("health-check listener: %v", err)
	}
	defer hcln.Close()
	go func() {
		for {
			c, err := hcln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()

	ps := n.packetSocket(t)
	log := &syncbuf.Buffer{}
	cmd := exec.Command("/bin/sh", "-c", `ulimit -n 4096 && exec "$0" run -c "$1"`, bin, cfg)
	cmd.Stdout, cmd.Stderr = log, log
	if err := n.start(cmd); err != nil {
		t.Fatal(err)
	}
	x := watchXLB(t, cmd, log, `"capabilities dropped"`)
	pid := cmd.Process.Pid
	waitFor(t, "healthy backend", func() bool {
		st := socketStatus(t, sock)
		return len(st.Services) == 1 && len(st.Services[0].Eligible) == 1 &&
			len(st.Runtime.HealthChecks) == 1 && st.Runtime.HealthChecks[0].Healthy
	})

	t.Run("Capabilities", func(t *testing.T) {
		const want = uint64(1) << capNetAdmin
		tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
		if err != nil {
			t.Fatal(err)
		}
		paths := []string{fmt.Sprintf("/proc/%d/status", pid)}
		for _, task := range tasks {
			paths = append(paths, fmt.Sprintf("/proc/%d/task/%s/status", pid, task.Name()))
		}
		for _, p := range paths {
			c := procCaps(t, p)
			if c["CapEff"] != want || c["CapPrm"] != want || c["CapBnd"] != want || c["CapInh"] != 0 || c["CapAmb"] != 0 {
				t.Errorf("%s: CapEff %x CapPrm %x CapBnd %x CapInh %x CapAmb %x; want CAP_NET_ADMIN (%x) alone in the first three, nothing in the others",
					p, c["CapEff"], c["CapPrm"], c["CapBnd"], c["CapInh"], c["CapAmb"], want)
			}
		}
		t.Logf("%d threads, each with CapEff=CapPrm=CapBnd=%016x", len(tasks), want)
	})

	t.Run("Unprivileged", func(t *testing.T) {
		r := tryAsNobody(t, n, sock)
		if r.UID != nobody || r.TCPDrain != 403 || r.TCPNode != 403 || r.TCPCSRF != 413 || r.SocketDial != "EACCES" || r.SocketCode != 0 {
			t.Errorf("as uid 65534: %+v; want uid 65534, 403 for /drain and /drain-node on TCP, 413 for the text/plain POST, EACCES on the socket", r)
		}
		// Were the socket's mode loosened, its peer check still refuses.
		if err := os.Chmod(sock, 0o666); err != nil {
			t.Fatal(err)
		}
		r = tryAsNobody(t, n, sock)
		if err := os.Chmod(sock, 0o600); err != nil {
			t.Fatal(err)
		}
		if r.SocketDial != "" || r.SocketCode != 403 {
			t.Errorf("as uid 65534 on a socket made 0666: %+v; want it connected and refused with 403", r)
		}
		if st := socketStatus(t, sock); len(st.Services[0].Eligible) != 1 {
			t.Fatalf("eligible %v after the unprivileged attempts, want be1", st.Services[0].Eligible)
		}
		for _, verb := range []string{"drain", "undrain"} {
			out, err := exec.Command(bin, verb, "--socket", sock, "be1").CombinedOutput()
			if err != nil || !strings.Contains(string(out), verb+"ed dns/be1") {
				t.Fatalf("xlb %s be1 as root: %v %q", verb, err, out)
			}
		}
	})

	t.Run("SlowConnections", func(t *testing.T) {
		const slow = 20000
		fds := func() int {
			ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
			if err != nil {
				t.Fatal(err)
			}
			return len(ents)
		}
		before := fds()
		self, err := os.Executable()
		if err != nil {
			t.Fatal(err)
		}
		// Two children of 10,000 each: a process may not open 20,000
		// descriptors where fs.nr_open is 20,000 or less.
		for range 2 {
			child := exec.Command(self)
			child.Env = append(os.Environ(), floodEnv+"="+strconv.Itoa(slow/2))
			stdin, err := child.StdinPipe()
			if err != nil {
				t.Fatal(err)
			}
			stdout, err := child.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			var errb syncbuf.Buffer
			child.Stderr = &errb
			if err := n.start(child); err != nil {
				t.Fatal(err)
			}
			defer func() {
				stdin.Close()
				_ = child.Wait()
			}()
			line, err := bufio.NewReader(stdout).ReadString('\n')
			if err != nil {
				t.Fatalf("flood child: %v\n%s", err, errb.String())
			}
			if line != fmt.Sprintf("held %d\n", slow/2) {
				t.Fatalf("flood child: %q, want all %d connections made\n%s", line, slow/2, errb.String())
			}
		}
		// Held now: xlb holds at most its 256 TCP connections (the limit
		// for 4096 descriptors), plus a few: one it is refusing, a
		// health-check probe, a /status on the socket.
		if got := fds(); got > before+256+16 {
			t.Errorf("xlb holds %d descriptors under %d slow connections, %d before: over its admin limit", got, slow, before)
		}
		st := socketStatus(t, sock)
		probes := st.Runtime.HealthChecks[0].Probes
		waitFor(t, "two more health-check probes while the connections are held", func() bool {
			st = socketStatus(t, sock)
			return st.Runtime.HealthChecks[0].Probes >= probes+2
		})
		if hc := st.Runtime.HealthChecks[0]; !hc.Healthy || hc.Pass == nil || !*hc.Pass {
			t.Errorf("health check under the flood: %+v, want passing", hc)
		}
		if !forwards(t, n, ps, runVIP.String(), 40001) {
			t.Error("a frame to the VIP was not forwarded under the flood")
		}
		if got := fds(); got > before+256+16 {
			t.Errorf("xlb holds %d descriptors under %d slow connections, %d before", got, slow, before)
		}
		t.Logf("xlb descriptors: %d before, %d with %d slow connections held", before, fds(), slow)
	})

	t.Run("ReloadAddsVIP", func(t *testing.T) {
		const vip2 = "10.201.1.2"
		if err := os.WriteFile(cfg, []byte(privConfig(n.bName, sock, runVIP.String(), vip2)), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "successful reload", func() bool {
			st := socketStatus(t, sock)
			return st.LastReload != nil && st.LastReload.OK
		})
		if !forwards(t, n, ps, vip2, 40002) {
			t.Error("a frame to the VIP added by the reload was not forwarded")
		}
	})

	x.stop(sock)
}

// buildProbe builds cmd/xlb with the privilege probe (tag xlb_privprobe),
// cgo on or off.
func buildProbe(t *testing.T, dir string, cgo bool) string {
	t.Helper()
	bin := filepath.Join(dir, "xlb-probe")
	cmd := exec.Command("go", "build", "-tags", "xlb_privprobe", "-o", bin, "xlb/cmd/xlb")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if cgo {
		cmd.Env = append(os.Environ(), "CGO_ENABLED=1")
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build (cgo %v): %v\n%s", cgo, err, out)
	}
	return bin
}

// threadCreds is what /proc/PID/task/TID/status says one thread may.
type threadCreds struct {
	caps       map[string]uint64
	uid, gid   string // the four ids, as the file has them
	groups     string
	noNewPrivs string
}

func readThreadCreds(t *testing.T, path string) threadCreds {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	c := threadCreds{caps: procCaps(t, path)}
	for l := range strings.Lines(string(b)) {
		k, v, _ := strings.Cut(strings.TrimSpace(l), ":")
		v = strings.Join(strings.Fields(v), " ")
		switch k {
		case "Uid":
			c.uid = v
		case "Gid":
			c.gid = v
		case "Groups":
			c.groups = v
		case "NoNewPrivs":
			c.noNewPrivs = v
		}
	}
	return c
}

// TestRun_DropsPrivilegesEveryBuild runs the real binary, built without
// cgo and with it (as a plain `go build` with gcc builds it), once as root
// once with dataplane.user = "nobody", and once started as nobody with
// the ambient capabilities of packaging/xlb.service (as systemd starts
// it), each in a namespace of its own, and checks, once it runs:
//   - every thread (/proc/PID/task/*/status) holds CAP_NET_ADMIN alone in
//     its effective, permitted and bounding sets, nothing inheritable or
//     ambient, no_new_privs set (started as nobody, without CAP_SETPCAP,
//     the bounding set is the starter's: the unit's); as nobody, uid and
//     gid 65534 in all four places and no supplementary group;
//   - the process itself (the probe of a build with tag xlb_privprobe)
//     cannot read a file of mode 0600 nor create a file in a directory of
//     mode 0755, both owned by another user: as root, uid 1234's (root
//     without CAP_DAC_OVERRIDE); as nobody, root's;
//   - what it still does works: a VIP added by SIGHUP is forwarded (the
//     VIP map written through its descriptor), /metrics counts its open
//     descriptors (its own /proc files, root's once it is undumpable);
//   - SIGTERM ends it with exit 0 and the socket removed.
func TestRun_DropsPrivilegesEveryBuild(t *testing.T) {
	nettest.RequireRoot(t)
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command to build xlb with")
	}
	for _, build := range []struct {
		name string
		cgo  bool
	}{{"NoCgo", false}, {"Cgo", true}} {
		t.Run(build.name, func(t *testing.T) {
			if build.cgo {
				if _, err := exec.LookPath("gcc"); err != nil {
					t.Skip("no gcc: a cgo build is not possible on this machine")
				}
			}
			dir, err := os.MkdirTemp("", "xrt-drop-")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.RemoveAll(dir) })
			if err := os.Chmod(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			bin := buildProbe(t, dir, build.cgo)
			for _, as := range []dropCase{
				{name: "Root", uid: 0, owner: 1234},
				{name: "Nobody", user: "nobody", uid: nobody, owner: 0},
				// As packaging/xlb.service starts it: the user already,
				// with the unit's AmbientCapabilities.
				{name: "AmbientNobody", user: "nobody", uid: nobody, owner: 0, ambient: unitCaps(t)},
			} {
				t.Run(as.name, func(t *testing.T) { dropRun(t, dir, bin, as) })
			}
		})
	}
}

// unitCaps are packaging/xlb.service's AmbientCapabilities, read from
// the unit: what the test proves enough is what the unit gives.
func unitCaps(t *testing.T) []uintptr {
	t.Helper()
	b, err := os.ReadFile("../../packaging/xlb.service")
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]uintptr{"CAP_NET_ADMIN": capNetAdmin, "CAP_NET_RAW": capNetRaw, "CAP_BPF": capBPF,
		"CAP_PERFMON": capPerfmon, "CAP_SYS_ADMIN": capSysAdmin, "CAP_IPC_LOCK": unix.CAP_IPC_LOCK,
		"CAP_NET_BIND_SERVICE": unix.CAP_NET_BIND_SERVICE}
	var caps []uintptr
	for l := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), "AmbientCapabilities="); ok {
			for _, name := range strings.Fields(v) {
				c, ok := byName[name]
				if !ok {
					t.Fatalf("packaging/xlb.service: AmbientCapabilities names %s, which this test does not know", name)
				}
				caps = append(caps, c)
			}
		}
	}
	if len(caps) == 0 {
		t.Fatal("packaging/xlb.service has no AmbientCapabilities=")
	}
	return caps
}

// dropCase is who TestRun_DropsPrivilegesEveryBuild starts xlb as.
type dropCase struct {
	name  string
	user  string // dataplane.user
	uid   int    // who it runs as
	owner int    // of the files the probe must not reach
	// ambient: started as uid already, with these capabilities (ambient),
	// instead of as root.
	ambient []uintptr
}

// dropRun is one run of TestRun_DropsPrivilegesEveryBuild.
func dropRun(t *testing.T, top, bin string, as dropCase) {
	user, uid, owner := as.user, as.uid, as.owner
	dir, err := os.MkdirTemp(top, "run-")
	if err != nil {
		t.Fatal(err)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.Chmod(dir, 0o755))
	// The socket's directory is the user's: it removes the socket at
	// exit.
	sockDir := filepath.Join(dir, "run")
	must(os.Mkdir(sockDir, 0o700))
	must(os.Chown(sockDir, uid, uid))
	sock := filepath.Join(sockDir, "admin.sock")
	secret := filepath.Join(dir, "secret")
	must(os.WriteFile(secret, []byte("not for xlb\n"), 0o600))
	must(os.Chown(secret, owner, owner))
	closed := filepath.Join(dir, "closed")
	must(os.Mkdir(closed, 0o755))
	must(os.Chown(closed, owner, owner))

	n := newRunNS(t)
	text := privConfig(n.bName, sock, runVIP.String())
	if user != "" {
		text = strings.Replace(text, "[dataplane]\n", "[dataplane]\nuser = \""+user+"\"\n", 1)
	}
	cfg := filepath.Join(dir, "xlb.toml")
	must(os.WriteFile(cfg, []byte(text), 0o644))

	ps := n.packetSocket(t)
	log := &syncbuf.Buffer{}
	cmd := exec.Command(bin, "run", "-c", cfg)
	cmd.Env = append(os.Environ(), "XLB_PRIVPROBE_READ="+secret, "XLB_PRIVPROBE_DIR="+closed)
	cmd.Stdout, cmd.Stderr = log, log
	if as.ambient != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{
			Credential:  &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid), Groups: []uint32{}},
			AmbientCaps: as.ambient,
		}
	}
	must(n.start(cmd))
	x := watchXLB(t, cmd, log, `"privilege probe"`)
	pid := cmd.Process.Pid

	const want = uint64(1) << capNetAdmin
	ids := fmt.Sprintf("%d %d %d %d", uid, uid, uid, uid)
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	must(err)
	for _, task := range tasks {
		p := fmt.Sprintf("/proc/%d/task/%s/status", pid, task.Name())
		c := readThreadCreds(t, p)
		// Without CAP_SETPCAP (started with the unit's capabilities) the
		// bounding set stays the one it was started with: systemd's
		// CapabilityBoundingSet= in the unit.
		bnd := c.caps["CapBnd"] == want || as.ambient != nil
		if c.caps["CapEff"] != want || c.caps["CapPrm"] != want || !bnd || c.caps["CapInh"] != 0 || c.caps["CapAmb"] != 0 {
			t.Errorf("%s: CapEff %x CapPrm %x CapBnd %x CapInh %x CapAmb %x; want CAP_NET_ADMIN (%x) alone in the first three, nothing in the others",
				p, c.caps["CapEff"], c.caps["CapPrm"], c.caps["CapBnd"], c.caps["CapInh"], c.caps["CapAmb"], want)
		}
		if c.uid != ids || c.gid != ids || c.noNewPrivs != "1" || (user != "" && c.groups != "") {
			t.Errorf("%s: Uid %q Gid %q Groups %q NoNewPrivs %q; want %q, %q, none (as a user), 1", p, c.uid, c.gid, c.groups, c.noNewPrivs, ids, ids)
		}
	}
	t.Logf("%d threads, each with CapEff=CapPrm=CapBnd=%016x, uids and gids %s", len(tasks), want, ids)

	var probe struct{ Read, Create string }
	for l := range strings.Lines(log.String()) {
		if strings.Contains(l, `"privilege probe"`) {
			must(json.Unmarshal([]byte(l), &probe))
		}
	}
	if probe.Read != "EACCES" || probe.Create != "EACCES" {
		t.Errorf("from inside xlb: reading %s (0600, uid %d) %s, creating in %s (0755, uid %d) %s; want EACCES for both",
			secret, owner, probe.Read, closed, owner, probe.Create)
	}

	// What it still needs: the VIP map written on a reload, its own
	// /proc files read for /metrics.
	const vip2 = "10.201.1.2"
	must(os.WriteFile(cfg, []byte(strings.Replace(text, "\n[[forwarding_rule]]", fmt.Sprintf("\n[[forwarding_rule]]\nname = \"added\"\nip_address = %q\nip_protocol = \"UDP\"\nports = [\"53\"]\nbackend_service = \"dns\"\n\n[[forwarding_rule]]", vip2), 1)), 0o644))
	must(cmd.Process.Signal(syscall.SIGHUP))
	waitFor(t, "successful reload", func() bool {
		st := socketStatus(t, sock)
		return st.LastReload != nil && st.LastReload.OK
	})
	if !forwards(t, n, ps, vip2, 40003) {
		t.Error("a frame to the VIP the reload added was not forwarded")
	}
	resp, err := n.httpClient().Get("http://127.0.0.1:9110/metrics")
	must(err)
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	must(err)
	if !strings.Contains(string(body), "\nprocess_open_fds ") {
		t.Error("/metrics has no process_open_fds: xlb cannot read its own /proc/self/fd")
	}

	x.stop(sock)
}

// watchedXLB is a started `xlb run` the test waits on: killed at the
// test's end if still running, its log shown if the test failed.
type watchedXLB struct {
	t       *testing.T
	cmd     *exec.Cmd
	exited  chan struct{}
	waitErr error
}

// watchXLB watches cmd (started) and waits until its log has the line
// logged, failing the test if xlb exits first.
func watchXLB(t *testing.T, cmd *exec.Cmd, log *syncbuf.Buffer, logged string) *watchedXLB {
	t.Helper()
	x := &watchedXLB{t: t, cmd: cmd, exited: make(chan struct{})}
	go func() { x.waitErr = cmd.Wait(); close(x.exited) }()
	t.Cleanup(func() {
		select {
		case <-x.exited:
		default:
			_ = cmd.Process.Kill()
			<-x.exited
		}
		if t.Failed() {
			t.Logf("xlb log:\n%s", log.String())
		}
	})
	waitFor(t, logged+" in the log", func() bool {
		select {
		case <-x.exited:
			t.Fatalf("xlb exited: %v", x.waitErr)
		default:
		}
		return strings.Contains(log.String(), logged)
	})
	return x
}

// stop sends SIGTERM and checks xlb exits 0 and removes its socket.
func (x *watchedXLB) stop(sock string) {
	t := x.t
	t.Helper()
	if err := x.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-x.exited:
	case <-time.After(time.Minute):
		t.Fatal("xlb still runs a minute after SIGTERM")
	}
	if x.waitErr != nil {
		t.Errorf("xlb after SIGTERM: %v", x.waitErr)
	}
	if _, err := os.Lstat(sock); !os.IsNotExist(err) {
		t.Errorf("the socket after exit: %v, want removed", err)
	}
}

package appliance

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"xlb/config"
	"xlb/dataplane/craft"
	"xlb/dataplane/packet"
	"xlb/internal/syncbuf"
)

// runEnv names the configuration file when the test binary is started to
// be the appliance (TestMain): Run needs a whole process in the test's
// network namespace, since its goroutines run on any thread.
const runEnv = "XLB_APPLIANCE_TEST_RUN"

func TestMain(m *testing.M) {
	if path := os.Getenv(runEnv); path != "" {
		os.Exit(runChild(path))
	}
	if code, ok := childRole(); ok {
		os.Exit(code)
	}
	os.Exit(m.Run())
}

// runChild runs the appliance on the file at path as `xlb run` does: JSON
// logs on stderr, SIGTERM stops it, an error is the last stderr line
// ("run: ...") and exit 1. It prints "ready" and then "health-checked" on
// stdout when Ready and HealthChecked close.
func runChild(path string) int {
	cfg, err := config.Load(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, "run: "+err.Error())
		return 1
	}
	sink := zapcore.Lock(os.Stderr)
	log := zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig()), sink, zapcore.DebugLevel))
	a, err := New(cfg, log)
	if err != nil {
		fmt.Fprintln(os.Stderr, "run: "+err.Error())
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	go func() {
		select {
		case <-a.Ready():
		case <-ctx.Done():
			return
		}
		fmt.Println("ready")
		<-a.HealthChecked()
		fmt.Println("health-checked")
	}()
	if err := a.Run(ctx); err != nil {
		_ = log.Sync()
		fmt.Fprintln(os.Stderr, "run: "+err.Error())
		return 1
	}
	return 0
}

// Addresses of the run tests, used only inside their namespace.
var (
	runVIP     = netip.MustParseAddr("10.201.1.1")
	runClient  = netip.MustParseAddr("10.201.2.1")
	backendMAC = net.HardwareAddr{0x02, 0x00, 0x00, 0x00, 0xbe, 0x01}
)

// runConfig is a UDP service on runVIP with one L2 DSR backend whose MAC
// is configured (no neighbour resolution needed), on interface ifname;
// extra lines go into [dataplane]. No table is kept unless they name a
// state_dir: the default, /run/xlb, is the host's, and tests run side by
// side.
func runConfig(tb testing.TB, dir, ifname string, extra ...string) string {
	tb.Helper()
	if !slices.ContainsFunc(extra, func(l string) bool { return strings.HasPrefix(l, "state_dir") }) {
		extra = append(extra, `state_dir = ""`)
	}
	text := fmt.Sprintf(`
[dataplane]
interface = %q
queues = "all"
frame_size = 2048
ring_size = 256
conntrack_capacity = 1024
`+strings.Join(extra, "\n")+`

[[health_check]]
name = "hc"
type = "TCP"
port = 53

[[backend_service]]
name = "dns"
protocol = "UDP"
session_affinity = "CLIENT_IP"
health_checks = ["hc"]
  [[backend_service.backend]]
  group = "a"
  endpoints = [ { name = "be1", ip = "10.201.0.2", mac = %q } ]

[[forwarding_rule]]
name = "dns"
ip_address = %q
ip_protocol = "UDP"
ports = ["53"]
backend_service = "dns"

[admin]
socket = %q
`, ifname, backendMAC.String(), runVIP.String(), filepath.Join(dir, "admin.sock"))
	path := filepath.Join(dir, "xlb.toml")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		tb.Fatal(err)
	}
	return path
}

// xlbProc is the appliance (runChild) started in a namespace.
type xlbProc struct {
	cmd            *exec.Cmd
	stdout, stderr *syncbuf.Buffer
	exited         chan struct{}
	err            error // Wait's, once exited is closed
}

// startXLB runs the appliance on the configuration file cfg inside n; it
// is killed at the end of the test if still running.
func startXLB(t *testing.T, n *runNS, cfg string) *xlbProc {
	t.Helper()
	bin, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	p := &xlbProc{cmd: exec.Command(bin), stdout: &syncbuf.Buffer{}, stderr: &syncbuf.Buffer{}, exited: make(chan struct{})}
	p.cmd.Env = append(os.Environ(), runEnv+"="+cfg)
	p.cmd.Stdout, p.cmd.Stderr = p.stdout, p.stderr
	if err := n.start(p.cmd); err != nil {
		t.Fatalf("starting the appliance: %v", err)
	}
	go func() { p.err = p.cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() {
		select {
		case <-p.exited:
		default:
			_ = p.cmd.Process.Kill()
			<-p.exited
		}
		if t.Failed() {
			t.Logf("appliance stdout:\n%s\nstderr:\n%s", p.stdout.String(), p.stderr.String())
		}
	})
	return p
}

// waitLine waits (10 s at most) for the appliance to print line on stdout.
func waitLine(t *testing.T, p *xlbProc, line string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		for l := range strings.Lines(p.stdout.String()) {
			if strings.TrimSpace(l) == line {
				return
			}
		}
	}
	t.Fatalf("the appliance did not print %q within 10s; stdout %q", line, p.stdout.String())
}

// wait waits for the process to exit and returns its exit code.
func (p *xlbProc) wait(t *testing.T, d time.Duration) int {
	t.Helper()
	select {
	case <-p.exited:
	case <-time.After(d):
		t.Fatalf("xlb still running after %v", d)
	}
	var ee *exec.ExitError
	if errors.As(p.err, &ee) {
		return ee.ExitCode()
	}
	if p.err != nil {
		t.Fatalf("xlb: %v", p.err)
	}
	return 0
}

// waitHealthy polls the admin listener's /healthz in n until it answers,
// failing the test if xlb exits first.
func waitHealthy(t *testing.T, n *runNS, p *xlbProc) {
	t.Helper()
	c := n.httpClient()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-p.exited:
			t.Fatalf("xlb exited before serving /healthz: %v", p.err)
		default:
		}
		resp, err := c.Get("http://127.0.0.1:9110/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatal("no /healthz within 20s")
}

// TestRun_ForwardsThenDetaches is the smoke test of the appliance: run in
// a namespace on one veth end, it is Ready with the program attached,
// forwards a UDP frame sent to the VIP from the peer end back out
// rewritten for the backend (destination MAC = the configured mac, source
// = the balancer's), reports it on /status, closes HealthChecked once its
// one target has a result, and when its context ends returns nil and
// leaves no XDP program on the interface. In native (veth's driver) and
// generic XDP mode.
func TestRun_ForwardsThenDetaches(t *testing.T) {
	for _, mode := range []string{"native", "generic"} {
		t.Run(mode, func(t *testing.T) { testForwardsThenDetaches(t, mode) })
	}
}

func testForwardsThenDetaches(t *testing.T, mode string) {
	n := newRunNS(t)
	cfg := runConfig(t, t.TempDir(), n.bName, fmt.Sprintf("xdp_mode = %q", mode))
	ps := n.packetSocket(t)
	p := startXLB(t, n, cfg)
	waitHealthy(t, n, p)
	waitLine(t, p, "ready")
	if !n.xdpAttached(t) {
		t.Fatal("the appliance is ready but netlink shows no XDP program on " + n.bName)
	}

	sent, err := craft.Build(&craft.Packet{
		Src: runClient, Dst: runVIP, Proto: packet.ProtoUDP, SrcPort: 40001, DstPort: 53,
		SrcMAC: n.pMAC, DstMAC: n.bMAC,
	})
	if err != nil {
		t.Fatal(err)
	}
	var got []byte
	for try := 0; try < 3 && got == nil; try++ {
		if err := ps.send(sent); err != nil {
			t.Fatalf("sending to the VIP: %v", err)
		}
		for {
			f, err := ps.recv(time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if f == nil {
				break
			}
			// The rewritten frame: the backend's MAC, ours as source.
			if bytes.Equal(f[:6], backendMAC) {
				got = f
				break
			}
		}
	}
	if got == nil {
		t.Fatal("no frame to the backend's MAC came back out of " + n.bName)
	}
	if !bytes.Equal(got[6:12], n.bMAC) {
		t.Errorf("source MAC %x, want the balancer's %s", got[6:12], n.bMAC)
	}
	if !bytes.Equal(got[12:], sent[12:]) {
		t.Errorf("L2 DSR changed more than the MACs:\nsent %x\ngot  %x", sent[12:], got[12:])
	}

	st := getStatus(t, n)
	if len(st.Queues) != 1 || st.Queues[0].TX == 0 {
		t.Errorf("/status queues %+v: want queue 0 with tx_packets > 0", st.Queues)
	}
	if st.Runtime.Interface != n.bName || len(st.Runtime.Queues) != 1 || st.Runtime.XDPMode != mode {
		t.Fatalf("/status runtime %+v: want interface %s, one queue, xdp_mode %s", st.Runtime, n.bName, mode)
	}
	t.Logf("on this kernel: xdp_mode %s, bind mode %s", st.Runtime.XDPMode, st.Runtime.Queues[0].BindMode)
	// The health check runs, and the backend, with no route to it in the
	// namespace, is unhealthy: the frame above went to it all the same
	// (E1: no backend healthy, all backends).
	if hc := st.Runtime.HealthChecks; len(hc) != 1 || hc[0].Target != "hc/10.201.0.2" || hc[0].Address != "10.201.0.2:53" ||
		len(hc[0].Services) != 1 || hc[0].Services[0] != "dns" || hc[0].Healthy {
		t.Errorf("/status runtime.health_checks %+v: want hc/10.201.0.2 (10.201.0.2:53) for dns, unhealthy", hc)
	}

	// The probe of 10.201.0.2:53 fails at once (no route): a result all
	// the same, so the first round is done.
	waitLine(t, p, "health-checked")

	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t, 10*time.Second); code != 0 {
		t.Fatalf("exit %d after SIGTERM, want 0\n%s", code, p.stderr.String())
	}
	if n.xdpAttached(t) {
		t.Error("an XDP program is still attached after xlb exited")
	}
	logs := p.stderr.String()
	for _, want := range []string{`"xlb running"`, `"XDP program detached"`, `"bind_modes"`, `"vips":["10.201.1.1"]`,
		`"health checks started"`, `"health checks stopped"`,
		`"conntrack table populated"`} {
		if !strings.Contains(logs, want) {
			t.Errorf("logs lack %s", want)
		}
	}
}

// TestRun_FailedStartDetaches: when startup fails after the program is
// attached, xlb exits 1 with an error that says why, and the program is
// gone: the admin address is taken, or zero-copy is required on a driver
// (veth) that cannot do it.
func TestRun_FailedStartDetaches(t *testing.T) {
	for _, tc := range []struct {
		name  string
		extra string
		taken bool // occupy the admin address first
		want  string
	}{
		{"admin address taken", "", true, "admin listener on 127.0.0.1:9110"},
		{"zero-copy on veth", `zero_copy = "on"`, false, "zero_copy = auto or off"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := newRunNS(t)
			cfg := runConfig(t, t.TempDir(), n.bName, tc.extra)
			if tc.taken {
				var ln net.Listener
				if err := n.Do(func() (err error) { ln, err = net.Listen("tcp", "127.0.0.1:9110"); return err }); err != nil {
					t.Fatal(err)
				}
				defer ln.Close()
			}
			p := startXLB(t, n, cfg)
			if code := p.wait(t, 20*time.Second); code != 1 {
				t.Fatalf("exit %d, want 1", code)
			}
			logs := p.stderr.String()
			if !strings.Contains(logs, "XDP program attached") {
				t.Errorf("the failure was meant to come after the attach:\n%s", logs)
			}
			lines := strings.Split(strings.TrimRight(logs, "\n"), "\n")
			if last := lines[len(lines)-1]; !strings.HasPrefix(last, "run: ") || !strings.Contains(last, tc.want) {
				t.Errorf("last line %q: want the error, naming %q", last, tc.want)
			}
			if !strings.Contains(logs, "XDP program detached") || n.xdpAttached(t) {
				t.Error("the XDP program was not detached after a failed start")
			}
		})
	}
}

func wantOneLine(t *testing.T, stderr, want string) {
	t.Helper()
	lines := strings.Split(strings.TrimRight(stderr, "\n"), "\n")
	if len(lines) != 1 || !strings.Contains(lines[0], want) {
		t.Errorf("stderr %q: want one line containing %q", stderr, want)
	}
}

// runStatus is the part of /status these tests read.
type runStatus struct {
	Queues []struct {
		Queue int    `json:"queue"`
		TX    uint64 `json:"tx_packets"`
	} `json:"queues"`
	Runtime struct {
		Interface string `json:"interface"`
		XDPMode   string `json:"xdp_mode"`
		Queues    []struct {
			BindMode string `json:"bind_mode"`
		} `json:"queues"`
		HealthChecks []struct {
			Target   string   `json:"target"`
			Address  string   `json:"address"`
			Services []string `json:"services"`
			Healthy  bool     `json:"healthy"`
		} `json:"health_checks"`
	} `json:"runtime"`
}

func getStatus(t *testing.T, n *runNS) runStatus {
	t.Helper()
	resp, err := n.httpClient().Get("http://127.0.0.1:9110/status")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st runStatus
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatalf("/status: %v", err)
	}
	return st
}

// TestRun_SecondInstanceRefused: a second xlb on an interface that already
// has the first's program says so and exits 1; the first keeps serving.
func TestRun_SecondInstanceRefused(t *testing.T) {
	n := newRunNS(t)
	dir := t.TempDir()
	cfg := runConfig(t, dir, n.bName)
	first := startXLB(t, n, cfg)
	waitHealthy(t, n, first)

	second := startXLB(t, n, cfg)
	if code := second.wait(t, 20*time.Second); code != 1 {
		t.Fatalf("second xlb: exit %d, want 1", code)
	}
	lines := strings.Split(strings.TrimRight(second.stderr.String(), "\n"), "\n")
	if last := lines[len(lines)-1]; !strings.Contains(last, "already has an XDP program") {
		t.Errorf("second xlb's last line %q: want it to say the interface already has an XDP program", last)
	}
	if !n.xdpAttached(t) {
		t.Error("the first xlb's program went away")
	}
	if st := getStatus(t, n); st.Runtime.Interface != n.bName {
		t.Errorf("the first xlb stopped serving /status: %+v", st)
	}
	if err := first.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := first.wait(t, 10*time.Second); code != 0 {
		t.Errorf("first xlb: exit %d after SIGTERM, want 0", code)
	}
}

// TestRun_UnusableCPU: a CPU the process may not run on is refused in one
// line before anything is attached.
func TestRun_UnusableCPU(t *testing.T) {
	n := newRunNS(t)
	p := startXLB(t, n, runConfig(t, t.TempDir(), n.bName, "cpus = [1023]"))
	if code := p.wait(t, 20*time.Second); code != 1 {
		t.Fatalf("exit %d, want 1", code)
	}
	wantOneLine(t, p.stderr.String(), "dataplane.cpus lists CPU 1023")
	if n.xdpAttached(t) {
		t.Error("an XDP program is attached")
	}
}

package e2e

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"xlb/internal/syncbuf"
	"xlb/scripts/testbed"

	"xlb/internal/nsx"
)

// adminAddr is the admin listener of the tests' configuration, on the
// balancer namespace's own loopback.
var adminAddr = netip.MustParseAddrPort("127.0.0.1:9110")

// adminSocket is the admin socket of the xlb in namespace ns: one of its
// own, in the package's temporary directory, since xlbs in different
// namespaces share the file system.
func adminSocket(ns string) string {
	return filepath.Join(binDir, ns+".sock")
}

// bedHead is how a test's configuration of the xlb on iface begins: its
// [dataplane] section (native XDP, every queue, a 64 K table, no state
// directory) with the caller's further keys, and [admin] on adminAddr
// and sock. Health checks, services and rules follow.
func bedHead(iface, sock string, dataplane ...string) string {
	var extra strings.Builder
	for _, kv := range dataplane {
		extra.WriteString(kv + "\n")
	}
	return fmt.Sprintf(`
[dataplane]
interface = %q
queues = "all"
xdp_mode = "native"
%sring_size = 512
conntrack_capacity = 65536
state_dir = ""

[admin]
listen = %q
socket = %q
`, iface, extra.String(), adminAddr, sock)
}

// tcpCheck is the health check "hc": TCP 80 every second, healthy after
// one pass, which every backend of the bed passes within a second or so
// of the start.
const tcpCheck = `
[[health_check]]
name = "hc"
type = "TCP"
port = 80
check_interval_sec = 1
timeout_sec = 1
healthy_threshold = 1
`

// xlbProc is `xlb run` in a bed's balancer namespace.
type xlbProc struct {
	bed    *testbed.Bed
	cmd    *exec.Cmd
	log    *syncbuf.Buffer
	exited chan struct{}
	err    error // Wait's, once exited is closed
}

// startXLB runs the built binary on cfg in b's balancer namespace with `ip
// netns exec`, which also mounts that namespace's /sys (xlb counts the
// interface's queues there) and execs, so the pid is xlb's own. It waits
// until the admin listener answers /healthz. Whatever still runs at the
// end of the test is killed, and a failed test gets xlb's log.
func startXLB(t *testing.T, b *testbed.Bed, cfg string) *xlbProc {
	t.Helper()
	return startXLBWith(t, b, cfg, xlbBin)
}

// startXLBWith is startXLB with the binary bin (another build of xlb).
func startXLBWith(t *testing.T, b *testbed.Bed, cfg, bin string) *xlbProc {
	t.Helper()
	ownStateDir(t, cfg)
	p := &xlbProc{bed: b, log: &syncbuf.Buffer{}, exited: make(chan struct{}),
		cmd: exec.Command("ip", "netns", "exec", b.LB.NS, bin, "run", "-c", cfg)}
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("starting xlb: %v", err)
	}
	go func() { p.err = p.cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() {
		if t.Failed() {
			// Before the stop: where did the traffic that failed go?
			t.Logf("diagnostics at failure:\n%s", diagnostics(b))
		}
		p.stop()
		if strings.Contains(p.log.String(), "WARNING: DATA RACE") {
			t.Error("xlb reported a data race (log below)")
		}
		if t.Failed() {
			t.Logf("xlb log:\n%s", p.log.String())
		}
	})
	deadline := time.Now().Add(20 * time.Second)
	for {
		select {
		case <-p.exited:
			t.Fatalf("xlb exited before serving /healthz (%v):\n%s", p.err, p.log.String())
		default:
		}
		if r, err := testbed.HTTPGet(b.LB.NS, adminAddr, "/healthz", time.Second); err == nil && r.Status == 200 {
			return p
		}
		if time.Now().After(deadline) {
			t.Fatalf("xlb: no /healthz within 20s:\n%s", p.log.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// noStateDir is the line of every configuration the tests write: without
// it xlb would keep its table in /run/xlb (the default), the host's, which
// the tests running side by side would contend for (the second one
// refuses to start). keepIn gives a test a directory of its own.
const noStateDir = `state_dir = ""` + "\n"

// ownStateDir fails t unless the configuration at cfg says where its table
// is kept, or that it is not: each instance needs its own state_dir.
func ownStateDir(t *testing.T, cfg string) {
	t.Helper()
	raw, err := os.ReadFile(cfg)
	must(t, err)
	if !strings.Contains(string(raw), "\nstate_dir = ") && !strings.Contains(string(raw), "\n"+defaultStateDirLine) {
		t.Fatalf("%s sets no dataplane.state_dir: the default, /run/xlb, is the host's; write %q or keepIn a directory of the test", cfg, noStateDir)
	}
}

// keepIn makes the configuration at cfg keep its table in dir, a
// directory of the test (t.TempDir: 0700, root's, under the sticky /tmp,
// which safedir accepts), in place of its state_dir = "".
func keepIn(t *testing.T, cfg, dir string) {
	t.Helper()
	raw, err := os.ReadFile(cfg)
	must(t, err)
	text := strings.Replace(string(raw), noStateDir, fmt.Sprintf("state_dir = %q\n", dir), 1)
	if text == string(raw) {
		t.Fatalf("%s has no line %s to replace", cfg, noStateDir)
	}
	must(t, os.WriteFile(cfg, []byte(text), 0o644))
}

// auditLines are the admin socket's audit lines in xlb's log (its JSON
// lines with msg "admin operation") of action asked by the process pid.
func (p *xlbProc) auditLines(action string, pid int) []map[string]any {
	var got []map[string]any
	for line := range strings.Lines(p.log.String()) {
		if !strings.Contains(line, `"msg":"admin operation"`) {
			continue
		}
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) == nil && m["action"] == action && m["peer_pid"] == float64(pid) {
			got = append(got, m)
		}
	}
	return got
}

// waitAudit waits for the audit line of action asked by the process pid
// to reach xlb's log (through a pipe: it may come a moment after the
// answer) and returns it; there must be one only.
func (p *xlbProc) waitAudit(t *testing.T, action string, pid int) map[string]any {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if got := p.auditLines(action, pid); len(got) > 0 {
			if len(got) > 1 {
				t.Errorf("%d audit lines of %s by pid %d, want 1: %v", len(got), action, pid, got)
			}
			return got[0]
		}
		if time.Now().After(deadline) {
			t.Fatalf("no audit line of %s by pid %d in xlb's log within 10 s:\n%s", action, pid, grepLines(p.log.String(), `"msg":"admin operation"`))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stop ends xlb with SIGTERM (SIGKILL after 5 s) if it still runs.
func (p *xlbProc) stop() {
	select {
	case <-p.exited:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(5 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
}

// kill9 sends SIGKILL and waits for the process to be gone.
func (p *xlbProc) kill9(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatalf("kill -9 xlb: %v", err)
	}
	select {
	case <-p.exited:
	case <-time.After(5 * time.Second):
		t.Fatal("xlb still running 5s after SIGKILL")
	}
	var ee *exec.ExitError
	if !errors.As(p.err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("xlb ended with %v, not by SIGKILL", p.err)
	}
}

// admin fetches path from xlb's admin listener.
func admin(t *testing.T, b *testbed.Bed, path string) string {
	t.Helper()
	r, err := testbed.HTTPGet(b.LB.NS, adminAddr, path, 2*time.Second)
	if err != nil {
		t.Fatalf("admin %s: %v", path, err)
	}
	if r.Status != 200 {
		t.Fatalf("admin %s: status %d: %s", path, r.Status, r.Body)
	}
	return r.Body
}

// status is the part of /status the tests read.
type status struct {
	Runtime struct {
		XDPMode string `json:"xdp_mode"`
		Queues  []struct {
			Queue    int    `json:"queue"`
			BindMode string `json:"bind_mode"`
			Frames   uint64 `json:"frames"`
		} `json:"queues"`
		XDPProgram   map[string]uint64 `json:"xdp_program"`
		HealthChecks []statusCheck     `json:"health_checks"`
	} `json:"runtime"`
	Services []statusService `json:"services"`
}

// statusCheck is a health-check target of /status.
type statusCheck struct {
	Target      string `json:"target"`
	Address     string `json:"address"`
	Healthy     bool   `json:"healthy"`
	Probes      uint64 `json:"probes"`
	Pass        *bool  `json:"last_pass"`
	Reason      string `json:"last_reason"`
	WeightState string `json:"last_weight_state"`
}

// statusService is a service of /status.
type statusService struct {
	Name     string          `json:"name"`
	Side     string          `json:"side"`
	Eligible []string        `json:"eligible"`
	Why      string          `json:"why"`
	Backends []statusBackend `json:"backends"`
}

// statusBackend is a backend of a service of /status.
type statusBackend struct {
	Name           string `json:"name"`
	Healthy        bool   `json:"healthy"`
	Weight         uint32 `json:"weight"`
	ReportedWeight uint32 `json:"reported_weight"`
	Eligible       bool   `json:"eligible"`
	Removed        bool   `json:"removed"`
}

func getStatus(t *testing.T, b *testbed.Bed) status {
	t.Helper()
	var s status
	body := admin(t, b, "/status")
	if err := json.Unmarshal([]byte(body), &s); err != nil {
		t.Fatalf("/status: %v\n%s", err, body)
	}
	return s
}

// waitStatus polls /status until ok accepts it, failing t (with the last
// status) after 15 s: xlb's health checks bring backends up on their own
// schedule, and a test of traffic waits for the state it assumes.
func waitStatus(t *testing.T, b *testbed.Bed, what string, ok func(status) bool) status {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		s := getStatus(t, b)
		if ok(s) {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("/status: no %s within 15s: %+v", what, s)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// allHealthy accepts a status in which every current backend of every
// service passes its health check.
func allHealthy(s status) bool {
	for _, svc := range s.Services {
		for _, be := range svc.Backends {
			if !be.Removed && !be.Healthy {
				return false
			}
		}
	}
	return len(s.Services) > 0
}

// xdpAttached reports whether the balancer's interface has an XDP program.
func xdpAttached(t *testing.T, b *testbed.Bed) bool {
	t.Helper()
	var attached bool
	err := nsx.Do(b.LB.NS, func() error {
		l, err := netlink.LinkByName(b.LB.Iface)
		if err != nil {
			return err
		}
		x := l.Attrs().Xdp
		attached = x != nil && x.Attached
		return nil
	})
	if err != nil {
		t.Fatalf("reading %s's XDP state: %v", b.LB.Iface, err)
	}
	return attached
}

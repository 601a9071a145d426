package main

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"

	"xlb/config"
	"xlb/controlplane"
	"xlb/controlplane/admin"
	"xlb/controlplane/appliance"
	"xlb/controlplane/bgp"
	"xlb/controlplane/cptest"
	"xlb/healthcheck"
)

// ctlConfig: web has two primaries and a failover, one unnamed backend in
// dns.
var ctlConfig = func() string {
	b, err := os.ReadFile("../../testdata/config/two-services.toml") // shared with controlplane/admin
	if err != nil {
		panic(err)
	}
	return string(b)
}()

// ctlSources serves a cptest rig through a real admin listener, with
// drain and a reload history, as `xlb run` does.
type ctlSources struct {
	rig *cptest.Rig
	bgp *admin.BGPReport // nil: no [bgp]
	// reloads records each reload asked for. steps, when set, serves them
	// as xlb run does (appliance.ReloadSteps on rig's control plane);
	// without it a reload changes nothing, and refuseEmpty makes it refuse
	// without AllowEmpty, as the appliance does for a file without rules.
	reloads     []admin.ReloadRequest
	refuseEmpty bool
	steps       *appliance.ReloadSteps
}

func (s *ctlSources) ReloadNow(req admin.ReloadRequest) ([]string, error) {
	s.reloads = append(s.reloads, req)
	if s.steps != nil {
		return s.steps.ReloadNow(req)
	}
	if s.refuseEmpty && !req.AllowEmpty {
		return nil, appliance.ErrEmpty
	}
	return nil, nil
}

func (s *ctlSources) Status() *admin.Report {
	return admin.Gather(admin.Inputs{Snapshot: s.rig.CP.Snapshot(), Workers: []admin.QueueStats{{Queue: 0, Stats: s.rig.D.Stats()}},
		Conntrack: s.rig.Conntrack(), Now: s.rig.Now,
		Reloads: &admin.ReloadReport{Success: 3, Failure: 1, Last: &admin.LastReload{At: "2026-01-02T03:04:05Z", OK: true}},
		BGP:     s.bgp})
}
func (s *ctlSources) Drain(name string) ([]string, error) {
	hit, err := s.rig.CP.Drain(name, s.rig.Now)
	return hit, opErr(name, err)
}
func (s *ctlSources) Undrain(name string) ([]string, error) {
	hit, err := s.rig.CP.Undrain(name, s.rig.Now)
	return hit, opErr(name, err)
}

// DrainNode marks the node as the appliance's announcer would.
func (s *ctlSources) DrainNode(drained bool) error {
	if s.bgp == nil {
		return appliance.ErrNoBGP
	}
	s.bgp.NodeDrained = drained
	return nil
}

// opErr is the appliance's answer for a name that is no backend.
func opErr(name string, err error) error {
	if errors.Is(err, controlplane.ErrUnknownBackend) {
		return fmt.Errorf("%w %q: no current endpoint has this name or address", admin.ErrUnknownBackend, name)
	}
	return err
}

// startAdmin serves a rig on a loopback port and a socket, and returns
// the address and the socket's path.
func startAdmin(t *testing.T) (*cptest.Rig, string, string) {
	t.Helper()
	r, _, addr, sock := startAdminBGP(t, nil)
	return r, addr, sock
}

// startAdminBGP is startAdmin for a fleet member with the given bgp report.
func startAdminBGP(t *testing.T, b *admin.BGPReport) (*cptest.Rig, *ctlSources, string, string) {
	t.Helper()
	r := cptest.New(t, ctlConfig)
	src := &ctlSources{rig: r, bgp: b}
	sock := filepath.Join(t.TempDir(), "admin.sock")
	srv, err := admin.New(admin.Options{Listen: "127.0.0.1:0", Socket: sock}, src, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close(t.Context()) })
	return r, src, srv.Addr().String(), sock
}

// TestDrainNodeCommands: `xlb drain --node` withdraws the instance's
// routes through the listener and `xlb status` says so, undrain announces
// again; without [bgp] it exits 1 saying why, and a NAME with --node is a
// usage error.
func TestDrainNodeCommands(t *testing.T) {
	_, _, sock := startAdmin(t)
	if o := xlb("drain", "--socket", sock, "--node"); o.code != 1 || !strings.Contains(o.stderr, "no [bgp] section") {
		t.Errorf("drain --node without bgp: exit %d, stderr %q", o.code, o.stderr)
	}
	b := &admin.BGPReport{Status: bgp.Status{ASN: 65010, RouterID: netip.MustParseAddr("10.97.0.2"),
		Neighbors: []bgp.NeighborStatus{{Address: netip.MustParseAddr("10.97.0.1"), ASN: 65000, State: "established", Up: true, Uptime: 90 * time.Second, PrefixesSent: 2}},
		VIPs:      []bgp.VIPStatus{{VIP: netip.MustParseAddr("203.0.113.10"), Reason: bgp.ReasonNodeDrained}}}}
	_, src, addr, sock := startAdminBGP(t, b)
	o := xlb("drain", "--socket", sock, "--node")
	o.wantCode(t, 0)
	if !src.bgp.NodeDrained || !strings.Contains(o.stdout, "node drained") {
		t.Errorf("drain --node: drained %v, stdout %q", src.bgp.NodeDrained, o.stdout)
	}
	st := xlb("status", "--admin", addr)
	st.wantCode(t, 0)
	for _, want := range []string{"bgp: AS 65010, router id 10.97.0.2, node drained", "10.97.0.1", "established", "1m30s",
		"203.0.113.10", "node drained"} {
		if !strings.Contains(st.stdout, want) {
			t.Errorf("status lacks %q:\n%s", want, st.stdout)
		}
	}
	xlb("undrain", "--socket", sock, "--node").wantCode(t, 0)
	if src.bgp.NodeDrained {
		t.Error("undrain --node left the node drained")
	}
	xlb("drain", "--socket", sock, "--node", "b1").wantCode(t, 2)
}

// TestStatusFleet (S5): `xlb status --fleet` shows each service's
// fingerprint on every instance; instances with the same configuration
// and health agree (exit 0); one health difference makes them disagree on
// that service, which it names (exit 1).
func TestStatusFleet(t *testing.T) {
	_, a, _ := startAdmin(t)
	rb, b, _ := startAdmin(t)
	o := xlb("status", "--fleet", a+","+b)
	o.wantCode(t, 0)
	if !strings.Contains(o.stdout, "the 2 instances agree on every service") {
		t.Errorf("agreeing fleet:\n%s", o.stdout)
	}
	for line := range strings.Lines(o.stdout) {
		if f := strings.Fields(line); len(f) == 4 && f[0] == "web" && (f[1] != f[2] || len(f[1]) != 16 || f[3] != "yes") {
			t.Errorf("web row %v: want the same 16-digit fingerprint twice and yes", f)
		}
	}
	rb.Health("b1", false)
	o = xlb("status", "--fleet", a+","+b)
	o.wantCode(t, 1)
	if !strings.Contains(o.stdout, "instances disagree on web:") || strings.Contains(o.stdout, "disagree on dns") {
		t.Errorf("b1 down on one instance:\n%s", o.stdout)
	}
}

// columns finds the row of the table whose first two cells are svc and
// name and returns its cells.
func columns(t *testing.T, table, svc, name string) []string {
	t.Helper()
	for line := range strings.Lines(table) {
		f := strings.Fields(line)
		if len(f) >= 2 && f[0] == svc && f[1] == name {
			return f
		}
	}
	t.Fatalf("no row %s %s in:\n%s", svc, name, table)
	return nil
}

// TestStatusTable: `xlb status` prints the services (side, eligible set
// size, why) and every backend with its state and counters, as /status
// reports them; -c FILE finds the listener through [admin] listen.
func TestStatusTable(t *testing.T) {
	r, addr, _ := startAdmin(t)
	// Flows until b1 has one connection of three packets.
	for sport := uint16(40000); ; sport++ {
		if r.Send(cptest.TCP("198.51.100.7", "203.0.113.10", sport, 80, "S")).BackendName() != "b1" {
			continue
		}
		r.Send(cptest.TCP("198.51.100.7", "203.0.113.10", sport, 80, "A"))
		r.Send(cptest.TCP("198.51.100.7", "203.0.113.10", sport, 80, "A"))
		break
	}
	if _, err := r.CP.Drain("b2", r.Now); err != nil {
		t.Fatal(err)
	}
	r.Health("f1", false)

	o := xlb("status", "--admin", addr)
	o.wantCode(t, 0)
	if !strings.Contains(o.stdout, "reloads 3 ok, 1 failed, last reload ok at 2026-01-02T03:04:05Z") {
		t.Errorf("no reload summary in:\n%s", o.stdout)
	}
	web := columns(t, o.stdout, "web", "primary")
	if web[2] != "1" || web[3] != "-" {
		t.Errorf("web eligible %s, weights %s; want 1 (b2 drained), - (not weighted): %v", web[2], web[3], web)
	}
	columns(t, o.stdout, "dns", "primary")
	b1 := columns(t, o.stdout, "web", "b1")
	want := []string{"web", "b1", "10.0.1.1", "pool-a", "primary", "healthy", "1", "yes", "active", "3", "1"}
	if strings.Join(b1, " ") != strings.Join(want, " ") {
		t.Errorf("b1 row %v, want %v", b1, want)
	}
	b2 := columns(t, o.stdout, "web", "b2")
	if b2[7] != "no" || b2[8] != "draining" || b2[9] != "30.0s" {
		t.Errorf("b2 row %v, want not eligible, draining 30.0s", b2)
	}
	f1 := columns(t, o.stdout, "web", "f1")
	if f1[4] != "failover" || f1[5] != "unhealthy" {
		t.Errorf("f1 row %v, want failover, unhealthy", f1)
	}
	columns(t, o.stdout, "dns", "10.0.4.1")

	cfg := filepath.Join(t.TempDir(), "x.toml")
	if err := os.WriteFile(cfg, []byte(ctlConfig+fmt.Sprintf("\n[admin]\nlisten = %q\n", addr)), 0o644); err != nil {
		t.Fatal(err)
	}
	if o2 := xlb("status", "-c", cfg); o2.code != 0 || o2.stdout != o.stdout {
		t.Errorf("status -c: exit %d, output differs from --admin's:\n%s\nstderr %s", o2.code, o2.stdout, o2.stderr)
	}
}

// TestDrainCommands: drain takes b1 out of the eligible set, undrain
// returns it, both through the admin socket (--socket, or the file's
// [admin] socket); an unknown name or no socket exits 1 saying why; a
// missing NAME, and --admin (the TCP listener refuses them), are usage
// errors; the TCP listener itself answers 403.
func TestDrainCommands(t *testing.T) {
	r, addr, sock := startAdmin(t)
	eligible := func() int { return len(r.CP.Snapshot().Services[0].Eligible) }
	before := eligible()

	o := xlb("drain", "--socket", sock, "b1")
	o.wantCode(t, 0)
	if o.stdout != "drained web/b1\n" || eligible() != before-1 {
		t.Errorf("drain: %q, eligible %d -> %d", o.stdout, before, eligible())
	}
	cfg := filepath.Join(t.TempDir(), "x.toml")
	if err := os.WriteFile(cfg, []byte(ctlConfig+"\n[admin]\nsocket = \""+sock+"\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	o = xlb("undrain", "-c", cfg, "b1")
	o.wantCode(t, 0)
	if o.stdout != "undrained web/b1\n" || eligible() != before {
		t.Errorf("undrain: %q, eligible %d, want %d", o.stdout, eligible(), before)
	}
	o = xlb("drain", "--socket", sock, "nope")
	o.wantCode(t, 1)
	if !strings.Contains(o.stderr, `unknown backend "nope"`) {
		t.Errorf("drain nope: stderr %q", o.stderr)
	}
	xlb("drain", "--socket", sock).wantCode(t, 2)
	o = xlb("drain", "--admin", addr, "b1")
	o.wantCode(t, 2)
	if !strings.Contains(o.stderr, "admin socket") || eligible() != before {
		t.Errorf("drain --admin: stderr %q, eligible %d, want a usage error naming the socket and nothing drained", o.stderr, eligible())
	}
	if _, err := admin.Call(http.MethodPost, addr, "/drain?backend=b1"); err == nil || !strings.Contains(err.Error(), "read-only") || eligible() != before {
		t.Errorf("POST /drain on the TCP listener: %v, eligible %d; want refused, nothing drained", err, eligible())
	}
	o = xlb("drain", "--socket", filepath.Join(t.TempDir(), "none.sock"), "b1")
	o.wantCode(t, 1)
	if !strings.Contains(o.stderr, "is xlb running?") {
		t.Errorf("no socket: stderr %q", o.stderr)
	}
}

// TestAdminAddr: --admin wins, then the file's [admin] listen, then the
// default; an unspecified host means loopback.
func TestAdminAddr(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "x.toml")
	if err := os.WriteFile(cfg, []byte(ctlConfig+"\n[admin]\nlisten = \"0.0.0.0:9555\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "127.0.0.1:9110"},
		{[]string{"--admin", "127.0.0.2:1"}, "127.0.0.2:1"},
		{[]string{"-c", cfg}, "127.0.0.1:9555"},
		{[]string{"-c", cfg, "--admin", "[::]:7"}, "[::1]:7"},
		{[]string{"--admin", ":8"}, "127.0.0.1:8"},
	} {
		got, _, err := adminFlags("status", tc.args)
		if err != nil || got != tc.want {
			t.Errorf("%v: %q, %v; want %q", tc.args, got, err, tc.want)
		}
	}
}

// TestReloadCommand: the file is validated before anything is sent; the
// pid comes from --pid or --pidfile and must be an `xlb run`, started
// with -c FILE the same file (by /proc, its working directory for a
// relative one), else nothing is sent; the process gets SIGHUP.
func TestReloadCommand(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.toml")
	bad := filepath.Join(dir, "bad.toml")
	if err := os.WriteFile(good, []byte(ctlConfig+"\n[dataplane]\ninterface = \"eth0\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bad, []byte(strings.Replace(ctlConfig, `ports = ["80"]`, `ports = ["80-"]`, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	// A stand-in for xlb run: its command line has "run -c" and good.toml
	// relative to its working directory (this test's), and it records
	// each SIGHUP (see hupStandIn).
	got := filepath.Join(dir, "hups")
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	rel, err := filepath.Rel(wd, good)
	if err != nil || filepath.IsAbs(rel) {
		t.Fatalf("good.toml relative to %s: %q, %v", wd, rel, err)
	}
	proc := exec.Command(os.Args[0], "run", "-c", rel)
	proc.Env = append(os.Environ(), hupStandInEnv+"="+got)
	if err := proc.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proc.Process.Kill(); _ = proc.Wait() })
	waitFile(t, got, "ready\n")
	pidfile := filepath.Join(dir, "xlb.pid")
	if err := os.WriteFile(pidfile, []byte(strconv.Itoa(proc.Process.Pid)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	selfPid := filepath.Join(dir, "self.pid")
	if err := os.WriteFile(selfPid, []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		t.Fatal(err)
	}

	xlb("reload", "--pidfile", pidfile).wantCode(t, 2)
	xlb("reload", "-c", good, "--pid", "1", "--pidfile", pidfile).wantCode(t, 2)
	xlb("reload", "-c", good, "--allow-empty", "--pidfile", pidfile).wantCode(t, 2)
	xlb("reload", "-c", good, "--socket", "/x.sock", "--pid", "1").wantCode(t, 2)
	xlb("reload", "-c", good, "--dry-run", "--pidfile", pidfile).wantCode(t, 2)
	o := xlb("reload", "-c", bad, "--pidfile", pidfile)
	o.wantCode(t, 1)
	if !strings.Contains(o.stderr, "bad.toml") || !strings.Contains(o.stderr, "nothing sent") {
		t.Errorf("invalid file: stderr %q", o.stderr)
	}
	o = xlb("reload", "-c", ctlConfigFile(t, dir), "--pidfile", pidfile)
	o.wantCode(t, 1)
	if !strings.Contains(o.stderr, "dataplane.interface") {
		t.Errorf("no interface: stderr %q, want ValidateForRun's error", o.stderr)
	}
	o = xlb("reload", "-c", good, "--pidfile", selfPid)
	o.wantCode(t, 1)
	if !strings.Contains(o.stderr, "is not xlb run") {
		t.Errorf("pid of another process: stderr %q", o.stderr)
	}
	o = xlb("reload", "-c", good, "--pidfile", filepath.Join(dir, "none.pid"))
	o.wantCode(t, 1)

	// Another valid file than the one xlb run runs: refused, naming both,
	// no signal sent (the stand-in's record stays "ready").
	other := filepath.Join(t.TempDir(), "other.toml")
	if err := os.WriteFile(other, []byte(ctlConfig+"\n[dataplane]\ninterface = \"eth0\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	o = xlb("reload", "-c", other, "--pidfile", pidfile)
	o.wantCode(t, 1)
	if !strings.Contains(o.stderr, "runs "+good) || !strings.Contains(o.stderr, "(asked: "+other+")") || !strings.Contains(o.stderr, "nothing sent") {
		t.Errorf("reload -c other.toml by SIGHUP: stderr %q, want a refusal naming both files", o.stderr)
	}
	o = xlb("reload", "-c", good, "--pidfile", pidfile)
	o.wantCode(t, 0)
	if !strings.Contains(o.stdout, "sent SIGHUP") {
		t.Errorf("stdout %q", o.stdout)
	}
	waitFile(t, got, "ready\nhup\n")
}

// hupStandInEnv names the file a re-executed test binary records SIGHUPs
// in, as the stand-in for `xlb run` (TestMain). A Go process, not a shell:
// a shell started with SIGHUP ignored (the test run under nohup) cannot
// trap it, where signal.Notify takes it back.
const hupStandInEnv = "XLB_TEST_HUP_STANDIN"

// hupStandIn writes "ready" to file once it takes SIGHUP, then "hup" for
// each one, until it is killed.
func hupStandIn(file string) {
	hups := make(chan os.Signal, 1)
	signal.Notify(hups, syscall.SIGHUP)
	record := func(line string) {
		f, err := os.OpenFile(file, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err != nil {
			os.Exit(3)
		}
		_, _ = f.WriteString(line + "\n")
		_ = f.Close()
	}
	record("ready")
	for range hups {
		record("hup")
	}
}

// waitFile waits (up to 10 s) until file holds exactly want.
func waitFile(t *testing.T, file, want string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, _ := os.ReadFile(file)
		if string(b) == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s holds %q, want %q", file, b, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// ctlConfigFile writes ctlConfig, which has no [dataplane] interface.
func ctlConfigFile(t *testing.T, dir string) string {
	t.Helper()
	p := filepath.Join(dir, "noiface.toml")
	if err := os.WriteFile(p, []byte(ctlConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestReloadThroughSocket: without --pid or --pidfile, `xlb reload`
// validates the file, then has the running xlb reload now through the
// admin socket and prints the outcome: a refusal (here a file without
// rules) is exit 1 with the reason; --allow-empty is handed on; an
// invalid file sends nothing.
func TestReloadThroughSocket(t *testing.T) {
	_, src, _, sock := startAdminBGP(t, nil)
	dir := t.TempDir()
	good := filepath.Join(dir, "good.toml")
	if err := os.WriteFile(good, []byte(ctlConfig+"\n[dataplane]\ninterface = \"eth0\"\n[admin]\nsocket = \""+sock+"\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	o := xlb("reload", "-c", good)
	o.wantCode(t, 0)
	if o.stdout != "no changes\nreloaded\n" {
		t.Errorf("reload: stdout %q", o.stdout)
	}
	src.refuseEmpty = true
	o = xlb("reload", "-c", good, "--socket", sock)
	o.wantCode(t, 1)
	if !strings.Contains(o.stderr, "reload refused") || !strings.Contains(o.stderr, "--allow-empty") {
		t.Errorf("refused reload: stderr %q", o.stderr)
	}
	xlb("reload", "-c", good, "--allow-empty").wantCode(t, 0)
	bad := filepath.Join(dir, "bad.toml")
	if err := os.WriteFile(bad, []byte("[dataplane]\ninterface = 7\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	xlb("reload", "-c", bad, "--socket", sock).wantCode(t, 1)
	want := []admin.ReloadRequest{{Path: good}, {Path: good}, {Path: good, AllowEmpty: true}}
	if !slices.Equal(src.reloads, want) {
		t.Errorf("reloads asked %+v, want %+v (the invalid file sends nothing)", src.reloads, want)
	}
	o = xlb("reload", "-c", good, "--socket", filepath.Join(dir, "none.sock"))
	o.wantCode(t, 1)
	if !strings.Contains(o.stderr, "is xlb running?") {
		t.Errorf("no socket: stderr %q", o.stderr)
	}
}

// stepsVIPs and stepsChecks stand in for the XDP program's VIP map and
// the health checker under appliance.ReloadSteps.
type (
	stepsVIPs   struct{}
	stepsChecks struct{}
)

func (stepsVIPs) SetVIPs([]netip.Addr) error       { return nil }
func (stepsChecks) Set([]healthcheck.Target) error { return nil }

// TestReloadCommand_RunningFileOnly: through the socket, xlb reload and
// --dry-run name the file they mean, and the running xlb (the
// appliance's reload on a real control plane) refuses any other: `xlb
// reload -c B` while xlb runs A exits 1 naming both files and changes
// nothing. --dry-run prints what A's new text would change, then "dry
// run: nothing applied", and the running configuration stays as it was
// (dns still served); the reload then prints the same changes, then
// "reloaded", and applies them; a relative -c FILE is the same file.
func TestReloadCommand_RunningFileOnly(t *testing.T) {
	r, src, _, sock := startAdminBGP(t, nil)
	dir := t.TempDir()
	tail := "\n[dataplane]\ninterface = \"eth0\"\n[admin]\nsocket = \"" + sock + "\"\n"
	a, b := filepath.Join(dir, "a.toml"), filepath.Join(t.TempDir(), "b.toml")
	for _, p := range []string{a, b} {
		if err := os.WriteFile(p, []byte(ctlConfig+tail), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cur, err := config.Load(a)
	if err != nil {
		t.Fatal(err)
	}
	src.steps = appliance.NewReloadSteps(cur, stepsVIPs{}, stepsChecks{}, r.CP, func() int64 { return r.Now })
	services := func() []string {
		var names []string
		for _, s := range r.CP.Snapshot().Services {
			if s != nil {
				names = append(names, s.Name)
			}
		}
		return names
	}
	gen := r.CP.Snapshot().Gen

	for _, dry := range []bool{false, true} {
		args := []string{"reload", "-c", b}
		if dry {
			args = append(args, "--dry-run")
		}
		o := xlb(args...)
		o.wantCode(t, 1)
		if !strings.Contains(o.stderr, "xlb runs "+a) || !strings.Contains(o.stderr, "(asked: "+b+")") || o.stdout != "" {
			t.Errorf("%v while xlb runs a.toml: stdout %q, stderr %q; want a refusal naming both files", args, o.stdout, o.stderr)
		}
	}
	if r.CP.Snapshot().Gen != gen {
		t.Error("reload -c b.toml changed the running configuration")
	}

	// a.toml without dns (its rule, service and backend), with b3 in web.
	next := strings.Replace(ctlConfig, `{ name = "b2", ip = "10.0.1.2" }`, `{ name = "b2", ip = "10.0.1.2" }, { name = "b3", ip = "10.0.1.3" }`, 1)
	rules, _, _ := strings.Cut(next[strings.Index(next, "[[forwarding_rule]]"):], "[[forwarding_rule]]\nname = \"dns-udp\"")
	next, _, _ = strings.Cut(next, "[[backend_service]]\nname = \"dns\"")
	if err := os.WriteFile(a, []byte(next+rules+tail), 0o644); err != nil {
		t.Fatal(err)
	}
	changes := "removed rule dns-udp: 203.0.113.10 UDP 53 -> dns\n" +
		"removed service dns: UDP, MAGLEV, 1 backend\n" +
		"removed backend dns/10.0.4.1: in pool-d\n" +
		"added backend web/b3: 10.0.1.3 in pool-a\n"
	o := xlb("reload", "-c", a, "--dry-run")
	o.wantCode(t, 0)
	if o.stdout != changes+"dry run: nothing applied\n" {
		t.Errorf("dry run: stdout %q, want the changes, then the dry run's line", o.stdout)
	}
	if got := services(); !slices.Equal(got, []string{"web", "dns"}) || r.CP.Snapshot().Gen != gen {
		t.Errorf("after the dry run: services %v, generation %d -> %d; want the running configuration unchanged", got, gen, r.CP.Snapshot().Gen)
	}
	t.Chdir(dir)
	o = xlb("reload", "-c", "a.toml")
	o.wantCode(t, 0)
	if o.stdout != changes+"reloaded\n" {
		t.Errorf("reload: stdout %q, want the changes, then reloaded", o.stdout)
	}
	if got := services(); !slices.Equal(got, []string{"web"}) {
		t.Errorf("after the reload: services %v, want web alone", got)
	}
	if o := xlb("reload", "-c", a); o.code != 0 || o.stdout != "no changes\nreloaded\n" {
		t.Errorf("reload again: %+v, want no changes", o)
	}
	if last := src.reloads[len(src.reloads)-1]; last.Path != a {
		t.Errorf("the path sent: %q, want %q", last.Path, a)
	}
}

// TestReloadCommand_OlderXLB: against an xlb from before reloads named
// their file and listed their changes, xlb reload prints its "reloaded"
// and says that it reloaded the file it runs, listing nothing; --dry-run,
// which it does not serve (404), exits 1 saying nothing was applied.
func TestReloadCommand_OlderXLB(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "old.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	var reloads int
	mux.HandleFunc("POST /reload", func(w http.ResponseWriter, _ *http.Request) {
		reloads++
		_, _ = w.Write([]byte("reloaded\n"))
	})
	srv := &http.Server{Handler: mux}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	good := filepath.Join(t.TempDir(), "good.toml")
	if err := os.WriteFile(good, []byte(ctlConfig+"\n[dataplane]\ninterface = \"eth0\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	o := xlb("reload", "-c", good, "--socket", sock)
	o.wantCode(t, 0)
	if !strings.HasPrefix(o.stdout, "reloaded\n") || !strings.Contains(o.stdout, "older than this xlb reload") {
		t.Errorf("reload through an older xlb: stdout %q", o.stdout)
	}
	o = xlb("reload", "-c", good, "--socket", sock, "--dry-run")
	o.wantCode(t, 1)
	if !strings.Contains(o.stderr, "has no dry run") || !strings.Contains(o.stderr, "nothing applied") || reloads != 1 {
		t.Errorf("dry run through an older xlb: stderr %q, %d reloads; want refused, one reload (the first)", o.stderr, reloads)
	}
}

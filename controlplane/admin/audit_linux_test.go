package admin_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"xlb/controlplane/admin"
	"xlb/internal/nettest"
)

// auditedServers is startServers with the log observed.
func auditedServers(t *testing.T, src admin.Source) (base, sock string, logs *observer.ObservedLogs) {
	t.Helper()
	core, logs := observer.New(zapcore.DebugLevel)
	base, sock = startServersLog(t, src, zap.New(core))
	return base, sock, logs
}

// audit is what the test expects of one audit line.
type audit struct {
	level   zapcore.Level
	action  string
	outcome string
	status  int
}

// takeAudit takes the audit lines logged since the last call: there must
// be exactly one (each request answered is logged once, before its answer
// ends), as want says, with this process as the peer. It returns the
// line's fields.
func takeAudit(t *testing.T, logs *observer.ObservedLogs, want audit) map[string]any {
	t.Helper()
	lines := logs.FilterMessage(admin.AuditMessage).All()
	logs.TakeAll()
	if len(lines) != 1 {
		t.Fatalf("%d audit lines, want 1 (%s): %v", len(lines), want.action, lines)
	}
	e := lines[0]
	m := e.ContextMap()
	if e.Level != want.level || m["action"] != want.action || m["outcome"] != want.outcome || m["status"] != int64(want.status) {
		t.Errorf("audit line %s %v, want %s action %s outcome %s status %d", e.Level, m, want.level, want.action, want.outcome, want.status)
	}
	if m["peer_uid"] != uint32(os.Geteuid()) || m["peer_gid"] != uint32(os.Getegid()) || m["peer_pid"] != int32(os.Getpid()) {
		t.Errorf("audit line's peer: uid %v gid %v pid %v, want this process's: %d %d %d", m["peer_uid"], m["peer_gid"], m["peer_pid"],
			os.Geteuid(), os.Getegid(), os.Getpid())
	}
	if _, has := m["error"]; has != (want.outcome != admin.OutcomeOK) {
		t.Errorf("audit line %v: error present %v, want it only when not ok", m, has)
	}
	return m
}

func noAudit(t *testing.T, logs *observer.ObservedLogs, what string) {
	t.Helper()
	if lines := logs.FilterMessage(admin.AuditMessage).All(); len(lines) > 0 {
		t.Errorf("%s: audit lines %v, want none", what, lines)
	}
	logs.TakeAll()
}

// TestAudit_Drain: a drain and an undrain through the socket are logged
// once each, at Info, with the backend asked for, the backends acted on
// and the peer's uid, gid and pid (this test's); an unknown backend and a
// missing one at Warn, refused, with the reason. Reading /status and
// /metrics logs nothing.
func TestAudit_Drain(t *testing.T) {
	_, src := newRig(t)
	base, sock, logs := auditedServers(t, src)
	noAudit(t, logs, "start")

	if code, body := doSock(t, sock, "POST", "/drain?backend=b1"); code != 200 {
		t.Fatalf("drain: %d %q", code, body)
	}
	m := takeAudit(t, logs, audit{zapcore.InfoLevel, "drain", admin.OutcomeOK, 200})
	if m["target"] != "b1" || !reflect.DeepEqual(m["params"], map[string]any{"backend": "b1"}) || !reflect.DeepEqual(m["backends"], []any{"web/b1"}) {
		t.Errorf("drain's audit line %v: want target b1, params backend=b1, backends [web/b1]", m)
	}
	if code, body := doSock(t, sock, "POST", "/undrain?backend=web/b1"); code != 200 {
		t.Fatalf("undrain: %d %q", code, body)
	}
	m = takeAudit(t, logs, audit{zapcore.InfoLevel, "undrain", admin.OutcomeOK, 200})
	if m["target"] != "web/b1" || !reflect.DeepEqual(m["backends"], []any{"web/b1"}) {
		t.Errorf("undrain's audit line %v: want target web/b1, backends [web/b1]", m)
	}

	if code, _ := doSock(t, sock, "POST", "/drain?backend=nope"); code != http.StatusNotFound {
		t.Fatalf("drain nope: %d", code)
	}
	m = takeAudit(t, logs, audit{zapcore.WarnLevel, "drain", admin.OutcomeRefused, 404})
	if m["target"] != "nope" || !strings.Contains(m["error"].(string), `"nope"`) || m["backends"] != nil {
		t.Errorf("unknown backend's audit line %v: want target nope, the error naming it, no backends", m)
	}
	if code, _ := doSock(t, sock, "POST", "/undrain"); code != http.StatusBadRequest {
		t.Fatalf("undrain without backend: %d", code)
	}
	m = takeAudit(t, logs, audit{zapcore.WarnLevel, "undrain", admin.OutcomeRefused, 400})
	if m["error"] != "missing ?backend=NAME" || m["target"] != nil || m["params"] != nil {
		t.Errorf("missing backend's audit line %v: want its error, no target nor params", m)
	}

	for _, path := range []string{"/status", "/metrics", "/healthz"} {
		if code, _ := doSock(t, sock, "GET", path); code != 200 {
			t.Errorf("GET %s on the socket: %d", path, code)
		}
		get(t, base+path, 200)
	}
	noAudit(t, logs, "reads")
}

// TestAudit_DrainNode: node drains are logged once each (the announcer
// logs none of its own): refused without [bgp], then done.
func TestAudit_DrainNode(t *testing.T) {
	_, src := newRig(t)
	_, sock, logs := auditedServers(t, src)
	logs.TakeAll()
	if code, _ := doSock(t, sock, "POST", "/drain-node"); code != http.StatusConflict {
		t.Fatalf("drain-node without bgp: %d", code)
	}
	m := takeAudit(t, logs, audit{zapcore.WarnLevel, "drain-node", admin.OutcomeRefused, 409})
	if !strings.Contains(m["error"].(string), "no [bgp]") {
		t.Errorf("refused node drain's audit line %v: want the reason", m)
	}
	src.bgp = &admin.BGPReport{}
	if code, _ := doSock(t, sock, "POST", "/drain-node"); code != 200 {
		t.Fatalf("drain-node: %d", code)
	}
	takeAudit(t, logs, audit{zapcore.InfoLevel, "drain-node", admin.OutcomeOK, 200})
	if code, _ := doSock(t, sock, "POST", "/undrain-node"); code != 200 {
		t.Fatalf("undrain-node: %d", code)
	}
	takeAudit(t, logs, audit{zapcore.InfoLevel, "undrain-node", admin.OutcomeOK, 200})
}

// TestAudit_Reload: a reload is logged with its parameters and the
// changes it applied; a dry run as action reload-dry-run, with the
// changes it would apply; a refused one at Warn with the reasons, a bad
// parameter too.
func TestAudit_Reload(t *testing.T) {
	src := &operatorSource{changes: []string{"removed rule dns-udp"}}
	_, sock, logs := auditedServers(t, src)
	logs.TakeAll()
	if code, _ := doSock(t, sock, "POST", "/reload?allow_empty=1"); code != 200 {
		t.Fatalf("reload: %d", code)
	}
	m := takeAudit(t, logs, audit{zapcore.InfoLevel, "reload", admin.OutcomeOK, 200})
	if !reflect.DeepEqual(m["params"], map[string]any{"allow_empty": "1"}) || !reflect.DeepEqual(m["changes"], []any{"removed rule dns-udp"}) {
		t.Errorf("reload's audit line %v: want params allow_empty=1 and the changes", m)
	}
	if code, _ := doSock(t, sock, "POST", "/reload-dry-run?path=/etc/xlb/xlb.toml"); code != 200 {
		t.Fatalf("reload-dry-run: %d", code)
	}
	m = takeAudit(t, logs, audit{zapcore.InfoLevel, "reload-dry-run", admin.OutcomeOK, 200})
	if !reflect.DeepEqual(m["params"], map[string]any{"path": "/etc/xlb/xlb.toml"}) || !reflect.DeepEqual(m["changes"], []any{"removed rule dns-udp"}) {
		t.Errorf("dry run's audit line %v: want params path and the changes", m)
	}
	src.reloadErr = errors.New("xlb.toml:3: nope")
	if code, _ := doSock(t, sock, "POST", "/reload"); code != http.StatusUnprocessableEntity {
		t.Fatalf("refused reload: %d", code)
	}
	m = takeAudit(t, logs, audit{zapcore.WarnLevel, "reload", admin.OutcomeRefused, 422})
	if !strings.Contains(m["error"].(string), "xlb.toml:3: nope") {
		t.Errorf("refused reload's audit line %v: want the reason", m)
	}
	if code, _ := doSock(t, sock, "POST", "/reload?allow_empty=perhaps"); code != http.StatusBadRequest {
		t.Fatalf("reload?allow_empty=perhaps: %d", code)
	}
	takeAudit(t, logs, audit{zapcore.WarnLevel, "reload", admin.OutcomeRefused, 400})
}

// TestAudit_Capture: a capture is logged once it ends, with its filter,
// the frames written and lost and how long it ran; one refused (busy) at
// Warn, and one whose stream failed after it began as failed, with the
// error, though its status was 200.
func TestAudit_Capture(t *testing.T) {
	src := &operatorSource{}
	_, sock, logs := auditedServers(t, src)
	logs.TakeAll()
	capture := func() {
		t.Helper()
		resp, err := sockClient(sock).Post("http://xlb/capture?vip=203.0.113.10&verdict=forward&count=7", "", nil)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	capture()
	m := takeAudit(t, logs, audit{zapcore.InfoLevel, "capture", admin.OutcomeOK, 200})
	if !reflect.DeepEqual(m["params"], map[string]any{"vip": "203.0.113.10", "verdict": "forward", "count": "7"}) ||
		m["frames"] != uint64(3) || m["packets"] != uint64(5) || m["lost"] != uint64(1) || m["duration"] == nil {
		t.Errorf("capture's audit line %v: want its params, 3 frames, 5 packets, 1 lost, a duration", m)
	}
	src.captureErr = errors.New("write: broken pipe")
	capture()
	m = takeAudit(t, logs, audit{zapcore.WarnLevel, "capture", admin.OutcomeFailed, 200})
	if m["error"] != "write: broken pipe" || m["frames"] != uint64(3) {
		t.Errorf("failed capture's audit line %v: want its error and frames", m)
	}
	src.busy = true
	if code, _ := doSock(t, sock, "POST", "/capture"); code != http.StatusConflict {
		t.Fatalf("busy capture: %d", code)
	}
	m = takeAudit(t, logs, audit{zapcore.WarnLevel, "capture", admin.OutcomeRefused, 409})
	if !strings.Contains(m["error"].(string), "already running") || m["frames"] != nil {
		t.Errorf("busy capture's audit line %v: want the reason, no frames", m)
	}
}

// TestAudit_PeerRefused: a process of another user that reaches the
// socket (its file made 0666 by mistake) is refused, and logged at Warn
// with its uid and pid and what it asked; the drain is not done.
func TestAudit_PeerRefused(t *testing.T) {
	nettest.RequireRoot(t)
	_, src := newRig(t)
	base, sock, logs := auditedServers(t, src)
	logs.TakeAll()
	// The socket's directories and file open to every user.
	for _, p := range []string{filepath.Dir(filepath.Dir(sock)), filepath.Dir(sock)} {
		if err := os.Chmod(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(sock, 0o666); err != nil {
		t.Fatal(err)
	}
	conn := nettest.DialUnixAs(t, sock, nettest.Nobody)
	used := false
	c := &http.Client{Transport: &http.Transport{DialContext: func(context.Context, string, string) (net.Conn, error) {
		if used {
			return nil, errors.New("one connection only: the one made as nobody")
		}
		used = true
		return conn, nil
	}}, Timeout: 10 * time.Second}
	resp, err := c.Post("http://xlb/drain?backend=b1", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("drain as nobody: %d %q, want 403", resp.StatusCode, body)
	}
	lines := logs.FilterMessage(admin.AuditMessage).All()
	if len(lines) != 1 {
		t.Fatalf("%d audit lines, want 1: %v", len(lines), lines)
	}
	m := lines[0].ContextMap()
	if lines[0].Level != zapcore.WarnLevel || m["action"] != "drain" || m["outcome"] != admin.OutcomeRefused || m["status"] != int64(403) ||
		m["peer_uid"] != uint32(nettest.Nobody) || m["peer_pid"] != int32(os.Getpid()) ||
		!reflect.DeepEqual(m["params"], map[string]any{"backend": "b1"}) || !strings.Contains(m["error"].(string), "peer uid 65534") {
		t.Errorf("refused peer's audit line %s %v: want Warn, drain refused 403, params backend=b1, peer uid 65534 and this pid, the reason",
			lines[0].Level, m)
	}
	rep, _ := status(t, base)
	if len(rep.Services[0].Eligible) != 2 {
		t.Errorf("eligible after a refused drain: %v, want b1 b2", rep.Services[0].Eligible)
	}
}

// TestAudit_CaptureStreams: the audit's wrapper of the answer still lets
// a capture flush what it has written (and lift its write deadline: the
// same http.ResponseController reaches both): the client reads the first
// bytes while the capture runs; it is logged once it ends.
func TestAudit_CaptureStreams(t *testing.T) {
	src := &operatorSource{hold: make(chan struct{})}
	_, sock, logs := auditedServers(t, src)
	logs.TakeAll()
	resp, err := sockClient(sock).Post("http://xlb/capture", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	first := make([]byte, len("pcapng bytes"))
	if _, err := io.ReadFull(resp.Body, first); err != nil || string(first) != "pcapng bytes" {
		t.Fatalf("the capture's first bytes, while it runs: %q, %v", first, err)
	}
	noAudit(t, logs, "a capture running")
	close(src.hold)
	if rest, err := io.ReadAll(resp.Body); err != nil || len(rest) != 0 {
		t.Fatalf("the rest: %q, %v", rest, err)
	}
	takeAudit(t, logs, audit{zapcore.InfoLevel, "capture", admin.OutcomeOK, 200})
}

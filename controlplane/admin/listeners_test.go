package admin_test

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"xlb/controlplane/admin"
)

// eligibleCount is how many backends of the rig's first service are
// eligible now.
func eligibleCount(t *testing.T, base string) int {
	t.Helper()
	rep, _ := status(t, base)
	return len(rep.Services[0].Eligible)
}

// TestTCPRefusesStateChanges: every state-changing endpoint answers 403
// on the TCP listener, naming the socket, whatever the method, Host,
// Origin or body (what a browser page on the host could send: a "simple"
// text/plain POST, a rebound Host); nothing changes. The same request
// through the socket is served.
func TestTCPRefusesStateChanges(t *testing.T) {
	_, src := newRig(t)
	base, sock := startServers(t, src)
	before := eligibleCount(t, base)
	for _, path := range []string{"/drain?backend=b1", "/undrain?backend=b1", "/drain-node", "/undrain-node"} {
		for _, method := range []string{"POST", "GET", "PUT"} {
			req, err := http.NewRequest(method, base+path, strings.NewReader("backend=b1"))
			if err != nil {
				t.Fatal(err)
			}
			req.Host = "attacker.example:9110"
			req.Header.Set("Origin", "http://attacker.example")
			req.Header.Set("Content-Type", "text/plain")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			// A body is refused before anything (413); without one the
			// path is refused (403). Either way nothing is served.
			if resp.StatusCode != http.StatusRequestEntityTooLarge {
				t.Errorf("%s %s with a body: %d %q, want 413", method, path, resp.StatusCode, body)
			}
			req, _ = http.NewRequest(method, base+path, nil)
			req.Host = "attacker.example:9110"
			req.Header.Set("Origin", "http://attacker.example")
			resp, err = http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ = io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusForbidden || !strings.Contains(string(body), "read-only") || !strings.Contains(string(body), sock) {
				t.Errorf("%s %s on TCP: %d %q, want 403 naming the socket", method, path, resp.StatusCode, body)
			}
		}
	}
	if got := eligibleCount(t, base); got != before {
		t.Fatalf("eligible %d after the refused requests, want %d", got, before)
	}
	if rep, _ := status(t, base); rep.BGP != nil && rep.BGP.NodeDrained {
		t.Fatal("node drained by a refused request")
	}
	if code, body := doSock(t, sock, "POST", "/drain?backend=b1"); code != 200 || eligibleCount(t, base) != before-1 {
		t.Fatalf("POST /drain on the socket: %d %q", code, body)
	}
	// The socket refuses bodies too.
	req, _ := http.NewRequest("POST", "http://xlb/undrain?backend=b1", strings.NewReader("x"))
	resp, err := sockClient(sock).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("POST with a body on the socket: %d, want 413", resp.StatusCode)
	}
}

// TestHeaderBounds: a header over 8 KiB is refused (431) and does not
// reach a handler.
func TestHeaderBounds(t *testing.T) {
	base := startServer(t, &fakeSources{})
	req, _ := http.NewRequest("GET", base+"/healthz", nil)
	req.Header.Set("X-Big", strings.Repeat("a", 16<<10))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("16 KiB header: %d, want 431", resp.StatusCode)
	}
}

// TestPprof: /debug/pprof/ is served on the TCP listener only with
// Options.Pprof.
func TestPprof(t *testing.T) {
	for _, on := range []bool{false, true} {
		s, err := admin.New(admin.Options{Listen: "127.0.0.1:0", Pprof: on}, &fakeSources{}, zap.NewNop())
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Start(); err != nil {
			t.Fatal(err)
		}
		want := 404
		if on {
			want = 200
		}
		body := get(t, "http://"+s.Addr().String()+"/debug/pprof/cmdline", want)
		if on && !strings.Contains(string(body), "admin.test") {
			t.Errorf("pprof cmdline %q", body)
		}
		if err := s.Close(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
}

// TestSocketFile: the socket is mode 0600 in a directory made 0700 when
// missing; a stale socket (no one answers) is replaced, a live one is an
// error, a file that is not a socket is an error and left alone; Close
// removes the socket.
func TestSocketFile(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run", "xlb")
	sock := filepath.Join(dir, "admin.sock")
	start := func() (*admin.Server, error) {
		s, err := admin.New(admin.Options{Listen: "127.0.0.1:0", Socket: sock}, &fakeSources{}, zap.NewNop())
		if err != nil {
			t.Fatal(err)
		}
		return s, s.Start()
	}
	s, err := start()
	if err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]os.FileMode{dir: os.ModeDir | 0o700, sock: os.ModeSocket | 0o600} {
		fi, err := os.Lstat(path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode() != want {
			t.Errorf("%s: mode %v, want %v", path, fi.Mode(), want)
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("%s holds %d entries, want the socket alone (no temporary directory left)", dir, len(entries))
	}
	if _, err := start(); err == nil || !strings.Contains(err.Error(), "another process answers") {
		t.Errorf("second server on a live socket: %v, want an error saying another process answers", err)
	}
	if code, _ := doSock(t, sock, "GET", "/healthz"); code != 200 {
		t.Errorf("the first server's socket after the refused second: %d", code)
	}
	if err := s.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(sock); !os.IsNotExist(err) {
		t.Errorf("socket after Close: %v, want removed", err)
	}

	// A stale socket: bound, then its listener gone without removing it.
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	ln.SetUnlinkOnClose(false)
	ln.Close()
	s, err = start()
	if err != nil {
		t.Fatalf("start over a stale socket: %v", err)
	}
	if code, _ := doSock(t, sock, "GET", "/healthz"); code != 200 {
		t.Errorf("socket over a stale one: %d", code)
	}
	s.Close(t.Context())

	if err := os.WriteFile(sock, []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := start(); err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Errorf("start over a regular file: %v, want an error", err)
	}
	if b, _ := os.ReadFile(sock); string(b) != "mine" {
		t.Error("the regular file was touched")
	}
}

// TestConnectionLimit: with the TCP listener's connections all held by
// slow clients (a partial header each), one more is closed at once
// instead of held, and the socket still answers.
func TestConnectionLimit(t *testing.T) {
	const limit = 8
	dir := t.TempDir()
	sock := filepath.Join(dir, "a.sock")
	s, err := admin.New(admin.Options{Listen: "127.0.0.1:0", Socket: sock, Limits: admin.Limits{TCPConns: limit, SocketConns: 2, HeaderTimeout: time.Hour}},
		&fakeSources{}, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	addr := s.Addr().String()
	// Each slow client is served (its slot taken) once a complete request
	// on it is answered: a full GET first, then a partial header.
	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	for range limit {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
		if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("slow client %d: %v", len(held), err)
		}
		resp.Body.Close()
		if _, err := io.WriteString(c, "GET /status HTTP/1.1\r\n"); err != nil {
			t.Fatal(err)
		}
	}
	extra, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer extra.Close()
	io.WriteString(extra, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
	// The slow clients hold their slots for the hour of the header
	// timeout; the refusal comes at accept: a read that ends in EOF (or a
	// reset), whenever it comes.
	extra.SetReadDeadline(time.Now().Add(time.Minute))
	if n, err := extra.Read(make([]byte, 64)); err == nil || n > 0 {
		t.Errorf("connection over the limit: read %d bytes, %v; want it closed unanswered", n, err)
	}
	if code, _ := doSock(t, sock, "GET", "/healthz"); code != 200 {
		t.Errorf("socket while the TCP listener is full: %d", code)
	}
}

// TestConnLimits: the default limits when descriptors are plenty; with
// few, the two together stay within a quarter of them.
func TestConnLimits(t *testing.T) {
	if got := admin.ConnLimits(1 << 20); got != admin.DefaultLimits {
		t.Errorf("ConnLimits(1M) = %+v, want %+v", got, admin.DefaultLimits)
	}
	for _, n := range []uint64{1024, 256, 64} {
		l := admin.ConnLimits(n)
		if l.TCPConns <= 0 || l.SocketConns <= 0 || (n >= 64 && uint64(l.TCPConns+l.SocketConns) > max(n/4, 6)) {
			t.Errorf("ConnLimits(%d) = %+v: want both positive, together at most a quarter", n, l)
		}
	}
}

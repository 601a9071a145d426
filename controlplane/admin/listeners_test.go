package admin_test

import (
	"bufio"
	"context"
	"errors"
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
	for _, path := range []string{"/drain?backend=b1", "/undrain?backend=b1", "/drain-node", "/undrain-node", "/reload?allow_empty=1", "/reload-dry-run", "/capture?count=1"} {
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

// blockingSources holds every /status request until release is closed,
// so that a test can keep connections busy serving one.
type blockingSources struct {
	fakeSources
	entered chan struct{}
	release chan struct{}
}

func (s *blockingSources) Status() *admin.Report {
	s.entered <- struct{}{}
	<-s.release
	return s.fakeSources.Status()
}

// startLimited serves src with limit TCP connections, 2 on the socket and
// an hour's header timeout (so that only the limit closes anything).
func startLimited(t *testing.T, src admin.Source, limit int) (addr, sock string) {
	t.Helper()
	sock = filepath.Join(t.TempDir(), "a.sock")
	s, err := admin.New(admin.Options{Listen: "127.0.0.1:0", Socket: sock, Limits: admin.Limits{TCPConns: limit, SocketConns: 2, HeaderTimeout: time.Hour}},
		src, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	return s.Addr().String(), sock
}

// closedUnanswered: the server closes c without a byte, whenever it does
// (the minute only bounds a hang).
func closedUnanswered(c net.Conn) bool {
	c.SetReadDeadline(time.Now().Add(time.Minute))
	n, err := c.Read(make([]byte, 64))
	return n == 0 && err != nil && !errors.Is(err, os.ErrDeadlineExceeded)
}

// TestSlowClientsDoNotStarveScrapes: with three times the TCP listener's
// connection limit held by slow clients (each a partial request header,
// some after a whole request answered, under an hour's header timeout),
// a scrape is still answered: it takes the slot of the client that has
// waited longest, which is closed unanswered. The socket answers
// meanwhile.
func TestSlowClientsDoNotStarveScrapes(t *testing.T) {
	const limit = 8
	addr, sock := startLimited(t, &fakeSources{}, limit)
	var slow []net.Conn
	defer func() {
		for _, c := range slow {
			c.Close()
		}
	}()
	for i := range 3 * limit {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		slow = append(slow, c)
		if i%2 == 0 { // an idle keep-alive client first, then slow
			if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
				t.Fatal(err)
			}
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatalf("slow client %d: %v", i, err)
			}
			resp.Body.Close()
		}
		if _, err := io.WriteString(c, "GET /status HTTP/1.1\r\n"); err != nil {
			t.Fatal(err)
		}
	}
	resp, err := (&http.Client{Timeout: time.Minute}).Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatalf("scrape with every slot held by slow clients: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), "xlb_") {
		t.Errorf("scrape: %d, %d bytes", resp.StatusCode, len(body))
	}
	if !closedUnanswered(slow[0]) {
		t.Error("the slow client that waited longest was not closed")
	}
	if code, _ := doSock(t, sock, "GET", "/healthz"); code != 200 {
		t.Errorf("socket while the TCP listener is full: %d", code)
	}
}

// TestConnectionLimit: with every TCP slot serving a request (each held
// in /status), one more connection is closed at once, unanswered, instead
// of held or served; once those requests end, a new one is served.
func TestConnectionLimit(t *testing.T) {
	const limit = 4
	src := &blockingSources{entered: make(chan struct{}), release: make(chan struct{})}
	addr, sock := startLimited(t, src, limit)
	released := false
	release := func() {
		if !released {
			released = true
			close(src.release)
		}
	}
	defer release()
	var busy []net.Conn
	defer func() {
		for _, c := range busy {
			c.Close()
		}
	}()
	for range limit {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		busy = append(busy, c)
		if _, err := io.WriteString(c, "GET /status HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		<-src.entered
	}
	extra, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer extra.Close()
	io.WriteString(extra, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
	if !closedUnanswered(extra) {
		t.Error("connection over the limit, every slot serving: want it closed unanswered")
	}
	if code, _ := doSock(t, sock, "GET", "/healthz"); code != 200 {
		t.Errorf("socket while the TCP listener is full: %d", code)
	}
	release()
	for _, c := range busy {
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("held request: %v", err)
		}
		resp.Body.Close()
	}
	// net/http marks a connection idle only after writing its response,
	// so the client may read it first: a connection made at once can
	// still find every slot serving, and is closed unanswered. What must
	// hold is that one is served once the server has seen the requests
	// end, with nothing but that refusal before.
	for attempt := 1; ; attempt++ {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
		c.SetReadDeadline(time.Now().Add(time.Minute))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		c.Close()
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Fatalf("after the held requests ended: %d, want 200", resp.StatusCode)
			}
			break
		}
		if errors.Is(err, os.ErrDeadlineExceeded) || attempt == 10000 {
			t.Fatalf("after the held requests ended, attempt %d: %v", attempt, err)
		}
		time.Sleep(time.Millisecond)
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

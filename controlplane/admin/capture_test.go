package admin_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/netip"
	"strings"
	"testing"

	"xlb/controlplane/admin"
	"xlb/dataplane"
	"xlb/dataplane/capture"
)

// operatorSource is a Source that captures and reloads as told.
type operatorSource struct {
	fakeSources
	got       admin.CaptureRequest
	busy      bool
	allow     []bool
	reloadErr error
	// captureErr ends a capture after its first bytes.
	captureErr error
	// hold, when set, keeps a capture running after its first bytes are
	// flushed, until it is closed.
	hold chan struct{}
}

func (s *operatorSource) Capture(ctx context.Context, req admin.CaptureRequest, w io.Writer) (capture.Stats, error) {
	if s.busy {
		return capture.Stats{}, admin.ErrCaptureBusy
	}
	s.got = req
	_, _ = io.WriteString(w, "pcapng bytes")
	req.Flush()
	if s.hold != nil {
		<-s.hold
	}
	return capture.Stats{Frames: 3, Packets: 5, Lost: 1}, s.captureErr
}

func (s *operatorSource) ReloadNow(allowEmpty bool) error {
	s.allow = append(s.allow, allowEmpty)
	return s.reloadErr
}

// TestSocketCapture: POST /capture on the socket streams what the source
// writes, with the frames written and lost in the trailers, after parsing
// the filter; a bad parameter is 400, a capture already running 409.
func TestSocketCapture(t *testing.T) {
	src := &operatorSource{}
	_, sock := startServers(t, src)
	c := sockClient(sock)
	resp, err := c.Post("http://xlb/capture?vip=203.0.113.10&backend=10.0.1.1&verdict=drop,forward&count=7&snap=128&seconds=5", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(body) != "pcapng bytes" {
		t.Fatalf("capture: %d %q", resp.StatusCode, body)
	}
	if f, p, l := resp.Trailer.Get(admin.TrailerCaptureFrames), resp.Trailer.Get(admin.TrailerCapturePackets), resp.Trailer.Get(admin.TrailerCaptureLost); f != "3" || p != "5" || l != "1" {
		t.Errorf("trailers frames %q packets %q lost %q, want 3, 5 and 1", f, p, l)
	}
	want := capture.Filter{VIP: netip.MustParseAddr("203.0.113.10"), Backend: netip.MustParseAddr("10.0.1.1"),
		Verdicts: 1<<dataplane.VerdictDrop | 1<<dataplane.VerdictForward}
	if src.got.Filter != want || src.got.Count != 7 || src.got.Snap != 128 {
		t.Errorf("request %+v, want filter %+v, count 7, snap 128", src.got, want)
	}
	for _, q := range []string{"vip=nope", "verdict=maybe", "count=-1", "snap=70000", "seconds=9999"} {
		if code, body := doSock(t, sock, "POST", "/capture?"+q); code != http.StatusBadRequest {
			t.Errorf("capture?%s: %d %q, want 400", q, code, body)
		}
	}
	src.busy = true
	if code, body := doSock(t, sock, "POST", "/capture"); code != http.StatusConflict || !strings.Contains(body, "already running") {
		t.Errorf("busy: %d %q, want 409", code, body)
	}
}

// TestSocketReload: POST /reload reloads now and says so; allow_empty is
// handed on; a refused reload is 422 with the reason.
func TestSocketReload(t *testing.T) {
	src := &operatorSource{}
	_, sock := startServers(t, src)
	if code, body := doSock(t, sock, "POST", "/reload"); code != 200 || body != "reloaded\n" {
		t.Errorf("reload: %d %q", code, body)
	}
	if code, _ := doSock(t, sock, "POST", "/reload?allow_empty=1"); code != 200 {
		t.Errorf("reload?allow_empty=1: %d", code)
	}
	if code, _ := doSock(t, sock, "POST", "/reload?allow_empty=perhaps"); code != http.StatusBadRequest {
		t.Errorf("allow_empty=perhaps: %d, want 400", code)
	}
	src.reloadErr = errors.New("xlb.toml:3: nope")
	if code, body := doSock(t, sock, "POST", "/reload"); code != http.StatusUnprocessableEntity || !strings.Contains(body, "xlb.toml:3: nope") {
		t.Errorf("refused reload: %d %q, want 422 with the reason", code, body)
	}
	if len(src.allow) != 3 || src.allow[0] || !src.allow[1] || src.allow[2] {
		t.Errorf("reloads asked %v, want [false true false]", src.allow)
	}
}

package admin_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/netip"
	"slices"
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
	reloads   []admin.ReloadRequest
	changes   []string
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

func (s *operatorSource) ReloadNow(req admin.ReloadRequest) ([]string, error) {
	s.reloads = append(s.reloads, req)
	if s.reloadErr != nil {
		return nil, s.reloadErr
	}
	return s.changes, nil
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

// TestSocketReload: POST /reload reloads now and answers the changes,
// then "reloaded" ("no changes" when none); /reload-dry-run asks a dry
// run and ends "dry run: nothing applied"; path and allow_empty are
// handed on, a relative path is 400; a refused reload is 422 with the
// reason.
func TestSocketReload(t *testing.T) {
	src := &operatorSource{}
	_, sock := startServers(t, src)
	if code, body := doSock(t, sock, "POST", "/reload"); code != 200 || body != "no changes\nreloaded\n" {
		t.Errorf("reload: %d %q", code, body)
	}
	src.changes = []string{"removed rule dns-udp", "added backend web/b3: 10.0.1.3 in pool-a"}
	if code, body := doSock(t, sock, "POST", "/reload?allow_empty=1&path=/etc/xlb/xlb.toml"); code != 200 ||
		body != "removed rule dns-udp\nadded backend web/b3: 10.0.1.3 in pool-a\nreloaded\n" {
		t.Errorf("reload?allow_empty=1: %d %q", code, body)
	}
	if code, body := doSock(t, sock, "POST", "/reload-dry-run?path=/etc/xlb/xlb.toml"); code != 200 ||
		body != "removed rule dns-udp\nadded backend web/b3: 10.0.1.3 in pool-a\ndry run: nothing applied\n" {
		t.Errorf("reload-dry-run: %d %q", code, body)
	}
	if code, _ := doSock(t, sock, "POST", "/reload?allow_empty=perhaps"); code != http.StatusBadRequest {
		t.Errorf("allow_empty=perhaps: %d, want 400", code)
	}
	if code, body := doSock(t, sock, "POST", "/reload?path=xlb.toml"); code != http.StatusBadRequest || !strings.Contains(body, "absolute") {
		t.Errorf("relative path: %d %q, want 400", code, body)
	}
	src.reloadErr = errors.New("xlb.toml:3: nope")
	if code, body := doSock(t, sock, "POST", "/reload"); code != http.StatusUnprocessableEntity || !strings.Contains(body, "xlb.toml:3: nope") {
		t.Errorf("refused reload: %d %q, want 422 with the reason", code, body)
	}
	if code, body := doSock(t, sock, "POST", "/reload-dry-run"); code != http.StatusUnprocessableEntity ||
		!strings.Contains(body, "dry run: the reload would be refused (nothing applied): xlb.toml:3: nope") {
		t.Errorf("refused dry run: %d %q, want 422 with the reason", code, body)
	}
	want := []admin.ReloadRequest{{}, {Path: "/etc/xlb/xlb.toml", AllowEmpty: true}, {Path: "/etc/xlb/xlb.toml", DryRun: true}, {}, {DryRun: true}}
	if !slices.Equal(src.reloads, want) {
		t.Errorf("reloads asked %+v, want %+v", src.reloads, want)
	}
}

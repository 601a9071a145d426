package admin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"xlb/dataplane"
	"xlb/dataplane/capture"
)

// ErrCaptureBusy is what a Capturer returns while another capture runs;
// the socket answers 409.
var ErrCaptureBusy = errors.New("a capture is already running")

// CaptureRequest is what `xlb capture` asks the running xlb for.
type CaptureRequest struct {
	Filter capture.Filter
	// Count is in frames, not packets of the file: a forwarded frame is
	// one, written twice (as received and as sent); 0: until the request
	// ends.
	Count int
	Snap  int // bytes per frame and direction; 0: capture.DefaultSnapLen
	// Flush is called after each burst written, so the file streams.
	Flush func()
}

// Capturer is a Source that can copy frames out of its workers (POST
// /capture on the socket).
type Capturer interface {
	Capture(ctx context.Context, req CaptureRequest, w io.Writer) (capture.Stats, error)
}

// Reloader is a Source that reloads its configuration file (POST /reload
// on the socket, or /reload-dry-run to only say what a reload would
// change). It returns the changes, one line each.
type Reloader interface {
	ReloadNow(req ReloadRequest) (changes []string, err error)
}

// ReloadRequest is what `xlb reload` asks of the running xlb.
type ReloadRequest struct {
	// Path is the file the operator means, absolute; "": the running
	// file (a client that does not send one). Any other is refused.
	Path string
	// AllowEmpty applies a file without forwarding rules.
	AllowEmpty bool
	// DryRun computes the changes against the running configuration and
	// applies nothing.
	DryRun bool
}

// Last lines of a reload's answer, after its changes.
const (
	ReloadedLine = "reloaded"
	DryRunLine   = "dry run: nothing applied"
)

// Trailers of a capture's response: what the session wrote (frames, and
// the packets that are in the file: one or two per frame) and lost.
const (
	TrailerCaptureFrames  = "Xlb-Capture-Frames"
	TrailerCapturePackets = "Xlb-Capture-Packets"
	TrailerCaptureLost    = "Xlb-Capture-Lost"
	TrailerCaptureError   = "Xlb-Capture-Error"
)

// MaxCaptureSeconds bounds a capture's duration.
const MaxCaptureSeconds = 3600

// ParseCaptureQuery reads a capture's parameters: vip, backend (addresses),
// verdict (comma-separated: forward, drop, pass), count, snap, seconds.
func ParseCaptureQuery(q map[string][]string) (req CaptureRequest, seconds int, err error) {
	get := func(k string) string {
		if v := q[k]; len(v) > 0 {
			return v[0]
		}
		return ""
	}
	addr := func(k string) (netip.Addr, error) {
		v := get(k)
		if v == "" {
			return netip.Addr{}, nil
		}
		a, err := netip.ParseAddr(v)
		if err != nil {
			return a, fmt.Errorf("%s %q: not an IP address", k, v)
		}
		return a.Unmap(), nil
	}
	num := func(k string, max int) (int, error) {
		v := get(k)
		if v == "" {
			return 0, nil
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || n > max {
			return 0, fmt.Errorf("%s %q: want 0..%d", k, v, max)
		}
		return n, nil
	}
	if req.Filter.VIP, err = addr("vip"); err != nil {
		return
	}
	if req.Filter.Backend, err = addr("backend"); err != nil {
		return
	}
	if v := get("verdict"); v != "" {
		for _, name := range strings.Split(v, ",") {
			var verdict dataplane.Verdict
			switch name {
			case "forward":
				verdict = dataplane.VerdictForward
			case "drop":
				verdict = dataplane.VerdictDrop
			case "pass":
				verdict = dataplane.VerdictPass
			default:
				return req, 0, fmt.Errorf("verdict %q: want forward, drop or pass", name)
			}
			req.Filter.Verdicts |= 1 << verdict
		}
	}
	if req.Count, err = num("count", 1<<30); err != nil {
		return
	}
	if req.Snap, err = num("snap", capture.MaxSnapLen); err != nil {
		return
	}
	seconds, err = num("seconds", MaxCaptureSeconds)
	return
}

// serveCapture streams a pcapng capture: until count frames (a forwarded
// frame's two packets are one), seconds, or the client hanging up. The trailers say what was written and lost.
func serveCapture(src Source) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		c, ok := src.(Capturer)
		if !ok {
			http.Error(w, "this xlb cannot capture", http.StatusNotImplemented)
			return
		}
		req, seconds, err := ParseCaptureQuery(r.URL.Query())
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		ctx := r.Context()
		if seconds > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, time.Duration(seconds)*time.Second)
			defer cancel()
		}
		rc := http.NewResponseController(w)
		// The listener's write timeout is for short answers; a capture
		// streams for as long as it was asked to.
		_ = rc.SetWriteDeadline(time.Time{})
		w.Header().Set("Trailer", TrailerCaptureFrames+", "+TrailerCapturePackets+", "+TrailerCaptureLost+", "+TrailerCaptureError)
		w.Header().Set("Content-Type", "application/octet-stream")
		started := false
		out := &startWriter{w: w, started: &started}
		req.Flush = func() { _ = rc.Flush() }
		auditTimed(r)
		st, err := c.Capture(ctx, req, out)
		if errors.Is(err, ErrCaptureBusy) && !started {
			http.Error(w, err.Error(), http.StatusConflict)
			return
		}
		auditNote(r, zap.Uint64("frames", st.Frames), zap.Uint64("packets", st.Packets), zap.Uint64("lost", st.Lost))
		if by := stoppedBy(ctx, r, req, st, err); by != "" {
			auditNote(r, zap.String("stopped_by", by))
		}
		auditFailed(r, err)
		w.Header().Set(TrailerCaptureFrames, strconv.FormatUint(st.Frames, 10))
		w.Header().Set(TrailerCapturePackets, strconv.FormatUint(st.Packets, 10))
		w.Header().Set(TrailerCaptureLost, strconv.FormatUint(st.Lost, 10))
		if err != nil {
			w.Header().Set(TrailerCaptureError, err.Error())
		}
	}
}

// stoppedBy says what ended a capture: its count, the client (Ctrl-C),
// its seconds or an error ("": none of them).
func stoppedBy(ctx context.Context, r *http.Request, req CaptureRequest, st capture.Stats, err error) string {
	switch {
	case req.Count > 0 && st.Frames >= uint64(req.Count):
		return "count"
	case r.Context().Err() != nil:
		return "client"
	case ctx.Err() != nil:
		return "seconds"
	case err != nil:
		return "error"
	}
	return ""
}

// startWriter notes that the response body has begun.
type startWriter struct {
	w       io.Writer
	started *bool
}

func (s *startWriter) Write(p []byte) (int, error) {
	*s.started = true
	return s.w.Write(p)
}

// serveReload reloads the configuration file now (`xlb reload`), or with
// dry says what a reload would change (`xlb reload --dry-run`): 200 with
// the changes, one a line ("no changes" when none), then ReloadedLine or
// DryRunLine; 422 with every reason when refused (the running
// configuration stays). path (absolute) is the file the client means;
// without it, the running file.
func serveReload(src Source, dry bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		rl, ok := src.(Reloader)
		if !ok {
			http.Error(w, "this xlb cannot reload", http.StatusNotImplemented)
			return
		}
		q := r.URL.Query()
		allow := q.Get("allow_empty")
		if allow != "" && allow != "1" && allow != "true" {
			http.Error(w, fmt.Sprintf("allow_empty %q: want 1 or true", allow), http.StatusBadRequest)
			return
		}
		path := q.Get("path")
		if path != "" && !filepath.IsAbs(path) {
			http.Error(w, fmt.Sprintf("path %q: want an absolute path", path), http.StatusBadRequest)
			return
		}
		changes, err := rl.ReloadNow(ReloadRequest{Path: path, AllowEmpty: allow != "", DryRun: dry})
		if err != nil {
			what := "reload refused, the running configuration stays: "
			if dry {
				what = "dry run: the reload would be refused (nothing applied): "
			}
			http.Error(w, what+err.Error(), http.StatusUnprocessableEntity)
			return
		}
		auditNote(r, zap.Strings("changes", changes))
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if len(changes) == 0 {
			changes = []string{"no changes"}
		}
		last := ReloadedLine
		if dry {
			last = DryRunLine
		}
		_, _ = fmt.Fprintf(w, "%s\n%s\n", strings.Join(changes, "\n"), last)
	}
}

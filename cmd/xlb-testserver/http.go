package main

import (
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"

	"go.uber.org/zap"
)

// Header names the test bed and the health checker agree on.
const (
	headerBackend = "X-Backend"
	headerWeight  = "X-Load-Balancing-Endpoint-Weight"
	healthzPath   = "/healthz"
	// headerReceived is the number of body bytes a POST brought.
	headerReceived = "X-Received"
)

// handler answers every path with the backend's name, and /healthz with
// the health state and, when configured, the weight; a POST's body is read
// whole and its length sent back in X-Received.
func (s *server) handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.verbose {
			s.log.Debug("http", zap.String("from", r.RemoteAddr), zap.String("host", r.Host),
				zap.String("method", r.Method), zap.String("path", r.URL.Path))
		}
		h := w.Header()
		h.Set(headerBackend, s.name)
		h.Set("Content-Type", "text/plain; charset=utf-8")
		if r.Method == http.MethodPost {
			// An upload (the path-MTU tests): read it all, say how much.
			n, err := io.Copy(io.Discard, r.Body)
			if err != nil {
				w.WriteHeader(http.StatusBadRequest)
			}
			h.Set(headerReceived, strconv.FormatInt(n, 10))
		}
		if r.URL.Path != healthzPath {
			_, _ = w.Write([]byte("backend " + s.name + "\n"))
			return
		}
		if !s.healthy.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte("unhealthy\n"))
			return
		}
		if v, ok := s.reportedWeight(); ok {
			h.Set(headerWeight, v)
		}
		_, _ = w.Write([]byte("ok\n"))
	})
}

// reportedWeight is the weight header's value, if /healthz sends one: the
// --weight-file's content when that is set (read now, so a test can change
// it while the server runs; a file that is missing, unreadable or empty
// means no header), else --weight.
func (s *server) reportedWeight() (string, bool) {
	if s.weightFile == "" {
		return strconv.Itoa(s.weight), s.weight >= 0
	}
	raw, err := os.ReadFile(s.weightFile)
	if err != nil {
		return "", false
	}
	v := strings.TrimSuffix(strings.TrimSuffix(string(raw), "\n"), "\r")
	// A header value cannot hold a line break: what is left of one is the
	// test's mistake, sent as no header rather than a broken reply.
	if v == "" || strings.ContainsAny(v, "\r\n") {
		return "", false
	}
	return v, true
}

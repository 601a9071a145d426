package main

import (
	"net/http"
	"strconv"

	"go.uber.org/zap"
)

// Header names the test bed and the health checker agree on.
const (
	headerBackend = "X-Backend"
	headerWeight  = "X-Load-Balancing-Endpoint-Weight"
	healthzPath   = "/healthz"
)

// handler answers every path with the backend's name, and /healthz with
// the health state and, when configured, the weight.
func (s *server) handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.verbose {
			s.log.Debug("http", zap.String("from", r.RemoteAddr), zap.String("host", r.Host),
				zap.String("method", r.Method), zap.String("path", r.URL.Path))
		}
		h := w.Header()
		h.Set(headerBackend, s.name)
		h.Set("Content-Type", "text/plain; charset=utf-8")
		if r.URL.Path != healthzPath {
			_, _ = w.Write([]byte("backend " + s.name + "\n"))
			return
		}
		if !s.healthy.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte("unhealthy\n"))
			return
		}
		if s.weight >= 0 {
			h.Set(headerWeight, strconv.Itoa(s.weight))
		}
		_, _ = w.Write([]byte("ok\n"))
	})
}

package healthcheck

import (
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"xlb/config"
)

// TestHTTP_Verdicts: what an HTTP probe makes of each kind of reply.
func TestHTTP_Verdicts(t *testing.T) {
	var redirected atomic.Int32
	mux := http.NewServeMux()
	reply := func(code int, weight, body string) http.HandlerFunc {
		return func(w http.ResponseWriter, _ *http.Request) {
			if weight != "" {
				w.Header().Set(WeightHeader, weight)
			}
			w.WriteHeader(code)
			_, _ = io.WriteString(w, body)
		}
	}
	mux.Handle("/ok", reply(200, "", "ok\n"))
	mux.Handle("/w5", reply(200, "5", "ok\n"))
	mux.Handle("/w1001", reply(200, "1001", "ok\n"))
	mux.Handle("/w-1", reply(200, "-1", "ok\n"))
	mux.Handle("/wabc", reply(200, "abc", "ok\n"))
	mux.Handle("/down", reply(503, "5", "down\n"))
	mux.Handle("/204", reply(204, "5", ""))
	mux.Handle("/moved", http.RedirectHandler("/target", http.StatusFound))
	mux.HandleFunc("/target", func(w http.ResponseWriter, _ *http.Request) { redirected.Add(1) })
	mux.HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-time.After(time.Second):
		}
	})
	mux.HandleFunc("/endless", func(w http.ResponseWriter, r *http.Request) {
		// The prefix, then a body that never ends: only the prefix may be
		// read.
		w.WriteHeader(200)
		_, _ = io.WriteString(w, "ready and more")
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	})
	_, ap := serve(t, "127.0.0.1:0", mux)

	path := func(p string) func(*config.HealthCheck) { return func(c *config.HealthCheck) { c.RequestPath = p } }
	prefix := func(s string) func(*config.HealthCheck) { return func(c *config.HealthCheck) { c.Response = s } }
	timeout := func(c *config.HealthCheck) { c.Timeout = 100 * time.Millisecond }
	for _, tc := range []struct {
		name   string
		edit   []func(*config.HealthCheck)
		pass   bool
		state  WeightState
		weight uint32
		reason string
	}{
		{"200 without weight", []func(*config.HealthCheck){path("/ok")}, true, WeightMissing, 0, "no X-Load-Balancing-Endpoint-Weight"},
		{"200 weight 5", []func(*config.HealthCheck){path("/w5")}, true, WeightValid, 5, "HTTP 200"},
		{"200 weight 1001", []func(*config.HealthCheck){path("/w1001")}, true, WeightInvalid, 0, "outside 0..1000"},
		{"200 weight -1", []func(*config.HealthCheck){path("/w-1")}, true, WeightInvalid, 0, "not a decimal integer"},
		{"200 weight abc", []func(*config.HealthCheck){path("/wabc")}, true, WeightInvalid, 0, "not a decimal integer"},
		{"503 with a weight", []func(*config.HealthCheck){path("/down")}, false, WeightUnavailable, 0, "HTTP 503"},
		{"204 is not 200", []func(*config.HealthCheck){path("/204")}, false, WeightUnavailable, 0, "HTTP 204"},
		{"302 not followed", []func(*config.HealthCheck){path("/moved")}, false, WeightUnavailable, 0, "redirects are not followed"},
		{"404", []func(*config.HealthCheck){path("/nope")}, false, WeightUnavailable, 0, "HTTP 404"},
		{"prefix matches", []func(*config.HealthCheck){path("/w5"), prefix("ok")}, true, WeightValid, 5, "HTTP 200"},
		{"prefix differs", []func(*config.HealthCheck){path("/w5"), prefix("okay")}, false, WeightValid, 5, `starts with "ok\n", not "okay"`},
		{"prefix of an endless body", []func(*config.HealthCheck){path("/endless"), prefix("ready")}, true, WeightMissing, 0, "HTTP 200"},
		{"timeout", []func(*config.HealthCheck){path("/slow"), timeout}, false, WeightUnavailable, 0, "timed out after 100ms"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			tg := httpTarget("k", ap, tc.edit...)
			o := probe1(t, tg)
			if o.pass != tc.pass || o.state != tc.state || o.weight != tc.weight || !strings.Contains(o.reason, tc.reason) {
				t.Errorf("%+v, want pass %v, %v weight %d, reason containing %q", o, tc.pass, tc.state, tc.weight, tc.reason)
			}
			if d := time.Since(start); d > tg.Check.Timeout+300*time.Millisecond {
				t.Errorf("the probe took %v: well past its deadline %v", d, tg.Check.Timeout)
			}
		})
	}
	if n := redirected.Load(); n != 0 {
		t.Errorf("the redirect's target was requested %d times: redirects were followed", n)
	}
}

// TestHTTP_Refused: nothing listening is a failed probe with no weight.
func TestHTTP_Refused(t *testing.T) {
	o := probe1(t, httpTarget("k", closedPort(t)))
	if o.pass || o.state != WeightUnavailable || o.reason != "connection refused" {
		t.Errorf("%+v, want a failure, UNAVAILABLE_WEIGHT, connection refused", o)
	}
}

// TestHTTP_NotHTTP: a reply that is not HTTP fails, weight unavailable.
func TestHTTP_NotHTTP(t *testing.T) {
	o := probe1(t, httpTarget("k", rawServer(t, "SSH-2.0-OpenSSH\r\n")))
	if o.pass || o.state != WeightUnavailable {
		t.Errorf("%+v, want a failure, UNAVAILABLE_WEIGHT", o)
	}
}

// TestHTTP_Request: the request a backend sees: GET of the path (query
// included), Host = the configured host or by default the backend's
// address (IPv4 and IPv6), our User-Agent, and a fresh connection per
// probe with Connection: close.
func TestHTTP_Request(t *testing.T) {
	type seen struct{ method, uri, host, agent string }
	for _, tc := range []struct {
		listen, host, want string
	}{
		{"127.0.0.1:0", "", "127.0.0.1"},
		{"[::1]:0", "", "[::1]"},
		{"127.0.0.1:0", "api.example", "api.example"},
	} {
		t.Run(tc.listen+" host="+tc.host, func(t *testing.T) {
			var (
				mu    sync.Mutex
				reqs  []seen
				conns atomic.Int32
			)
			_, ap := serve(t, tc.listen, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				reqs = append(reqs, seen{r.Method, r.RequestURI, r.Host, r.UserAgent()})
				mu.Unlock()
				if !r.Close {
					t.Error("the request did not ask to close the connection")
				}
			}), func(s *http.Server) {
				s.ConnState = func(_ net.Conn, s http.ConnState) {
					if s == http.StateNew {
						conns.Add(1)
					}
				}
			})
			tg := httpTarget("k", ap, func(c *config.HealthCheck) { c.RequestPath, c.Host = "/healthz?full=1", tc.host })
			for range 3 {
				if o := probe1(t, tg); !o.pass {
					t.Fatalf("%+v", o)
				}
			}
			mu.Lock()
			defer mu.Unlock()
			for _, r := range reqs {
				if r != (seen{"GET", "/healthz?full=1", tc.want, userAgent}) {
					t.Errorf("request %+v, want GET /healthz?full=1, Host %s, User-Agent %s", r, tc.want, userAgent)
				}
			}
			if n := conns.Load(); n != 3 || len(reqs) != 3 {
				t.Errorf("3 probes made %d requests on %d connections, want 3 on 3", len(reqs), n)
			}
		})
	}
}

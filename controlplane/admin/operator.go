package admin

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
)

// ErrUnknownBackend is what a Source's Drain and Undrain return for a name
// that is no current backend; the listener answers 404.
var ErrUnknownBackend = errors.New("unknown backend")

// ReloadReport counts configuration reloads since start.
type ReloadReport struct {
	Success uint64      `json:"success"`
	Failure uint64      `json:"failure"`
	Last    *LastReload `json:"-"` // served as Report.LastReload
}

// LastReload is the outcome of the latest reload.
type LastReload struct {
	// At is the time in RFC 3339; a successful reload's is the moment
	// just before it was applied, when the drains it started began.
	At     string   `json:"at"`
	OK     bool     `json:"ok"`
	Errors []string `json:"errors,omitempty"`
	// What changed (a successful reload).
	ServicesAdded   []string `json:"services_added,omitempty"`
	ServicesRemoved []string `json:"services_removed,omitempty"`
	BackendsAdded   []string `json:"backends_added,omitempty"`
	BackendsRemoved []string `json:"backends_removed,omitempty"`
	BackendsKept    int      `json:"backends_kept"`
}

// operate serves POST /drain and /undrain: only to loopback clients, since
// the listener has no authentication and may listen on the network.
func operate(src Source, undrain bool) http.HandlerFunc {
	return func(w http.ResponseWriter, req *http.Request) {
		if !fromLoopback(req.RemoteAddr) {
			http.Error(w, "drain and undrain are accepted from loopback clients only", http.StatusForbidden)
			return
		}
		name := req.URL.Query().Get("backend")
		if name == "" {
			http.Error(w, "missing ?backend=NAME", http.StatusBadRequest)
			return
		}
		verb, fn := "drained", src.Drain
		if undrain {
			verb, fn = "undrained", src.Undrain
		}
		hit, err := fn(name)
		if err != nil {
			code := http.StatusInternalServerError
			if errors.Is(err, ErrUnknownBackend) {
				code = http.StatusNotFound
			}
			http.Error(w, err.Error(), code)
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		for _, b := range hit {
			_, _ = fmt.Fprintf(w, "%s %s\n", verb, b)
		}
		if len(hit) > 1 && !strings.Contains(name, "/") {
			_, _ = fmt.Fprintf(w, "(%s is a backend of %d services: all were %s; SERVICE/%s names one)\n", name, len(hit), verb, name)
		}
	}
}

// operateNode serves POST /drain-node and /undrain-node, to loopback
// clients only, like operate.
func operateNode(src Source, drain bool) http.HandlerFunc {
	return func(w http.ResponseWriter, req *http.Request) {
		if !fromLoopback(req.RemoteAddr) {
			http.Error(w, "a node drain is accepted from loopback clients only", http.StatusForbidden)
			return
		}
		if err := src.DrainNode(drain); err != nil {
			http.Error(w, err.Error(), http.StatusConflict)
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if drain {
			_, _ = fmt.Fprintln(w, "node drained: every VIP withdrawn; forwarding continues")
		} else {
			_, _ = fmt.Fprintln(w, "node undrained: VIPs announced where the announcement rule allows")
		}
	}
}

func fromLoopback(remote string) bool {
	host, _, err := net.SplitHostPort(remote)
	if err != nil {
		return false
	}
	a, err := netip.ParseAddr(host)
	return err == nil && a.Unmap().IsLoopback()
}

package admin

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	"go.uber.org/zap"
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
	// Changes is every change the reload applied, one line each
	// (config.Changes): rules, health checks, services, backends.
	Changes []string `json:"changes,omitempty"`
}

// operation is a state-changing endpoint: served on the socket only.
type operation struct {
	path   string
	handle http.HandlerFunc
}

// operations are every state-changing endpoint. One added here is served
// on the socket and refused on the TCP listener.
func operations(src Source) []operation {
	return []operation{
		{"/drain", operate(src, false)},
		{"/undrain", operate(src, true)},
		{"/drain-node", operateNode(src, true)},
		{"/undrain-node", operateNode(src, false)},
		{"/reload", serveReload(src, false)},
		{"/reload-dry-run", serveReload(src, true)},
		{"/capture", serveCapture(src)},
	}
}

// operate serves POST /drain and /undrain.
func operate(src Source, undrain bool) http.HandlerFunc {
	return func(w http.ResponseWriter, req *http.Request) {
		name := req.URL.Query().Get("backend")
		if name == "" {
			http.Error(w, "missing ?backend=NAME", http.StatusBadRequest)
			return
		}
		auditTarget(req, name)
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
		auditNote(req, zap.Strings("backends", hit))
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		for _, b := range hit {
			_, _ = fmt.Fprintf(w, "%s %s\n", verb, b)
		}
		if len(hit) > 1 && !strings.Contains(name, "/") {
			_, _ = fmt.Fprintf(w, "(%s is a backend of %d services: all were %s; SERVICE/%s names one)\n", name, len(hit), verb, name)
		}
	}
}

// operateNode serves POST /drain-node and /undrain-node.
func operateNode(src Source, drain bool) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
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

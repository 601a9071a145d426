package admin_test

import (
	"net/http"
	"strings"
	"testing"

	"xlb/controlplane/admin"
)

// TestDrainEndpoints: POST /drain removes a backend from its service's
// eligible set (M5) and /undrain returns it; an unknown name is 404, a
// missing one 400, and GET is not accepted.
func TestDrainEndpoints(t *testing.T) {
	r, src := newRig(t)
	base, sock := startServers(t, src)
	eligible := func() []string {
		rep, _ := status(t, base)
		return rep.Services[0].Eligible
	}
	if got := eligible(); len(got) != 2 {
		t.Fatalf("eligible before drain: %v, want b1 b2", got)
	}
	if code, body := doSock(t, sock, "POST", "/drain?backend=b1"); code != 200 || body != "drained b1\n" {
		t.Fatalf("POST /drain: %d %q", code, body)
	}
	if got := eligible(); len(got) != 1 || got[0] != "b2" {
		t.Fatalf("eligible after drain: %v, want [b2]", got)
	}
	rep, _ := status(t, base)
	for _, b := range rep.Services[0].Backends {
		if b.Name == "b1" && (!b.Removed || !b.Draining) {
			t.Errorf("b1 after drain: %+v, want removed and draining", b)
		}
	}
	if code, body := doSock(t, sock, "POST", "/undrain?backend=b1"); code != 200 || body != "undrained b1\n" {
		t.Fatalf("POST /undrain: %d %q", code, body)
	}
	if got := eligible(); len(got) != 2 {
		t.Fatalf("eligible after undrain: %v, want b1 b2", got)
	}
	if code, body := doSock(t, sock, "POST", "/drain?backend=nope"); code != 404 || !strings.Contains(body, "nope") {
		t.Errorf("POST /drain?backend=nope: %d %q, want 404 naming it", code, body)
	}
	if code, _ := doSock(t, sock, "POST", "/drain"); code != 400 {
		t.Errorf("POST /drain without backend: %d, want 400", code)
	}
	if code, _ := doSock(t, sock, "GET", "/drain?backend=b1"); code != http.StatusMethodNotAllowed {
		t.Errorf("GET /drain on the socket: %d, want 405", code)
	}
	_ = r
}

// TestDrainNodeEndpoints: POST /drain-node and /undrain-node reach the
// source's DrainNode and show in /status's bgp section; a source that
// cannot (no [bgp]) answers 409 with its reason.
func TestDrainNodeEndpoints(t *testing.T) {
	_, src := newRig(t)
	base, sock := startServers(t, src)
	if code, body := doSock(t, sock, "POST", "/drain-node"); code != http.StatusConflict || !strings.Contains(body, "no [bgp]") {
		t.Errorf("POST /drain-node without bgp: %d %q, want 409 saying why", code, body)
	}
	src.bgp = &admin.BGPReport{}
	if code, body := doSock(t, sock, "POST", "/drain-node"); code != 200 || !strings.Contains(body, "node drained") {
		t.Fatalf("POST /drain-node: %d %q", code, body)
	}
	if rep, raw := status(t, base); rep.BGP == nil || !rep.BGP.NodeDrained || raw["bgp"] == nil {
		t.Errorf("after /drain-node: bgp %+v", rep.BGP)
	}
	if code, _ := doSock(t, sock, "POST", "/undrain-node"); code != 200 {
		t.Fatalf("POST /undrain-node: %d", code)
	}
	if rep, _ := status(t, base); rep.BGP == nil || rep.BGP.NodeDrained {
		t.Errorf("after /undrain-node: bgp %+v", rep.BGP)
	}
	if code, _ := doSock(t, sock, "GET", "/drain-node"); code != http.StatusMethodNotAllowed {
		t.Errorf("GET /drain-node on the socket: %d, want 405", code)
	}
}

// TestReloadReport: a source's reload counters are exported and its last
// reload is in /status.
func TestReloadReport(t *testing.T) {
	_, src := newRig(t)
	src.reloads = &admin.ReloadReport{Success: 2, Failure: 1,
		Last: &admin.LastReload{At: "2026-01-01T00:00:00Z", Errors: []string{"bad"}}}
	base := startServer(t, src)
	vals, _ := scrape(t, base)
	if vals["xlb_reload_success_total{}"] != 2 || vals["xlb_reload_failure_total{}"] != 1 {
		t.Errorf("reload counters %v / %v, want 2 / 1", vals["xlb_reload_success_total{}"], vals["xlb_reload_failure_total{}"])
	}
	rep, raw := status(t, base)
	if rep.LastReload == nil || rep.LastReload.OK || rep.LastReload.Errors[0] != "bad" {
		t.Errorf("last_reload %+v", rep.LastReload)
	}
	if _, ok := raw["last_reload"]; !ok {
		t.Error("/status has no last_reload")
	}
}

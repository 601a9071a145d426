package main

import (
	"bytes"
	"strings"
	"testing"

	"xlb/bench/control"
)

// TestControlQuickJSON runs `lbbench control --quick --json` as CI does and
// decodes what it prints; the quick sizes are 4 × apart, so the growth
// targets say whether the control plane is still linear.
func TestControlQuickJSON(t *testing.T) {
	var data control.Result
	// Smaller than --quick alone (500 and 2,000 VIPs, 2,000 targets), which
	// make bench runs: this test runs under the race detector too.
	r := runJSON(t, &data, "control", "--quick", "--json", "--vips", "250,1000", "--health-targets", "1000")
	if r.Command != "control" || r.Machine.Cores == 0 || !data.Quick {
		t.Errorf("command %q, cores %d, quick %v", r.Command, r.Machine.Cores, data.Quick)
	}
	if len(data.Points) != 2 || data.Health == nil || len(r.Tables) != 3 || len(r.Charts) != 2 || len(r.Notes) == 0 {
		t.Fatalf("%d points, health %v, %d tables, %d charts", len(data.Points), data.Health != nil, len(r.Tables), len(r.Charts))
	}
	for _, p := range data.Points {
		if p.Backends != 4*p.VIPs || p.Rules != 2*p.VIPs || !(p.Reload.CPUMs > 0) || !(p.TablesMB > 0) || p.TableEntryBytes != 2 || p.VIPMap == "" {
			t.Errorf("point %+v", p)
		}
	}
	if h := data.Health; h.Targets != 1000 || h.Probes < h.Targets {
		t.Errorf("health %+v", h)
	}
	names := map[string]bool{}
	for _, tg := range r.Targets {
		names[strings.SplitN(tg.Name, ":", 2)[0]] = true
		// Not a timing: met on any machine.
		if strings.HasPrefix(tg.Name, "Maglev table entry") && !tg.Met {
			t.Errorf("target %+v", tg)
		}
	}
	for _, n := range []string{"linear growth", "Maglev table entry (fewer than 65,536 backends per service)"} {
		if !names[n] {
			t.Errorf("no target %q in %v", n, names)
		}
	}
}

func TestControlFlags(t *testing.T) {
	var out, errb bytes.Buffer
	if rc := run([]string{"control", "-h"}, &out, &errb); rc != 0 || !strings.Contains(errb.String(), "-vips") {
		t.Errorf("control -h: exit %d, stderr %q", rc, errb.String())
	}
	errb.Reset()
	if rc := run([]string{"control", "--vips", "1k,x"}, &out, &errb); rc != 1 || !strings.Contains(errb.String(), "--vips") {
		t.Errorf("control --vips 1k,x: exit %d, stderr %q", rc, errb.String())
	}
}

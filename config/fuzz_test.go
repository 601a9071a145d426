package config

import (
	"bytes"
	"errors"
	"os"
	"testing"
)

// FuzzParse checks that no input panics, that every failure is a non-empty
// Errors of complete entries, and that an accepted Config's references are
// in range.
func FuzzParse(f *testing.F) {
	example, err := os.ReadFile(examplePath)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(example)
	f.Add([]byte(valid))
	f.Add([]byte(groups(2, 1)))
	if bgp, err := os.ReadFile(bgpExamplePath); err == nil {
		f.Add(append([]byte(valid), bgp...))
	}
	// Its key file is absent here: the seed exercises the section's checks
	// up to the read.
	if fs, err := os.ReadFile(flowSyncExamplePath); err == nil {
		f.Add(append([]byte(valid), fs...))
	}
	f.Add([]byte("health_check = [{ name = \"hc\", type = \"TCP\" }]\n\"a\\u0062\" = '''\n'''\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := Parse("fuzz.toml", data)
		if err != nil {
			var es Errors
			if !errors.As(err, &es) || len(es) == 0 {
				t.Fatalf("error is not a non-empty Errors: %v", err)
			}
			for _, e := range es {
				if e.Msg == "" || e.File != "fuzz.toml" || e.Line < 0 || e.Line > bytes.Count(data, []byte("\n"))+1 {
					t.Fatalf("incomplete error %#v", e)
				}
			}
			return
		}
		for _, s := range cfg.Services {
			if s.HealthCheck < 0 || s.HealthCheck >= len(cfg.HealthChecks) {
				t.Fatalf("service %s: health check %d", s.Name, s.HealthCheck)
			}
		}
		for _, r := range cfg.Rules {
			if r.Service < 0 || r.Service >= len(cfg.Services) || !r.VIP.IsValid() {
				t.Fatalf("rule %s: service %d, VIP %v", r.Name, r.Service, r.VIP)
			}
			if r.AllPorts == (len(r.Ports) > 0) {
				t.Fatalf("rule %s: AllPorts %t with ports %v", r.Name, r.AllPorts, r.Ports)
			}
		}
		_ = cfg.Summary()
	})
}

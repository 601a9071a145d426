package main

import (
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/zap"

	"xlb/controlplane/admin"
	"xlb/controlplane/cptest"
)

// TestDrain_SharedAddress: an address that is a backend of two services
// (web's b1 is also dns's only backend here). `xlb drain ADDRESS` drains
// both and says so, each as service/name, with a note on how to name one;
// `xlb drain SERVICE/NAME` drains that service's only, and undrain
// likewise.
func TestDrain_SharedAddress(t *testing.T) {
	conf := strings.Replace(ctlConfig, `endpoints = [ { ip = "10.0.4.1" } ]`, `endpoints = [ { ip = "10.0.1.1" } ]`, 1)
	if conf == ctlConfig {
		t.Fatal("the fixture changed: dns's backend is not 10.0.4.1")
	}
	r := cptest.New(t, conf)
	sock := filepath.Join(t.TempDir(), "admin.sock")
	srv, err := admin.New(admin.Options{Listen: "127.0.0.1:0", Socket: sock}, &ctlSources{rig: r}, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close(t.Context()) })
	// removed reports, per service, whether its 10.0.1.1 is drained.
	removed := func() map[string]bool {
		out := map[string]bool{}
		for _, s := range r.CP.Snapshot().Services {
			if s == nil {
				continue
			}
			in := false
			for _, ref := range s.Eligible {
				if b := r.CP.Snapshot().Backends[ref.Slot()]; b != nil && b.IP.String() == "10.0.1.1" {
					in = true
				}
			}
			out[s.Name] = !in
		}
		return out
	}

	o := xlb("drain", "--socket", sock, "10.0.1.1")
	o.wantCode(t, 0)
	want := "drained web/b1\ndrained dns/10.0.1.1\n(10.0.1.1 is a backend of 2 services: all were drained; SERVICE/10.0.1.1 names one)\n"
	if o.stdout != want {
		t.Errorf("drain 10.0.1.1: %q\nwant %q", o.stdout, want)
	}
	if got := removed(); !got["web"] || !got["dns"] {
		t.Errorf("after drain 10.0.1.1: drained %v, want both", got)
	}
	o = xlb("undrain", "--socket", sock, "web/b1")
	o.wantCode(t, 0)
	if o.stdout != "undrained web/b1\n" {
		t.Errorf("undrain web/b1: %q", o.stdout)
	}
	if got := removed(); got["web"] || !got["dns"] {
		t.Errorf("after undrain web/b1: drained %v, want dns only", got)
	}
	o = xlb("undrain", "--socket", sock, "dns/10.0.1.1")
	o.wantCode(t, 0)
	if o.stdout != "undrained dns/10.0.1.1\n" || removed()["dns"] {
		t.Errorf("undrain dns/10.0.1.1: %q, drained %v", o.stdout, removed())
	}
	o = xlb("drain", "--socket", sock, "dns/b1") // b1 is web's
	o.wantCode(t, 1)
	if !strings.Contains(o.stderr, `"dns/b1"`) {
		t.Errorf("drain dns/b1: stderr %q, want it named as unknown", o.stderr)
	}
}

package e2e

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"xlb/scripts/testbed"
)

// TestX2_ReloadBurst: 50 SIGHUPs in a burst, each right after the running
// file was rewritten in place (as `cp` does) with one of two valid
// configurations in turn; the reloads coalesce, and the configuration that
// runs at the end is the file as it was at the last signal (issue: a burst
// once ended on the other file).
func TestX2_ReloadBurst(t *testing.T) {
	b := upBed(t, testbed.Options{Prefix: "e2eburst", Backends: 3, Failover: -1})
	files := [2]string{reloadConfig(b, "b1", "b2"), reloadConfig(b, "b3")}
	names := [2][]string{{"b1", "b2"}, {"b3"}}
	path := filepath.Join(t.TempDir(), "xlb.toml")
	if err := os.WriteFile(path, []byte(files[0]), 0o644); err != nil {
		t.Fatal(err)
	}
	p := startXLB(t, b, path)
	current := func(s status) []string {
		var out []string
		for _, svc := range s.Services {
			for _, be := range svc.Backends {
				if !be.Removed {
					out = append(out, be.Name)
				}
			}
		}
		slices.Sort(out)
		return out
	}
	waitStatus(t, b, "the first file's backends", func(s status) bool { return slices.Equal(current(s), names[0]) })

	for _, last := range []int{1, 0} { // two bursts: ending on each file
		for i := range 50 {
			k := (i + last + 1) % 2 // the burst's last file is files[last]
			if err := os.WriteFile(path, []byte(files[k]), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
				t.Fatal(err)
			}
		}
		// The last file's backends once every reload a SIGHUP started has
		// ended (xlb logs each start, the counters count each end), on two
		// reads in a row: a match seen while reloads still run could be
		// one of the burst's, undone by a later reload of the other file.
		settled := func() bool {
			started := strings.Count(p.log.String(), "SIGHUP: reloading")
			m := metrics(t, b)
			return started > 0 && float64(started) == m["xlb_reload_success_total"]+m["xlb_reload_failure_total"]
		}
		waitStatus(t, b, "the last file's backends, no reload running", func(s status) bool {
			return settled() && slices.Equal(current(s), names[last]) && settled()
		})
		if s := getStatus(t, b); !slices.Equal(current(s), names[last]) {
			t.Errorf("after the reloads ended: backends %v, want %v (the file at the last signal)", current(s), names[last])
		}
	}
}

package e2e

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"xlb/scripts/testbed"
)

// TestRestart_FlowsSurvive: with dataplane.state_dir, tracked connections
// survive xlb's restarts on the same host. About 100 kept-alive
// connections over b1 and b2 (WEIGHTED_MAGLEV, weights 1, 4, 0: not the
// equal weights a process without state starts with, so that such a
// restart moves many of them); then b1 and b2 report weight 0 and b3 1,
// so that every connection sits off Maglev's choice (a new selection
// sends it to b3, whose kernel resets it). xlb is stopped with SIGTERM and restarted, then killed with
// SIGKILL and restarted, while every connection asks every 100 ms: each
// is answered by its own backend across the restart, again at once after
// it (before the new process's first health round, whose view is the old
// one's) and once health checks have spoken. Last, a table file of
// another layout version (a binary of another layout) is refused with a
// clear log line, moved aside, and xlb starts empty and serves.
func TestRestart_FlowsSurvive(t *testing.T) {
	t.Parallel()
	b := upBed(t, testbed.Options{Prefix: "e2erst", Failover: -1, Weights: []int{1, 4, 0}})
	web := netip.AddrPortFrom(testbed.VIP4, testbed.HTTPPort)
	cfg := faultConfig(t, b, 2, 2, faultSvc{name: "web", port: web.Port(),
		primaries: []string{"b1", "b2", "b3"}, keys: `locality_lb_policy = "WEIGHTED_MAGLEV"`})
	stateDir := t.TempDir()
	raw, err := os.ReadFile(cfg)
	must(t, err)
	text := strings.Replace(string(raw), "[dataplane]\n", fmt.Sprintf("[dataplane]\nstate_dir = %q\n", stateDir), 1)
	must(t, os.WriteFile(cfg, []byte(text), 0o644))

	weightsAre := func(what string, want map[string]uint32) {
		t.Helper()
		waitStatus(t, b, what, func(s status) bool {
			for n, w := range want {
				be := backendIn(s, "web", n)
				if be == nil || !be.Healthy || be.Weight != w || be.Eligible != (w > 0) {
					return false
				}
			}
			return true
		})
	}
	p := startXLB(t, b, cfg)
	weightsAre("weights 1, 4, 0", map[string]uint32{"b1": 1, "b2": 4, "b3": 0})

	const conns = 100
	type conn struct {
		c       *testbed.HTTPConn
		backend string
	}
	var cs []conn
	per := map[string]int{}
	for i := range conns {
		c, err := dialRetry(b, web)
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		t.Cleanup(func() { c.Close() })
		r, err := c.Get("/", 2*time.Second)
		if err != nil {
			t.Fatalf("connection %d: first request: %v", i, err)
		}
		cs = append(cs, conn{c, r.Backend})
		per[r.Backend]++
	}
	must(t, b.SetWeight("b3", "1"))
	must(t, b.SetWeight("b1", "0"))
	must(t, b.SetWeight("b2", "0"))
	weightsAre("weights 0, 0, 1", map[string]uint32{"b1": 0, "b2": 0, "b3": 1})
	if per["b1"] == 0 || per["b2"] == 0 || per["b3"] != 0 {
		t.Fatalf("connections per backend %v, want some on b1 and b2, none on b3", per)
	}
	t.Logf("connections per backend %v: all off Maglev's choice (b3)", per)

	// broken asks on every connection and counts those not answered by
	// their backend.
	broken := func(when string) {
		t.Helper()
		n := 0
		for i, c := range cs {
			got, err := askOn(c.c)
			if err != nil || got != c.backend {
				n++
				if n <= 5 {
					t.Errorf("%s: connection %d to %s: answered by %q, %v", when, i, c.backend, got, err)
				}
			}
		}
		if n > 0 {
			t.Errorf("%s: %d of %d connections broken, want 0", when, n, len(cs))
		}
	}
	broken("before any restart")

	restart := func(how string, stop func()) {
		t.Helper()
		old := p
		// Live traffic across the restart: every connection asks every
		// 100 ms (a request in the gap is retransmitted by TCP until the
		// new process forwards it), until each has been answered again
		// by the new process.
		var (
			wg      sync.WaitGroup
			mu      sync.Mutex
			failed  []string
			answers = make([]atomic.Int64, len(cs))
			halt    = make(chan struct{})
		)
		for i := range cs {
			wg.Go(func() {
				for {
					select {
					case <-halt:
						return
					default:
					}
					got, err := askOnWithin(cs[i].c, 10*time.Second)
					if err != nil || got != cs[i].backend {
						mu.Lock()
						failed = append(failed, fmt.Sprintf("connection %d to %s: answered by %q, %v", i, cs[i].backend, got, err))
						mu.Unlock()
						return
					}
					answers[i].Add(1)
					time.Sleep(100 * time.Millisecond)
				}
			})
		}
		begin := time.Now()
		stop()
		if logHas(old, "saving the control plane's state") {
			t.Errorf("%s: the previous xlb could not save its state (its log is below)", how)
			t.Log(old.log.String())
		}
		p = startXLB(t, b, cfg)
		t.Logf("%s: %v from the stop to the new xlb's /healthz", how, time.Since(begin).Round(time.Millisecond))
		if !logHas(p, `"msg":"conntrack table kept from the previous process"`) {
			t.Errorf("%s: xlb's log has no line saying the conntrack table was kept", how)
		}
		// The previous view, before the health checks have spoken (a
		// fresh start has every backend unhealthy at weight 1).
		st := getStatus(t, b)
		for n, w := range map[string]uint32{"b1": 0, "b2": 0, "b3": 1} {
			if be := backendIn(st, "web", n); be == nil || !be.Healthy || be.Weight != w {
				t.Errorf("%s, at once: %s is %+v, want healthy with weight %d as before", how, n, be, w)
			}
		}
		// Every connection answered again, by the new process.
		base := make([]int64, len(cs))
		for i := range cs {
			base[i] = answers[i].Load()
		}
		deadline := time.Now().Add(30 * time.Second)
		waited := 0
		for waited < len(cs) && time.Now().Before(deadline) {
			i := waited
			mu.Lock()
			n := len(failed)
			mu.Unlock()
			if n > 0 || answers[i].Load() > base[i] {
				waited++
				continue
			}
			time.Sleep(20 * time.Millisecond)
		}
		close(halt)
		wg.Wait()
		if waited < len(cs) && len(failed) == 0 {
			t.Errorf("%s, under live traffic: connection %d not answered by the new xlb within 30s", how, waited)
		}
		for i, f := range failed {
			if i < 5 {
				t.Errorf("%s, under live traffic: %s", how, f)
			}
		}
		if len(failed) > 0 {
			t.Errorf("%s, under live traffic: %d of %d connections broken, want 0", how, len(failed), len(cs))
		}
		broken(how + ", at once")
		weightsAre(how+": weights 0, 0, 1 from health checks", map[string]uint32{"b1": 0, "b2": 0, "b3": 1})
		waitStatus(t, b, how+": a health round", func(s status) bool {
			for _, hc := range s.Runtime.HealthChecks {
				if hc.Probes < 2 {
					return false
				}
			}
			return true
		})
		broken(how + ", after health checks")
	}
	restart("after SIGTERM and a restart", p.stop)
	restart("after SIGKILL and a restart", func() { p.kill9(t) })

	// A binary of another layout: its table file is refused, moved
	// aside, and xlb starts empty and serves.
	p.stop()
	path := filepath.Join(stateDir, "conntrack")
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	must(t, err)
	hdr := make([]byte, 128)
	_, err = f.ReadAt(hdr, 0)
	must(t, err)
	binary.LittleEndian.PutUint32(hdr[8:], binary.LittleEndian.Uint32(hdr[8:])+1)
	binary.LittleEndian.PutUint32(hdr[124:], crc32.Checksum(hdr[:124], crc32.MakeTable(crc32.Castagnoli)))
	_, err = f.WriteAt(hdr, 0)
	must(t, err)
	must(t, f.Close())
	p = startXLB(t, b, cfg)
	if !logHas(p, `"msg":"conntrack state file refused, moved aside: starting with an empty table"`, "layout") {
		t.Errorf("a table file of another layout: no log line saying it was refused for its layout")
	}
	if _, err := os.Stat(path + ".refused"); err != nil {
		t.Errorf("the refused file was not moved aside: %v", err)
	}
	weightsAre("weights 0, 0, 1 after an empty start", map[string]uint32{"b1": 0, "b2": 0, "b3": 1})
	if c := newConns(t, b, web, 20); c["b3"] != 20 {
		t.Errorf("20 new connections after an empty start: %v, want all on b3", c)
	}
}

// askOnWithin is askOn with a timeout of its own.
func askOnWithin(c *testbed.HTTPConn, timeout time.Duration) (string, error) {
	r, err := c.Get("/", timeout)
	if err == nil && r.Status != 200 {
		err = fmt.Errorf("status %d", r.Status)
	}
	return r.Backend, err
}

package e2e

import (
	"encoding/binary"
	"encoding/json"
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

// The log lines of a start that took the previous process's table over.
const (
	tableKept     = `"msg":"conntrack table kept from the previous process"`
	tableMigrated = `"msg":"conntrack table migrated from the previous process's layout or capacity"`
)

// TestRestart_FlowsSurvive: with dataplane.state_dir, tracked connections
// survive xlb's restarts on the same host. About 100 kept-alive
// connections sit off Maglev's choice (offChoiceBed); xlb is stopped with
// SIGTERM and restarted, then killed with SIGKILL and restarted, while
// every connection asks every 100 ms: each is answered by its own backend
// across the restart, again at once after it (before the new process's
// first health round, whose view is the old one's) and once health checks
// have spoken. Last, a table file of a layout no binary reads is refused
// with a clear log line, moved aside, and xlb starts empty and serves.
func TestRestart_FlowsSurvive(t *testing.T) {
	t.Parallel()
	o := upOffChoice(t, "e2erst")
	o.restart("after SIGTERM and a restart", o.p.stop, xlbBin, tableKept)
	o.restart("after SIGKILL and a restart", func() { o.p.kill9(t) }, xlbBin, tableKept)

	// A file of an unknown layout (no binary's): refused, moved aside,
	// and xlb starts empty and serves.
	o.p.stop()
	path := filepath.Join(o.stateDir, "conntrack")
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
	o.p = startXLB(t, o.b, o.cfg)
	if !logHas(o.p, `"msg":"conntrack state file refused, moved aside: starting with an empty table"`, "layout") {
		t.Errorf("a table file of another layout: no log line saying it was refused for its layout")
	}
	if _, err := os.Stat(path + ".refused"); err != nil {
		t.Errorf("the refused file was not moved aside: %v", err)
	}
	o.weightsAre("weights 0, 0, 1 after an empty start", map[string]uint32{"b1": 0, "b2": 0, "b3": 1})
	if c := newConns(t, o.b, o.web, 20); c["b3"] != 20 {
		t.Errorf("20 new connections after an empty start: %v, want all on b3", c)
	}
}

// defaultStateDir is dataplane.state_dir when the file has none.
const defaultStateDir = "/run/xlb"

// defaultStateDirLine stands for the state_dir line in the one test that
// wants the default (ownStateDir accepts it).
const defaultStateDirLine = "# state_dir: none, the default " + defaultStateDir + " on purpose\n"

// TestRestart_DefaultStateDir: tracked flows survive a restart with the
// default configuration, which has no state_dir line: the table is kept
// in /run/xlb. 150 kept-alive connections sit off Maglev's choice
// (offChoiceBed: made under weights 1, 4, 0, which then change to 0, 0,
// 1); xlb is stopped with SIGTERM and started again while every
// connection asks every 100 ms: none breaks (57 of 150 reset when
// nothing was kept by default). Only this test uses /run/xlb; the
// files it made there are removed at its end, passed or failed.
func TestRestart_DefaultStateDir(t *testing.T) {
	t.Parallel()
	cleanDefaultStateDir(t) // first, so that its cleanup runs after xlb's
	o := upOffChoiceWith(t, "e2erdf", "default", 150)
	if _, err := os.Stat(filepath.Join(defaultStateDir, "conntrack")); err != nil {
		t.Errorf("xlb without state_dir keeps no table in %s: %v", defaultStateDir, err)
	}
	o.restart("default state_dir: after SIGTERM and a restart", o.p.stop, xlbBin, tableKept)
}

// cleanDefaultStateDir fails t when /run/xlb holds another xlb's files
// (this test would take its table over), and removes what t made there
// when it ends.
func cleanDefaultStateDir(t *testing.T) {
	t.Helper()
	before := map[string]bool{}
	_, err := os.Stat(defaultStateDir)
	existed := err == nil
	if ents, err := os.ReadDir(defaultStateDir); err == nil {
		for _, e := range ents {
			before[e.Name()] = true
		}
		for _, n := range []string{"conntrack", "controlplane.json"} {
			if before[n] {
				t.Fatalf("%s already has %s (another xlb's, or a run that was killed): remove %s's files to run this test",
					defaultStateDir, n, defaultStateDir)
			}
		}
	}
	t.Cleanup(func() {
		ents, _ := os.ReadDir(defaultStateDir)
		for _, e := range ents {
			if !before[e.Name()] {
				if err := os.RemoveAll(filepath.Join(defaultStateDir, e.Name())); err != nil {
					t.Error(err)
				}
			}
		}
		if !existed {
			if err := os.Remove(defaultStateDir); err != nil && !os.IsNotExist(err) {
				t.Error(err)
			}
		}
	})
}

// TestRestart_FlowsSurviveLayoutChange: a binary replaced by one whose
// conntrack table has another layout keeps every tracked connection, both
// ways. About 100 kept-alive connections off Maglev's choice
// (offChoiceBed) on the shipped binary (layout 2, eight slots per
// bucket); SIGTERM, and the binary built with xlb_ct_layout_alt (a
// test-only layout, four slots per bucket) starts on the same state_dir:
// it migrates the table (its log says so, with every entry carried and
// none left out) and breaks none of them; then SIGTERM and the shipped
// binary again (a rollback): migrated back, none broken. Last,
// conntrack_capacity changed from 65536 to 16384 across a SIGTERM and a
// restart: migrated by capacity, none broken.
func TestRestart_FlowsSurviveLayoutChange(t *testing.T) {
	t.Parallel()
	o := upOffChoice(t, "e2erl")
	alt := buildAlt(t)
	o.restart("after an upgrade to another table layout", o.p.stop, alt, tableMigrated)
	o.migratedAll("the upgrade", "0x2", 65536)
	o.restart("after a rollback to layout 2", o.p.stop, xlbBin, tableMigrated)
	o.migratedAll("the rollback", "0x7e570002", 65536)

	raw, err := os.ReadFile(o.cfg)
	must(t, err)
	text := strings.Replace(string(raw), "conntrack_capacity = 65536\n", "conntrack_capacity = 16384\n", 1)
	if text == string(raw) {
		t.Fatal("the configuration has no conntrack_capacity = 65536 to change")
	}
	must(t, os.WriteFile(o.cfg, []byte(text), 0o644))
	o.restart("after conntrack_capacity 65536 -> 16384", o.p.stop, xlbBin, tableMigrated)
	o.migratedAll("the capacity change", "0x2", 65536)
}

// offChoiceBed is a bed with about 100 kept-alive connections that all
// sit off Maglev's choice: made over b1 and b2 (WEIGHTED_MAGLEV, weights
// 1, 4, 0: not the equal weights a process without state starts with, so
// that such a restart moves many of them), then b1 and b2 report weight 0
// and b3 1, so that a new selection sends every one of them to b3, whose
// kernel resets it. Only a kept table keeps them.
type offChoiceBed struct {
	t        *testing.T
	b        *testbed.Bed
	web      netip.AddrPort
	cfg      string
	stateDir string
	p        *xlbProc // the running xlb
	cs       []offChoiceConn
}

type offChoiceConn struct {
	c       *testbed.HTTPConn
	backend string
}

func upOffChoice(t *testing.T, prefix string) *offChoiceBed {
	t.Helper()
	return upOffChoiceWith(t, prefix, t.TempDir(), 100)
}

// upOffChoiceWith is upOffChoice with state_dir stateDir ("default": no
// state_dir line) and conns connections.
func upOffChoiceWith(t *testing.T, prefix, stateDir string, conns int) *offChoiceBed {
	t.Helper()
	b := upBed(t, testbed.Options{Prefix: prefix, Failover: -1, Weights: []int{1, 4, 0}})
	o := &offChoiceBed{t: t, b: b, web: netip.AddrPortFrom(testbed.VIP4, testbed.HTTPPort), stateDir: stateDir}
	o.cfg = faultConfig(t, b, 2, 2, faultSvc{name: "web", port: o.web.Port(),
		primaries: []string{"b1", "b2", "b3"}, keys: `locality_lb_policy = "WEIGHTED_MAGLEV"`})
	if stateDir == "default" {
		raw, err := os.ReadFile(o.cfg)
		must(t, err)
		text := strings.Replace(string(raw), noStateDir, defaultStateDirLine, 1)
		if text == string(raw) {
			t.Fatalf("%s has no line %s to remove", o.cfg, noStateDir)
		}
		must(t, os.WriteFile(o.cfg, []byte(text), 0o644))
		o.stateDir = defaultStateDir
	} else {
		keepIn(t, o.cfg, o.stateDir)
	}

	o.p = startXLB(t, b, o.cfg)
	o.weightsAre("weights 1, 4, 0", map[string]uint32{"b1": 1, "b2": 4, "b3": 0})
	per := map[string]int{}
	for i := range conns {
		c, err := dialRetry(b, o.web)
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		t.Cleanup(func() { c.Close() })
		r, err := c.Get("/", 2*time.Second)
		if err != nil {
			t.Fatalf("connection %d: first request: %v", i, err)
		}
		o.cs = append(o.cs, offChoiceConn{c, r.Backend})
		per[r.Backend]++
	}
	must(t, b.SetWeight("b3", "1"))
	must(t, b.SetWeight("b1", "0"))
	must(t, b.SetWeight("b2", "0"))
	o.weightsAre("weights 0, 0, 1", map[string]uint32{"b1": 0, "b2": 0, "b3": 1})
	if per["b1"] == 0 || per["b2"] == 0 || per["b3"] != 0 {
		t.Fatalf("connections per backend %v, want some on b1 and b2, none on b3", per)
	}
	t.Logf("connections per backend %v: all off Maglev's choice (b3)", per)
	o.broken("before any restart")
	return o
}

// weightsAre waits until /status shows every backend of want healthy with
// its weight.
func (o *offChoiceBed) weightsAre(what string, want map[string]uint32) {
	o.t.Helper()
	waitStatus(o.t, o.b, what, func(s status) bool {
		for n, w := range want {
			be := backendIn(s, "web", n)
			if be == nil || !be.Healthy || be.Weight != w || be.Eligible != (w > 0) {
				return false
			}
		}
		return true
	})
}

// broken asks on every connection and counts those not answered by their
// backend.
func (o *offChoiceBed) broken(when string) {
	o.t.Helper()
	n := 0
	for i, c := range o.cs {
		got, err := askOn(c.c)
		if err != nil || got != c.backend {
			n++
			if n <= 5 {
				o.t.Errorf("%s: connection %d to %s: answered by %q, %v", when, i, c.backend, got, err)
			}
		}
	}
	if n > 0 {
		o.t.Errorf("%s: %d of %d connections broken, want 0", when, n, len(o.cs))
	}
}

// restart stops the running xlb with stop and starts bin on the same
// configuration and state_dir, whose log must have the line took (the
// table kept or migrated), under live traffic: every connection asks
// every 100 ms (a request in the gap is retransmitted by TCP until the
// new process forwards it), until each has been answered again by the new
// process. None may break, then or after; right after the start /status
// shows the previous health and weights.
func (o *offChoiceBed) restart(how string, stop func(), bin, took string) {
	t := o.t
	t.Helper()
	old := o.p
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		failed  []string
		answers = make([]atomic.Int64, len(o.cs))
		halt    = make(chan struct{})
	)
	for i := range o.cs {
		wg.Go(func() {
			for {
				select {
				case <-halt:
					return
				default:
				}
				got, err := askOnWithin(o.cs[i].c, 10*time.Second)
				if err != nil || got != o.cs[i].backend {
					mu.Lock()
					failed = append(failed, fmt.Sprintf("connection %d to %s: answered by %q, %v", i, o.cs[i].backend, got, err))
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
	if logHas(old, "control plane state not saved") {
		t.Errorf("%s: the previous xlb could not save its state (its log is below)", how)
		t.Log(old.log.String())
	}
	o.p = startXLBWith(t, o.b, o.cfg, bin)
	t.Logf("%s: %v from the stop to the new xlb's /healthz", how, time.Since(begin).Round(time.Millisecond))
	if !logHas(o.p, took) {
		t.Errorf("%s: xlb's log has no line %s", how, took)
	}
	// The previous view, before the health checks have spoken (a fresh
	// start has every backend unhealthy at weight 1).
	st := getStatus(t, o.b)
	for n, w := range map[string]uint32{"b1": 0, "b2": 0, "b3": 1} {
		if be := backendIn(st, "web", n); be == nil || !be.Healthy || be.Weight != w {
			t.Errorf("%s, at once: %s is %+v, want healthy with weight %d as before", how, n, be, w)
		}
	}
	// Every connection answered again, by the new process.
	base := make([]int64, len(o.cs))
	for i := range o.cs {
		base[i] = answers[i].Load()
	}
	deadline := time.Now().Add(30 * time.Second)
	waited := 0
	for waited < len(o.cs) && time.Now().Before(deadline) {
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
	if waited < len(o.cs) && len(failed) == 0 {
		t.Errorf("%s, under live traffic: connection %d not answered by the new xlb within 30s", how, waited)
	}
	for i, f := range failed {
		if i < 5 {
			t.Errorf("%s, under live traffic: %s", how, f)
		}
	}
	if len(failed) > 0 {
		t.Errorf("%s, under live traffic: %d of %d connections broken, want 0", how, len(failed), len(o.cs))
	}
	o.broken(how + ", at once")
	o.weightsAre(how+": weights 0, 0, 1 from health checks", map[string]uint32{"b1": 0, "b2": 0, "b3": 1})
	waitStatus(t, o.b, how+": a health round", func(s status) bool {
		for _, hc := range s.Runtime.HealthChecks {
			if hc.Probes < 2 {
				return false
			}
		}
		return true
	})
	o.broken(how + ", after health checks")
	t.Logf("%s: %d of %d connections broken under live traffic, all off Maglev's choice", how, len(failed), len(o.cs))
}

// migratedAll checks the running xlb's migration line: from layout from
// and capacity fromCap, at least every connection's entry carried, none
// left out.
func (o *offChoiceBed) migratedAll(what, from string, fromCap int) {
	o.t.Helper()
	for line := range strings.Lines(o.p.log.String()) {
		if !strings.Contains(line, tableMigrated) {
			continue
		}
		var m struct {
			From    string `json:"from_layout"`
			FromCap int    `json:"from_capacity"`
			Entries int    `json:"entries"`
			Left    int    `json:"entries_not_fitting"`
		}
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			o.t.Errorf("%s: migration log line %q: %v", what, line, err)
			return
		}
		o.t.Logf("%s: migrated from layout %s, capacity %d: %d entries carried, %d did not fit", what, m.From, m.FromCap, m.Entries, m.Left)
		if m.From != from || m.FromCap != fromCap || m.Entries < len(o.cs) || m.Left != 0 {
			o.t.Errorf("%s: migrated from layout %s, capacity %d, with %d entries, %d not fitting; want from %s, %d, at least %d, none",
				what, m.From, m.FromCap, m.Entries, m.Left, from, fromCap, len(o.cs))
		}
		return
	}
	o.t.Errorf("%s: no migration line in xlb's log", what)
}

// askOnWithin is askOn with a timeout of its own.
func askOnWithin(c *testbed.HTTPConn, timeout time.Duration) (string, error) {
	r, err := c.Get("/", timeout)
	if err == nil && r.Status != 200 {
		err = fmt.Errorf("status %d", r.Status)
	}
	return r.Backend, err
}

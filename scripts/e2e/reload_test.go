package e2e

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"xlb/scripts/testbed"
)

// reloadDrain is connection_draining_timeout_sec of the reload test.
const reloadDrain = 2 * time.Second

// reloadConfig is one web service on VIP4:80 over the named backends of
// b, with 2 s of draining, TCP health checks every second.
func reloadConfig(b *testbed.Bed, backends ...string) string {
	var eps []string
	for _, n := range backends {
		eps = append(eps, fmt.Sprintf("{ name = %q, ip = %q }", n, b.Backend(n).Addr4))
	}
	return bedHead(b.LB.Iface, adminSocket(b.LB.NS)) + tcpCheck + fmt.Sprintf(`
[[backend_service]]
name = "web"
protocol = "TCP"
health_checks = ["hc"]
connection_draining_timeout_sec = %d
  [[backend_service.backend]]
  group = "primary"
  endpoints = [ %s ]

[[forwarding_rule]]
name = "web"
ip_address = %q
ip_protocol = "TCP"
ports = ["%d"]
backend_service = "web"
`, int(reloadDrain/time.Second), strings.Join(eps, ", "), testbed.VIP4, testbed.HTTPPort)
}

// keptConn is a kept-alive connection asking every 100 ms until stopped
// or its first failure.
type keptConn struct {
	backend string        // of its first answer
	timeout time.Duration // for each answer; 0: 1 s
	mu      sync.Mutex
	ok      []time.Time // answers
	moved   string      // an answer from another backend
	movedAt time.Time   // of the first such answer (zero: none)
	failAt  time.Time   // its first failure (zero: none)
	failErr error
}

// keepAlive opens kept-alive connections to dst from b's client, each
// asking from its own goroutine of wg until stop, until each of b1-b3 has
// answered need of them (at most tries connections); it fails t, naming
// what, if they cannot be opened or do not spread that far.
func keepAlive(t *testing.T, b *testbed.Bed, dst netip.AddrPort, what string, need, tries int,
	wg *sync.WaitGroup, stop <-chan struct{}) ([]*keptConn, map[string]int) {
	t.Helper()
	var kept []*keptConn
	per := map[string]int{}
	for i := 0; i < tries && (per["b1"] < need || per["b2"] < need || per["b3"] < need); i++ {
		hc, err := dialRetry(b, dst)
		if err != nil {
			t.Fatalf("%s: connection %d: %v", what, i, err)
		}
		r, err := hc.Get("/", 2*time.Second)
		if err != nil {
			t.Fatalf("%s: connection %d: first request: %v", what, i, err)
		}
		k := &keptConn{backend: r.Backend}
		per[r.Backend]++
		kept = append(kept, k)
		wg.Go(func() { k.run(hc, stop) })
	}
	if per["b1"] < need || per["b2"] < need || per["b3"] < need {
		t.Fatalf("%s: kept-alive connections per backend %v, want %d or more on each of b1-b3", what, per, need)
	}
	return kept, per
}

func (k *keptConn) run(c *testbed.HTTPConn, stop <-chan struct{}) {
	defer c.Close()
	for {
		select {
		case <-stop:
			return
		case <-time.After(100 * time.Millisecond):
		}
		timeout := k.timeout
		if timeout == 0 {
			timeout = time.Second
		}
		r, err := c.Get("/", timeout)
		now := time.Now()
		k.mu.Lock()
		if err == nil && r.Status != 200 {
			err = fmt.Errorf("status %d", r.Status)
		}
		if err != nil {
			k.failAt, k.failErr = now, err
			k.mu.Unlock()
			return
		}
		if r.Backend != k.backend && k.moved == "" {
			k.moved, k.movedAt = r.Backend, now
		}
		k.ok = append(k.ok, now)
		k.mu.Unlock()
	}
}

// newConn is one new connection of the steady stream.
type newConn struct {
	at      time.Time // when it was opened
	backend string
	err     error
}

// TestReload (X2, M5) runs a steady stream of kept-alive connections and
// new ones through xlb while `xlb reload` replaces b3 by b4, then a
// broken file arrives by SIGHUP, then `xlb drain b1`: connections to b1
// and b2 never fail nor move; b3's keep working until its 2 s drain ends
// and then stop, and no new connection reaches it after the reload; b4
// takes new connections once healthy; through the admin socket, a dry run
// lists a change and applies nothing, and -c another file is refused
// naming both; the broken file changes nothing but
// the failure counter; after the drain no new connection reaches b1.
func TestReload(t *testing.T) {
	t.Parallel()
	b := upBed(t, testbed.Options{Prefix: "e2er", Backends: 4, Failover: -1})
	dir := t.TempDir()
	cfg := filepath.Join(dir, "xlb.toml")
	write := func(text string) {
		t.Helper()
		if err := os.WriteFile(cfg, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(reloadConfig(b, "b1", "b2", "b3"))
	p := startXLB(t, b, cfg)
	waitStatus(t, b, "b1-b3 healthy", allHealthy)

	c := b.Clients[0]
	web := netip.AddrPortFrom(testbed.VIP4, testbed.HTTPPort)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	stopTraffic := sync.OnceFunc(func() { close(stop); wg.Wait() })
	t.Cleanup(stopTraffic)

	// Kept-alive connections, until each of b1-b3 has some.
	kept, per := keepAlive(t, b, web, "kept-alive", 2, 60, &wg, stop)
	// New connections, one every 30 ms.
	var (
		nmu   sync.Mutex
		fresh []newConn
	)
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(30 * time.Millisecond):
			}
			at := time.Now()
			// 3 s lets the kernel retransmit a SYN once (after 1 s): a
			// connection fails only if the balancer loses it twice. One CI
			// run under full load saw a new connection time out at 1 s (the
			// timeout then). TestReload_EverySYNAccounted has since
			// accounted for every SYN sent again through reloads on busy
			// CPUs: none went where no counter says (lossSummary, at the
			// end, logs them for this test).
			r, err := testbed.HTTPGet(c.NS, web, "/", 3*time.Second)
			nmu.Lock()
			fresh = append(fresh, newConn{at, r.Backend, err})
			nmu.Unlock()
		}
	})
	newSince := func(since time.Time) (map[string]int, []error) {
		nmu.Lock()
		defer nmu.Unlock()
		counts, errs := map[string]int{}, []error(nil)
		for _, n := range fresh {
			if n.at.Before(since) {
				continue
			}
			if n.err != nil {
				errs = append(errs, n.err)
				continue
			}
			counts[n.backend]++
		}
		return counts, errs
	}
	time.Sleep(500 * time.Millisecond)

	// Reload: b3 leaves, b4 comes. `xlb reload` validates, then signals.
	write(reloadConfig(b, "b1", "b2", "b4"))
	sent := time.Now()
	if out, err := exec.Command(xlbBin, "reload", "-c", cfg, "--pid", strconv.Itoa(p.cmd.Process.Pid)).CombinedOutput(); err != nil {
		t.Fatalf("xlb reload: %v\n%s", err, out)
	}
	waitMetric(t, b, "xlb_reload_success_total", 1)
	// The reload is complete by now, its snapshot published. (last_reload's
	// time, below, is taken before the control plane applies it: a
	// connection opened between the two may still find b3.)
	reloaded := time.Now()
	// When xlb applied it, by its own clock (this host's): the drain
	// runs from there.
	applied := lastReload(t, b)
	if applied.Before(sent) {
		t.Fatalf("last reload at %v, before the reload was sent (%v)", applied, sent)
	}
	st := waitStatus(t, b, "b4 healthy", allHealthy)
	for _, svc := range st.Services {
		for _, be := range svc.Backends {
			if be.Name == "b3" && !be.Removed {
				t.Errorf("b3 after the reload: %+v, want removed", be)
			}
		}
	}
	// Through the admin socket: a dry run of b4 leaving lists that and
	// applies nothing; -c another file is refused, naming both files.
	write(reloadConfig(b, "b1", "b2"))
	out, err := exec.Command(xlbBin, "reload", "-c", cfg, "--dry-run").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "removed backend web/b4: ") || !strings.HasSuffix(string(out), "\ndry run: nothing applied\n") {
		t.Errorf("xlb reload --dry-run: %v\n%s", err, out)
	}
	other := filepath.Join(t.TempDir(), "other.toml")
	if err := os.WriteFile(other, []byte(reloadConfig(b, "b1", "b2")), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err = exec.Command(xlbBin, "reload", "-c", other).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "xlb runs "+cfg) || !strings.Contains(string(out), "(asked: "+other+")") {
		t.Errorf("xlb reload -c other.toml: %v\n%s; want refused, naming both files", err, out)
	}
	write(reloadConfig(b, "b1", "b2", "b4"))
	if m := metrics(t, b); m["xlb_reload_success_total"] != 1 || m["xlb_reload_failure_total"] != 0 {
		t.Errorf("after the dry run and the refusal: reloads %v ok, %v failed; want 1 and 0", m["xlb_reload_success_total"], m["xlb_reload_failure_total"])
	}
	for _, svc := range getStatus(t, b).Services {
		for _, be := range svc.Backends {
			if be.Name == "b4" && be.Removed {
				t.Errorf("b4 after the dry run: %+v, want kept", be)
			}
		}
	}
	// Wait past the end of b3's drain.
	time.Sleep(time.Until(applied.Add(reloadDrain + 1500*time.Millisecond)))

	// A broken file, by SIGHUP: `xlb reload` refuses to send it; sent
	// anyway, xlb keeps running as it was.
	write("this is not [toml")
	if out, err := exec.Command(xlbBin, "reload", "-c", cfg, "--pid", strconv.Itoa(p.cmd.Process.Pid)).CombinedOutput(); err == nil || !strings.Contains(string(out), "nothing sent") {
		t.Errorf("xlb reload of a broken file: %v, %s; want exit 1, nothing sent", err, out)
	}
	brokenAt := time.Now()
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitMetric(t, b, "xlb_reload_failure_total", 1)
	time.Sleep(500 * time.Millisecond)
	if m := metrics(t, b); m["xlb_reload_success_total"] != 1 {
		t.Errorf("reload successes %v after the broken file, want 1", m["xlb_reload_success_total"])
	}
	if since, _ := newSince(brokenAt); since["b1"]+since["b2"]+since["b4"] == 0 {
		t.Errorf("no new connection answered after the broken file: %v", since)
	}

	// Operator drain of b1: no new connection reaches it afterwards. xlb
	// logs it, once: the backend asked for and drained, and who asked,
	// the uid and the pid of this `xlb drain` (`ip netns exec` execs it:
	// the pid is its own).
	drainSent := time.Now()
	drain := exec.Command("ip", "netns", "exec", b.LB.NS, xlbBin, "drain", "--socket", adminSocket(b.LB.NS), "b1")
	if out, err := drain.CombinedOutput(); err != nil || string(out) != "drained web/b1\n" {
		t.Fatalf("xlb drain b1: %q, %v", out, err)
	}
	drained := time.Now()
	audit := p.waitAudit(t, "drain", drain.Process.Pid)
	if audit["level"] != "info" || audit["target"] != "b1" || audit["outcome"] != "ok" || audit["peer_uid"] != float64(os.Geteuid()) ||
		fmt.Sprint(audit["backends"]) != "[web/b1]" {
		t.Errorf("xlb drain b1's audit line %v: want info, target b1, outcome ok, backends [web/b1], peer uid %d", audit, os.Geteuid())
	}
	t.Logf("the drain's audit line: %v", audit)
	time.Sleep(700 * time.Millisecond)
	table, err := testbed.Exec(b.LB.NS, xlbBin, "status")
	if err != nil {
		t.Fatalf("xlb status: %v", err)
	}
	t.Logf("xlb status:\n%s", table)
	if !strings.Contains(table, "reloads 1 ok, 1 failed") || !rowHas(table, "b1", "draining") && !rowHas(table, "b1", "removed") || !rowHas(table, "b3", "removed") && strings.Contains(table, " b3 ") {
		t.Errorf("xlb status does not show the reloads, b1 draining and b3 gone:\n%s", table)
	}
	stopTraffic()

	// What the connections saw.
	for _, k := range kept {
		k.mu.Lock()
		switch k.backend {
		case "b1", "b2":
			// b1's connections may stop once its operator drain ends.
			if !k.failAt.IsZero() && (k.backend == "b2" || k.failAt.Before(drainSent.Add(reloadDrain))) {
				t.Errorf("a kept-alive connection to %s failed %v after the reload was sent: %v", k.backend, k.failAt.Sub(sent), k.failErr)
			}
		case "b3":
			var during int
			for _, at := range k.ok {
				if at.After(applied) && at.Before(applied.Add(reloadDrain)) {
					during++
				}
			}
			if during == 0 {
				t.Errorf("a kept-alive connection to b3 answered nothing while draining (%d answers in all)", len(k.ok))
			}
			if !k.failAt.IsZero() && k.failAt.Before(applied.Add(reloadDrain)) {
				t.Errorf("a kept-alive connection to b3 failed %v after the reload, within its drain: %v", k.failAt.Sub(applied), k.failErr)
			}
			if k.failAt.IsZero() {
				t.Errorf("a kept-alive connection to b3 still answered after its drain ended (%d answers)", len(k.ok))
			}
		}
		if k.moved != "" {
			t.Errorf("a kept-alive connection to %s was answered by %s", k.backend, k.moved)
		}
		k.mu.Unlock()
	}
	all, errs := newSince(time.Time{})
	if len(errs) > 0 {
		// When each failed, against the reload, the broken file and the
		// drain (startXLB adds where the packets went).
		var when []string
		nmu.Lock()
		for _, n := range fresh {
			if n.err != nil {
				when = append(when, fmt.Sprintf("opened %v after the reload was sent: %v", n.at.Sub(sent).Round(time.Millisecond), n.err))
			}
		}
		nmu.Unlock()
		t.Errorf("%d of %d new connections failed (broken file sent %v, drain %v after the reload):\n%s", len(errs), len(fresh),
			brokenAt.Sub(sent).Round(time.Millisecond), drainSent.Sub(sent).Round(time.Millisecond), strings.Join(when, "\n"))
	}
	after, _ := newSince(reloaded)
	if after["b3"] > 0 {
		t.Errorf("%d new connections reached b3 after the reload", after["b3"])
	}
	nmu.Lock()
	for _, n := range fresh {
		if n.backend == "b3" && n.at.After(applied) {
			t.Logf("a new connection opened %v after last_reload.at (%v before the test saw the reload complete) reached b3",
				n.at.Sub(applied).Round(time.Microsecond), reloaded.Sub(n.at).Round(time.Microsecond))
		}
	}
	nmu.Unlock()
	if after["b4"] == 0 {
		t.Errorf("no new connection reached b4 after the reload: %v", after)
	}
	afterDrain, _ := newSince(drained.Add(200 * time.Millisecond))
	if afterDrain["b1"] > 0 {
		t.Errorf("%d new connections reached b1 after xlb drain b1: %v", afterDrain["b1"], afterDrain)
	}
	t.Logf("new connections: %v in all, %v after the reload, %v after the drain; kept-alive per backend %v", all, after, afterDrain, per)
	// A SYN lost once is retried by the kernel and passes; say so, and
	// where xlb dropped what it dropped, so that it shows without a failure.
	t.Logf("lost and retried: %s", lossSummary(t, b))
}

// lastReload is the time of /status's last_reload.
func lastReload(t *testing.T, b *testbed.Bed) time.Time {
	t.Helper()
	var st struct {
		LastReload *struct {
			At string `json:"at"`
		} `json:"last_reload"`
	}
	body := admin(t, b, "/status")
	if err := json.Unmarshal([]byte(body), &st); err != nil || st.LastReload == nil {
		t.Fatalf("/status: no last_reload (%v):\n%s", err, body)
	}
	at, err := time.Parse(time.RFC3339Nano, st.LastReload.At)
	if err != nil {
		t.Fatalf("/status last_reload.at: %v", err)
	}
	return at
}

// rowHas reports whether a line of the status table shows backend with
// word.
func rowHas(table, backend, word string) bool {
	for line := range strings.Lines(table) {
		f := strings.Fields(line)
		if len(f) > 2 && f[1] == backend && strings.Contains(line, word) {
			return true
		}
	}
	return false
}

// waitMetric polls /metrics until series has value v (5 s at most).
func waitMetric(t *testing.T, b *testbed.Bed, series string, v float64) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		got, ok := metrics(t, b)[series]
		if ok && got == v {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s is %v (present %v) after 5s, want %v", series, got, ok, v)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

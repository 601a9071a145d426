package xdp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"xlb/bench/xdp/sink"
	"xlb/bench/xdp/topo"
	"xlb/internal/nsx"
	"xlb/internal/syncbuf"
)

// The two xlb services on the VIP: untracked (UDP, affinity NONE: Maglev
// per packet, no conntrack, T1) and tracked (UDP, CLIENT_IP_PORT_PROTO:
// a 5-tuple conntrack entry per flow, hits after the first packet).
const (
	portXLB   = sink.PortLo
	portXLBCT = sink.PortLo + 1
	// healthPort is where the generator namespace answers xlb's TCP
	// health checks, on every backend address.
	healthPort = 8080
	adminAddr  = "127.0.0.1:9110"
)

// benchCTCapacity is xlb's conntrack capacity in the bench: 4M entries,
// its default, 256 MiB, 128 huge pages. The 65536 flows touch every page of
// it, so a table not populated at start shows as 128 page faults or more in
// the worker (ExtraFaults), far above the few it takes otherwise.
const benchCTCapacity = 1 << 22

// xlbConfig is the configuration xlb runs with on the middle hop.
func xlbConfig(t *topo.Topo, cpu int) string {
	text := xlbConfigText("# lbbench xdp: xlb on the middle hop (generated)\n", t.MidDev, cpu, "auto", t.Backends, false)
	// A socket of the run's own (its prefix), not the default one an xlb
	// of the host or another run may hold.
	return strings.Replace(text, "[admin]\n", fmt.Sprintf("[admin]\nsocket = %q\n", "/run/lbbench-xdp-"+t.Prefix+"/admin.sock"), 1)
}

// xlbConfigText is xlb's configuration for the bench: header (comment
// lines), the interface, the worker's CPU (-1: unpinned), zero_copy, the
// backends and whether their MACs are written (endpoint mac: the frames go
// to that MAC rather than one xlb resolves).
func xlbConfigText(header, iface string, cpu int, zeroCopy string, backends []topo.Backend, macs bool) string {
	var b strings.Builder
	fmt.Fprintf(&b, `%s[dataplane]
interface = %q
queues = "all"
`, header, iface)
	if cpu >= 0 {
		fmt.Fprintf(&b, "cpus = [%d]\n", cpu)
	}
	fmt.Fprintf(&b, `xdp_mode = "native"
zero_copy = %q
frame_size = 4096
ring_size = 2048
conntrack_capacity = %d
state_dir = ""   # every run starts from an empty table

[admin]
listen = %q

[[health_check]]
name = "hc"
type = "TCP"
port = %d
check_interval_sec = 1
timeout_sec = 1
healthy_threshold = 1
unhealthy_threshold = 3
`, zeroCopy, benchCTCapacity, adminAddr, healthPort)
	for _, svc := range []struct {
		name, affinity, prefix string
		port                   int
	}{{"bench", "NONE", "", portXLB}, {"bench-ct", "CLIENT_IP_PORT_PROTO", "ct-", portXLBCT}} {
		fmt.Fprintf(&b, `
[[backend_service]]
name = %q
protocol = "UDP"
session_affinity = %q
health_checks = ["hc"]

  [[backend_service.backend]]
  group = "all"
  endpoints = [
`, svc.name, svc.affinity)
		for _, be := range backends {
			if macs {
				fmt.Fprintf(&b, "    { name = %q, ip = %q, mac = %q },\n", svc.prefix+be.Name, be.IP.String(), be.MAC.String())
				continue
			}
			fmt.Fprintf(&b, "    { name = %q, ip = %q },\n", svc.prefix+be.Name, be.IP.String())
		}
		fmt.Fprintf(&b, `  ]

[[forwarding_rule]]
name = %q
ip_address = %q
ip_protocol = "UDP"
ports = ["%d"]
backend_service = %q
`, svc.name, topo.VIP.String(), svc.port, svc.name)
	}
	return b.String()
}

// xlbBinary returns the xlb binary to run: path when given, else one built
// from this module's cmd/xlb into dir.
func xlbBinary(path, dir string) (string, error) {
	if path != "" {
		if _, err := os.Stat(path); err != nil {
			return "", fmt.Errorf("--xlb: %w", err)
		}
		return path, nil
	}
	gomod, err := exec.Command("go", "env", "GOMOD").Output()
	root := filepath.Dir(strings.TrimSpace(string(gomod)))
	if err != nil || strings.TrimSpace(string(gomod)) == "" || strings.TrimSpace(string(gomod)) == os.DevNull {
		return "", errors.New("no xlb binary: pass --xlb PATH, or run from the xlb repository with go installed (it builds cmd/xlb)")
	}
	bin := filepath.Join(dir, "xlb")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/xlb")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building cmd/xlb in %s: %w\n%s", root, err, out)
	}
	return bin, nil
}

// healthResponder accepts and closes TCP connections on healthPort in the
// generator namespace, for xlb's TCP health checks of every backend.
type healthResponder struct {
	ln net.Listener
	wg sync.WaitGroup
}

func startHealthResponder(t *topo.Topo) (*healthResponder, error) {
	h := &healthResponder{}
	err := nsx.Do(t.GenNS, func() (err error) {
		h.ln, err = net.Listen("tcp4", fmt.Sprintf("0.0.0.0:%d", healthPort))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("health responder: %w", err)
	}
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		for {
			c, err := h.ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	return h, nil
}

func (h *healthResponder) close() {
	h.ln.Close()
	h.wg.Wait()
}

// xlbProc is `xlb run` in the middle namespace.
type xlbProc struct {
	cmd    *exec.Cmd
	log    *syncbuf.Buffer
	exited chan struct{}
	err    error
	client *http.Client
}

// tail returns the last n lines of s, the runtime's gctrace lines left out.
func tail(s string, n int) string {
	var lines []string
	for _, l := range strings.Split(strings.TrimRight(s, "\n"), "\n") {
		if !strings.HasPrefix(l, "gc ") {
			lines = append(lines, l)
		}
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// startXLB runs bin with cfgPath in t's middle namespace (`ip netns exec`
// execs, so the pid is xlb's) and waits until every backend of both
// services is healthy and has its MAC.
func startXLB(ctx context.Context, t *topo.Topo, bin, cfgPath string) (*xlbProc, error) {
	p := &xlbProc{log: &syncbuf.Buffer{}, exited: make(chan struct{}),
		cmd: exec.Command("ip", "netns", "exec", t.MidNS, bin, "run", "-c", cfgPath, "--log-level", "warn")}
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	// The runtime prints a line per collection, with its pauses: the
	// bench's Tail attributes latency tails to them (or not).
	p.cmd.Env = append(os.Environ(), "GODEBUG=gctrace=1")
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting xlb: %w", err)
	}
	go func() { p.err = p.cmd.Wait(); close(p.exited) }()
	p.client = &http.Client{Timeout: time.Second, Transport: &http.Transport{
		DisableKeepAlives: true,
		DialContext: func(ctx context.Context, network, addr string) (c net.Conn, err error) {
			err = nsx.Do(t.MidNS, func() error {
				c, err = (&net.Dialer{Timeout: time.Second}).DialContext(ctx, network, addr)
				return err
			})
			return c, err
		},
	}}
	deadline := time.Now().Add(20 * time.Second)
	var last string
	for {
		select {
		case <-p.exited:
			return nil, fmt.Errorf("xlb exited while starting (%v):\n%s", p.err, tail(p.log.String(), 20))
		case <-ctx.Done():
			p.stop()
			return nil, ctx.Err()
		default:
		}
		ok, why := p.ready(len(t.Backends))
		if ok {
			return p, nil
		}
		last = why
		if time.Now().After(deadline) {
			p.stop()
			return nil, fmt.Errorf("xlb not ready within 20s (%s):\n%s", last, tail(p.log.String(), 20))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// xlbStatus is the part of xlb's /status read here.
type xlbStatus struct {
	Services []struct {
		Name     string `json:"name"`
		Backends []struct {
			Name    string `json:"name"`
			Healthy bool   `json:"healthy"`
			Ready   bool   `json:"ready"`
		} `json:"backends"`
	} `json:"services"`
}

func (p *xlbProc) ready(nBackends int) (bool, string) {
	resp, err := p.client.Get("http://" + adminAddr + "/status")
	if err != nil {
		return false, err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var st xlbStatus
	if err := json.Unmarshal(body, &st); err != nil {
		return false, fmt.Sprintf("/status: %v", err)
	}
	if len(st.Services) != 2 {
		return false, fmt.Sprintf("%d services", len(st.Services))
	}
	for _, s := range st.Services {
		if len(s.Backends) != nBackends {
			return false, fmt.Sprintf("service %s: %d backends", s.Name, len(s.Backends))
		}
		for _, b := range s.Backends {
			if !b.Healthy || !b.Ready {
				return false, fmt.Sprintf("backend %s: healthy %v, ready %v", b.Name, b.Healthy, b.Ready)
			}
		}
	}
	return true, ""
}

func (p *xlbProc) pid() int { return p.cmd.Process.Pid }

// stop sends SIGTERM (SIGKILL after 5 s) and waits for xlb to exit.
func (p *xlbProc) stop() error {
	select {
	case <-p.exited:
		return p.exitErr()
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(5 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
		return fmt.Errorf("xlb did not stop on SIGTERM within 5s:\n%s", tail(p.log.String(), 10))
	}
	return p.exitErr()
}

func (p *xlbProc) exitErr() error {
	if p.err != nil {
		return fmt.Errorf("xlb: %v:\n%s", p.err, tail(p.log.String(), 10))
	}
	return nil
}

// alive reports an xlb that exited on its own.
func (p *xlbProc) alive() error {
	select {
	case <-p.exited:
		return fmt.Errorf("xlb exited during the run (%v):\n%s", p.err, tail(p.log.String(), 20))
	default:
		return nil
	}
}

// counters flattens the numbers of xlb's /status (per-queue engine and
// socket counters, the XDP program's verdicts) into name -> value, queues
// summed; nil when /status does not answer.
func (p *xlbProc) counters() map[string]uint64 {
	resp, err := p.client.Get("http://" + adminAddr + "/status")
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	var st map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return nil
	}
	m := map[string]uint64{}
	var walk func(prefix string, v any)
	walk = func(prefix string, v any) {
		switch v := v.(type) {
		case float64:
			if v >= 0 {
				m[prefix] += uint64(v)
			}
		case map[string]any:
			for k, x := range v {
				walk(prefix+"."+k, x)
			}
		case []any:
			for _, x := range v {
				walk(prefix, x) // queues summed
			}
		}
	}
	walk("queues", st["queues"])
	if rt, ok := st["runtime"].(map[string]any); ok {
		walk("runtime.queues", rt["queues"])
		walk("runtime.xdp_program", rt["xdp_program"])
	}
	delete(m, "queues.queue")
	delete(m, "runtime.queues.queue")
	delete(m, "runtime.queues.cpu")
	return m
}

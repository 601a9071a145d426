package testbed

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// Options size the bed. The zero value is the default bed: one client,
// three primary backends, one failover backend, two balancer queues.
type Options struct {
	// Prefix starts every namespace and interface name: 1-8 lowercase
	// letters or digits, starting with a letter, unique to the test.
	Prefix   string
	Clients  int   // 0: 1
	Backends int   // primaries; 0: 3
	Failover int   // failover backends after the primaries; 0: 1, -1: none
	Queues   int   // rx/tx queues of the balancer's veth pair; 0: 2
	Weights  []int // one per backend, reported by /healthz; nil: no weight header
	// NoServers leaves the backends without xlb-testserver.
	NoServers bool
	// Instances, when 1..8, makes the fleet bed: a router (BIRD) between
	// the clients and that many balancer instances instead of the one
	// balancer. It needs BIRD 2 (bird, birdc).
	Instances int
}

var prefixRE = regexp.MustCompile(`^[a-z][a-z0-9]{0,7}$`)

// withDefaults validates o and fills in its defaults, with the script's limits.
func (o Options) withDefaults() (Options, error) {
	if !prefixRE.MatchString(o.Prefix) {
		return o, fmt.Errorf("testbed: prefix %q: want 1-8 lowercase letters or digits, starting with a letter", o.Prefix)
	}
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&o.Clients, 1)
	def(&o.Backends, 3)
	def(&o.Failover, 1)
	def(&o.Queues, 2)
	if o.Failover == -1 {
		o.Failover = 0
	}
	switch {
	case o.Clients < 1 || o.Clients > 9:
		return o, fmt.Errorf("testbed: %d clients: want 1-9", o.Clients)
	case o.Backends < 1 || o.Failover < 0 || o.Backends+o.Failover > 50:
		return o, fmt.Errorf("testbed: %d+%d backends: want 1-50 in all", o.Backends, o.Failover)
	case o.Queues < 1 || o.Queues > 16:
		return o, fmt.Errorf("testbed: %d queues: want 1-16", o.Queues)
	case o.Instances < 0 || o.Instances > 8:
		return o, fmt.Errorf("testbed: %d instances: want 0 (one balancer) or 1-8 (the fleet bed)", o.Instances)
	case o.Weights != nil && len(o.Weights) != o.Backends+o.Failover:
		return o, fmt.Errorf("testbed: %d weights for %d backends", len(o.Weights), o.Backends+o.Failover)
	}
	for _, w := range o.Weights {
		if w < 0 {
			return o, fmt.Errorf("testbed: negative weight %d", w)
		}
	}
	return o, nil
}

// args are the script's flags for o.
func (o Options) args() []string {
	a := []string{"--prefix", o.Prefix,
		"--clients", strconv.Itoa(o.Clients),
		"--backends", strconv.Itoa(o.Backends),
		"--failover", strconv.Itoa(o.Failover),
		"--queues", strconv.Itoa(o.Queues)}
	if o.Weights != nil {
		w := make([]string, len(o.Weights))
		for i, v := range o.Weights {
			w[i] = strconv.Itoa(v)
		}
		a = append(a, "--weights", strings.Join(w, ","))
	}
	if o.NoServers {
		a = append(a, "--no-servers")
	}
	if o.Instances > 0 {
		a = append(a, "--instances", strconv.Itoa(o.Instances))
	}
	return a
}

// Bed is a running test bed.
type Bed struct {
	Opts Options // with defaults filled in
	// LB is the one balancer; Iface is where xlb attaches. In the fleet
	// bed it is the zero Host, and Instances and Router are set instead.
	LB        Host
	Instances []Host // the fleet bed's balancer instances l1, l2, ...
	Router    Host   // the fleet bed's router, by its segment interface
	Clients   []Host
	Backends  []Backend
	RunDir    string // pid files and server logs

	script string
}

// Up brings a bed up for tb and registers its teardown with tb.Cleanup,
// which runs whether the test passes or fails; leftovers of an earlier run
// with the same prefix are removed first. It fails tb when not root, and
// skips it when the kernel lacks what the bed needs (IPv6, veth, bridge).
func Up(tb testing.TB, opts Options) *Bed {
	tb.Helper()
	b, err := newBed(opts)
	if err != nil {
		tb.Fatal(err)
	}
	if os.Geteuid() != 0 {
		tb.Fatal("testbed: needs root (network namespaces, veth, bridge, sysctls); CI runs as root")
	}
	if _, err := os.Stat("/proc/sys/net/ipv6"); err != nil {
		tb.Skip("testbed: kernel without IPv6 (no /proc/sys/net/ipv6)")
	}
	if b.Opts.Instances > 0 {
		// .ci/run installs bird2; a developer's machine may lack it.
		if _, err := exec.LookPath("bird"); err != nil {
			tb.Fatal("testbed: the fleet bed needs BIRD 2 as its router (bird, birdc; Debian: apt-get install bird2)")
		}
	}
	if err := b.Down(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if tb.Failed() {
			b.logState(tb)
		}
		if err := b.Down(); err != nil {
			tb.Error(err)
		}
	})
	out, err := b.run(append([]string{"up"}, b.Opts.args()...)...)
	if err != nil {
		if missing := kernelLacks(out); missing != "" {
			tb.Skipf("testbed: kernel lacks %s: %s", missing, out)
		}
		tb.Fatal(err)
	}
	return b
}

func newBed(opts Options) (*Bed, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	script, err := scriptPath()
	if err != nil {
		return nil, err
	}
	b := &Bed{Opts: o, RunDir: "/run/xlb-testbed-" + o.Prefix, script: script}
	if o.Instances == 0 {
		b.LB = lbHost(o.Prefix)
	} else {
		b.Router = routerHost(o.Prefix)
		for i := 1; i <= o.Instances; i++ {
			b.Instances = append(b.Instances, instanceHost(o.Prefix, i))
		}
	}
	for i := 1; i <= o.Clients; i++ {
		b.Clients = append(b.Clients, clientHost(o.Prefix, i))
	}
	for i := 1; i <= o.Backends+o.Failover; i++ {
		be := Backend{Host: backendHost(o.Prefix, i), Failover: i > o.Backends, Weight: -1}
		if o.Weights != nil {
			be.Weight = o.Weights[i-1]
		}
		b.Backends = append(b.Backends, be)
	}
	return b, nil
}

// Down removes every namespace and link named with the bed's prefix, the
// servers and the run directory. Doing it twice is fine.
func (b *Bed) Down() error {
	_, err := b.run("down", "--prefix", b.Opts.Prefix)
	return err
}

// Status is the script's status report.
func (b *Bed) Status() (string, error) {
	return b.run("status", "--prefix", b.Opts.Prefix)
}

// BirdC runs birdc against the fleet bed's router (`birdc show route`, ...)
// and returns its output.
func (b *Bed) BirdC(args ...string) (string, error) {
	return Exec(b.Router.NS, append([]string{"birdc", "-s", filepath.Join(b.RunDir, "bird.ctl")}, args...)...)
}

// Backend returns the backend named name (b1, ...), or nil.
func (b *Bed) Backend(name string) *Backend {
	for i := range b.Backends {
		if b.Backends[i].Name == name {
			return &b.Backends[i]
		}
	}
	return nil
}

// ServerPID is the pid of backend name's xlb-testserver, from its pid file.
func (b *Bed) ServerPID(name string) (int, error) {
	raw, err := os.ReadFile(filepath.Join(b.RunDir, name+".pid"))
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(raw)))
}

func (b *Bed) run(args ...string) (string, error) {
	cmd := exec.Command(b.script, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if err != nil {
		return out.String(), fmt.Errorf("testbed.sh %s: %w\n%s", strings.Join(args, " "), err, out.String())
	}
	return out.String(), nil
}

// logState puts the bed's state and server logs in a failed test's log.
func (b *Bed) logState(tb testing.TB) {
	tb.Helper()
	if st, err := b.Status(); err == nil {
		tb.Logf("test bed at failure:\n%s", st)
	}
	logs, _ := filepath.Glob(filepath.Join(b.RunDir, "*.log"))
	for _, l := range logs {
		if raw, err := os.ReadFile(l); err == nil {
			tb.Logf("%s:\n%s", l, raw)
		}
	}
}

// kernelLacks names the kernel feature whose absence the script's output
// shows, or "".
func kernelLacks(out string) string {
	switch {
	case strings.Contains(out, "Unknown device type"):
		return "veth or bridge support"
	case strings.Contains(out, "net.ipv6") && strings.Contains(out, "No such file"):
		return "IPv6"
	}
	return ""
}

// scriptPath finds scripts/testbed.sh from the test's directory upwards,
// so that tests of any package of the module can use the bed.
func scriptPath() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			p := filepath.Join(dir, "scripts", "testbed.sh")
			if _, err := os.Stat(p); err != nil {
				return "", fmt.Errorf("testbed: %w", err)
			}
			return p, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("testbed: no go.mod above the working directory")
		}
		dir = parent
	}
}

// Package topo builds lbbench xdp's namespace topology and removes it again,
// also after a failure or a crashed earlier run:
//
//	namespace P-gen                                namespace P-mid
//	  Pg  10.77.0.1/24  02:77:00:00:00:01  <-veth->  Pm  10.77.0.2/24  02:77:00:00:00:02
//	  Pb1 10.77.0.11/32 02:77:00:00:01:01  (macvlan on Pg, one per backend)
//	  Pb2 10.77.0.12/32 02:77:00:00:01:02
//	  ...
//
// The generator sends from Pg to the VIP 10.79.0.10 via Pm's MAC, from
// client addresses in 10.78.0.0/16 that exist nowhere (frames only). The
// middle hop (xlb or a baseline) is one-armed: it sends each frame back out
// of Pm with a backend's MAC, so it arrives at Pg again, where the sink
// counts it by destination MAC. The backends are macvlans on Pg: real L2
// endpoints with their own MACs and addresses, so the middle hop resolves
// them like any neighbour (permanent entries, written here, spare ARP) and
// its health checks reach the generator namespace's kernel, which answers
// them. Nothing is created outside the two namespaces; every name starts
// with the prefix P.
//
// Both veths run NAPI threaded (one kernel thread per device, named
// "napi/DEV-ID"), so the work the kernel does for each side — the XDP
// program, the copy into an AF_XDP socket, the stack for nftables — is
// charged to a thread of its own that the bench can pin and measure.
package topo

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"xlb/internal/nsx"
)

// Fixed addresses of the topology (private, inside its namespaces only).
var (
	GenIP   = netip.MustParseAddr("10.77.0.1")
	MidIP   = netip.MustParseAddr("10.77.0.2")
	LinkNet = netip.MustParsePrefix("10.77.0.0/24")
	VIP     = netip.MustParseAddr("10.79.0.10")
	Clients = netip.MustParsePrefix("10.78.0.0/16")
	GenMAC  = net.HardwareAddr{0x02, 0x77, 0, 0, 0, 0x01}
	MidMAC  = net.HardwareAddr{0x02, 0x77, 0, 0, 0, 0x02}
)

// MaxBackends bounds Options.Backends (addresses .11 to .74 of LinkNet).
const MaxBackends = 64

// BackendIP and BackendMAC are backend i's (0-based) address and MAC.
func BackendIP(i int) netip.Addr { return netip.AddrFrom4([4]byte{10, 77, 0, byte(11 + i)}) }

// BackendMAC: 02:77:00:00:01:(i+1).
func BackendMAC(i int) net.HardwareAddr {
	return net.HardwareAddr{0x02, 0x77, 0, 0, 0x01, byte(i + 1)}
}

// Options choose the topology's names and size.
type Options struct {
	// Prefix names everything: namespaces P-gen and P-mid, devices Pg,
	// Pm, Pb1... 1-3 lowercase letters or digits, starting with a letter,
	// so that the NAPI threads' names ("napi/Pm-NNNNN") fit 15 bytes.
	Prefix string
	// Backends is the number of backend macvlans, 1..MaxBackends.
	Backends int
}

// Backend is one backend endpoint in the generator namespace.
type Backend struct {
	Name string // b1, b2, ...
	Dev  string // its macvlan
	IP   netip.Addr
	MAC  net.HardwareAddr
}

// Topo is a topology that is up.
type Topo struct {
	Prefix         string
	GenNS, MidNS   string
	GenDev, MidDev string
	Backends       []Backend
	// Threaded says both veths run NAPI in kernel threads; ThreadedErr
	// says why not otherwise (then the kernel's work is done in softirq
	// context on whichever core raised it, and is not measured apart).
	Threaded    bool
	ThreadedErr error

	lock *os.File
}

// failHook, when set (tests), fails Up half-way, after the veth exists.
var failHook func() error

var prefixRE = regexp.MustCompile(`^[a-z][a-z0-9]{0,2}$`)

func (o Options) validate() error {
	if !prefixRE.MatchString(o.Prefix) {
		return fmt.Errorf("topo: prefix %q: want 1-3 lowercase letters or digits, starting with a letter", o.Prefix)
	}
	if o.Backends < 1 || o.Backends > MaxBackends {
		return fmt.Errorf("topo: %d backends: want 1..%d", o.Backends, MaxBackends)
	}
	return nil
}

func names(prefix string) (genNS, midNS, genDev, midDev string) {
	return prefix + "-gen", prefix + "-mid", prefix + "g", prefix + "m"
}

// lockPath is the file whose flock says a run with this prefix is alive.
func lockPath(prefix string) string { return "/run/lbbench-xdp-" + prefix + ".lock" }

// Up creates the topology. A run with the same prefix still alive is
// refused; what a dead one left behind is removed first. On error nothing
// is left.
func Up(o Options) (*Topo, error) {
	if err := o.validate(); err != nil {
		return nil, err
	}
	if os.Geteuid() != 0 {
		return nil, errors.New("topo: needs root (network namespaces, veth, XDP)")
	}
	if _, err := run("ip", "-V"); err != nil {
		return nil, fmt.Errorf("topo: needs iproute2 (ip): %w", err)
	}
	lock, err := os.OpenFile(lockPath(o.Prefix), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("topo: %w", err)
	}
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		lock.Close()
		return nil, fmt.Errorf("topo: another lbbench xdp with prefix %q is running (%s is locked); use another --prefix", o.Prefix, lockPath(o.Prefix))
	}
	_ = lock.Truncate(0)
	_, _ = lock.WriteString(strconv.Itoa(os.Getpid()) + "\n")
	t := &Topo{Prefix: o.Prefix, lock: lock}
	t.GenNS, t.MidNS, t.GenDev, t.MidDev = names(o.Prefix)
	if err := Sweep(o.Prefix); err != nil {
		t.unlock()
		return nil, err
	}
	if err := t.build(o); err != nil {
		return nil, errors.Join(err, t.Down())
	}
	return t, nil
}

func (t *Topo) build(o Options) error {
	for _, ns := range []string{t.GenNS, t.MidNS} {
		if _, err := run("ip", "netns", "add", ns); err != nil {
			return err
		}
		// Before any link exists, so that "default" covers them. No
		// IPv6: its autoconfiguration chatter would cross the middle hop.
		if err := sysctl(ns,
			"net.ipv6.conf.all.disable_ipv6=1", "net.ipv6.conf.default.disable_ipv6=1",
			"net.ipv4.conf.all.rp_filter=0", "net.ipv4.conf.default.rp_filter=0"); err != nil {
			return err
		}
		if _, err := run("ip", "-n", ns, "link", "set", "lo", "up"); err != nil {
			return err
		}
	}
	// The middle hop forwards nothing by itself and never redirects:
	// a forwarder that needs the kernel to forward turns it on.
	if err := sysctl(t.MidNS, "net.ipv4.ip_forward=0",
		"net.ipv4.conf.all.send_redirects=0", "net.ipv4.conf.default.send_redirects=0"); err != nil {
		return err
	}
	// Pg answers ARP only for its own address, not the backends'.
	if err := sysctl(t.GenNS, "net.ipv4.conf.all.arp_ignore=1", "net.ipv4.conf.all.arp_announce=2"); err != nil {
		return err
	}
	if _, err := run("ip", "link", "add", t.GenDev, "netns", t.GenNS, "address", GenMAC.String(),
		"numtxqueues", "1", "numrxqueues", "1", "type", "veth",
		"peer", "name", t.MidDev, "netns", t.MidNS, "address", MidMAC.String(),
		"numtxqueues", "1", "numrxqueues", "1"); err != nil {
		return err
	}
	if failHook != nil {
		if err := failHook(); err != nil {
			return err
		}
	}
	for _, side := range []struct{ ns, dev string }{{t.GenNS, t.GenDev}, {t.MidNS, t.MidDev}} {
		if err := nsx.Do(side.ns, func() error { return prepareVeth(side.dev) }); err != nil {
			return err
		}
	}
	cmds := [][]string{
		{"-n", t.GenNS, "addr", "add", GenIP.String() + "/24", "dev", t.GenDev},
		{"-n", t.MidNS, "addr", "add", MidIP.String() + "/24", "dev", t.MidDev},
		{"-n", t.GenNS, "link", "set", t.GenDev, "up"},
		{"-n", t.MidNS, "link", "set", t.MidDev, "up"},
		{"-n", t.GenNS, "neigh", "replace", MidIP.String(), "dev", t.GenDev, "lladdr", MidMAC.String(), "nud", "permanent"},
		// Without a forwarder, VIP traffic dies quietly in the middle.
		{"-n", t.MidNS, "route", "add", "blackhole", VIP.String() + "/32"},
	}
	for i := range o.Backends {
		b := Backend{Name: fmt.Sprintf("b%d", i+1), Dev: fmt.Sprintf("%sb%d", t.Prefix, i+1), IP: BackendIP(i), MAC: BackendMAC(i)}
		t.Backends = append(t.Backends, b)
		cmds = append(cmds,
			[]string{"-n", t.GenNS, "link", "add", b.Dev, "link", t.GenDev, "address", b.MAC.String(), "type", "macvlan", "mode", "private"},
			[]string{"-n", t.GenNS, "addr", "add", b.IP.String() + "/32", "dev", b.Dev},
			[]string{"-n", t.GenNS, "link", "set", b.Dev, "up"},
			[]string{"-n", t.MidNS, "neigh", "replace", b.IP.String(), "dev", t.MidDev, "lladdr", b.MAC.String(), "nud", "permanent"},
		)
	}
	for _, c := range cmds {
		if _, err := run("ip", c...); err != nil {
			return err
		}
	}
	t.ThreadedErr = errors.Join(SetThreaded(t.GenNS, t.GenDev, true), SetThreaded(t.MidNS, t.MidDev, true))
	t.Threaded = t.ThreadedErr == nil
	return nil
}

// SetThreaded switches dev's NAPI to a kernel thread (Linux >= 5.12), or
// back to softirq context, where a NAPI poll runs on the CPU that
// scheduled it (for a veth: the CPU that sent to it). A thread made anew
// has the default affinity and priority.
func SetThreaded(ns, dev string, on bool) error {
	v := "0"
	if on {
		v = "1"
	}
	if _, err := Exec(ns, "sh", "-c", "echo "+v+" > /sys/class/net/"+dev+"/threaded"); err != nil {
		return fmt.Errorf("threaded NAPI %s on %s: %w", v, dev, err)
	}
	return nil
}

func sysctl(ns string, kv ...string) error {
	_, err := run("ip", append([]string{"netns", "exec", ns, "sysctl", "-qw"}, kv...)...)
	return err
}

// NAPIThreads returns the pids of dev's NAPI kernel threads.
func NAPIThreads(dev string) []int {
	want := "napi/" + dev + "-"
	var pids []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		comm, err := os.ReadFile(filepath.Join("/proc", e.Name(), "comm"))
		if err == nil && strings.HasPrefix(string(comm), want) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// Down stops whatever still runs in the namespaces, removes them and
// releases the prefix. It is safe to call twice.
func (t *Topo) Down() error {
	if t.lock == nil {
		return nil
	}
	err := Sweep(t.Prefix)
	t.unlock()
	return err
}

func (t *Topo) unlock() {
	if t.lock != nil {
		os.Remove(lockPath(t.Prefix))
		t.lock.Close()
		t.lock = nil
	}
}

// Sweep removes everything a topology with this prefix may have left: the
// processes in its namespaces (TERM, then KILL), the namespaces, and any
// link named after the prefix in the caller's namespace. Only for a prefix
// no live run holds (Up checks).
func Sweep(prefix string) error {
	genNS, midNS, genDev, midDev := names(prefix)
	var errs []error
	for _, ns := range []string{genNS, midNS} {
		if _, err := os.Stat("/run/netns/" + ns); err != nil {
			continue
		}
		stopAll(nsPids(ns))
		if _, err := run("ip", "netns", "del", ns); err != nil {
			errs = append(errs, err)
		}
	}
	for _, dev := range []string{genDev, midDev} {
		if _, err := net.InterfaceByName(dev); err == nil {
			if _, err := run("ip", "link", "del", dev); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

func nsPids(ns string) []int {
	out, _ := run("ip", "netns", "pids", ns)
	var pids []int
	for _, f := range strings.Fields(out) {
		if pid, err := strconv.Atoi(f); err == nil && pid != os.Getpid() {
			pids = append(pids, pid)
		}
	}
	return pids
}

// stopAll sends TERM, waits up to 2 s, then KILLs what is left.
func stopAll(pids []int) {
	if len(pids) == 0 {
		return
	}
	for _, p := range pids {
		_ = syscall.Kill(p, syscall.SIGTERM)
	}
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) {
		alive := 0
		for _, p := range pids {
			if Alive(p) {
				alive++
			}
		}
		if alive == 0 {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, p := range pids {
		_ = syscall.Kill(p, syscall.SIGKILL)
	}
}

// Alive reports whether pid runs and is not a zombie.
func Alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && i+2 < len(s) && s[i+2] != 'Z'
}

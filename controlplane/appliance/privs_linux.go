package appliance

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"unsafe"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// Capabilities the appliance needs (linux/capability.h numbers).
const (
	capNetAdmin = 12 // attach XDP, netlink neighbour requests
	capNetRaw   = 13 // create AF_XDP sockets
	capSysAdmin = 21 // BPF before CAP_BPF existed
	capBPF      = 39 // load the program, create its maps
)

var capNames = map[int]string{capNetAdmin: "CAP_NET_ADMIN", capNetRaw: "CAP_NET_RAW", capBPF: "CAP_BPF"}

// privilegesHint says what the appliance needs when it lacks it; `xlb run`
// prints it after its own name.
const privilegesHint = "needs root (or CAP_NET_ADMIN, CAP_NET_RAW and CAP_BPF) to attach XDP and open AF_XDP sockets"

// checkPrivileges fails with one line when the process cannot attach XDP
// and open AF_XDP sockets: not root and without the capabilities, or root
// with them dropped (a restricted container).
func checkPrivileges() error {
	eff, err := effectiveCaps()
	if err != nil {
		// Without /proc the kernel is asked anyway; EPERM is mapped then.
		if os.Geteuid() != 0 {
			return fmt.Errorf("%s; running as uid %d", privilegesHint, os.Geteuid())
		}
		return nil
	}
	var missing []string
	for _, c := range []int{capNetAdmin, capNetRaw, capBPF} {
		if eff&(1<<c) == 0 && !(c == capBPF && eff&(1<<capSysAdmin) != 0) {
			missing = append(missing, capNames[c])
		}
	}
	if len(missing) == 0 {
		return nil
	}
	if os.Geteuid() != 0 {
		return fmt.Errorf("%s; running as uid %d", privilegesHint, os.Geteuid())
	}
	return fmt.Errorf("%s; running as root without %s", privilegesHint, strings.Join(missing, ", "))
}

// effectiveCaps reads CapEff from /proc/self/status.
func effectiveCaps() (uint64, error) {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "CapEff:"); ok {
			return strconv.ParseUint(strings.TrimSpace(v), 16, 64)
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, errors.New("no CapEff in /proc/self/status")
}

// privErr is the one line for err from step; a refusal (EPERM) becomes the
// privileges hint, so a missing capability the check above did not foresee
// (an LSM, a seccomp filter) still reads as what it is.
func privErr(step string, err error) error {
	if errors.Is(err, unix.EPERM) {
		return fmt.Errorf("%s: operation not permitted: %s", step, privilegesHint)
	}
	return fmt.Errorf("%s: %s", step, oneLine(err))
}

// oneLine joins the lines of an error (errors.Join makes several) so that
// it prints as the one line an operator reads.
func oneLine(err error) string {
	return strings.ReplaceAll(err.Error(), "\n", "; ")
}

// keptCaps are the capabilities the appliance still uses once it runs,
// and why; every other one is dropped from the effective, permitted,
// inheritable, ambient and bounding sets after start (dropPrivileges).
// What needed the others is done by then: the program loaded and attached
// and its maps made (CAP_BPF, CAP_SYS_ADMIN, CAP_NET_ADMIN), the AF_XDP
// sockets opened (CAP_NET_RAW), the tracking table locked in memory
// (CAP_IPC_LOCK), the listeners bound. A reload updates the VIP map through
// the descriptor already open, which asks for no capability.
var keptCaps = []struct {
	cap int
	why string
}{
	// The neighbour resolver asks the kernel to resolve a backend's MAC
	// with RTM_NEWNEIGH (NTF_USE), at start, on a reload that adds
	// backends and whenever an entry goes stale: rtnetlink refuses it
	// without CAP_NET_ADMIN.
	{capNetAdmin, "CAP_NET_ADMIN: neighbour resolution (RTM_NEWNEIGH) at start, on reload and when entries go stale"},
}

// errCgo: the capabilities of a binary linked with cgo (a -race build)
// cannot be changed on every thread at once.
var errCgo = errors.New("this binary is linked with cgo (a -race build?): the runtime cannot change every thread's capabilities; build with CGO_ENABLED=0")

// dropCaps keeps the capabilities in keep, on every thread of the
// process (capabilities are per thread), and drops all others from the
// bounding set (so that nothing this process execs regains them), the
// ambient and inheritable sets and the permitted and effective ones. The
// bounding set needs CAP_SETPCAP, which a process started with only the
// capabilities it needs lacks: then boundingKept is true and the rest is
// still done.
func dropCaps(keep []int) (boundingKept bool, err error) {
	var mask uint64
	for _, c := range keep {
		mask |= 1 << c
	}
	last := lastCap()
	// A harmless call first: whether the runtime can run a syscall on
	// every thread at all.
	if _, _, e := syscall.AllThreadsSyscall(unix.SYS_PRCTL, unix.PR_CAPBSET_READ, 0, 0); e == syscall.ENOTSUP {
		return false, errCgo
	}
	for c := 0; c <= last; c++ {
		if mask&(1<<c) != 0 {
			continue
		}
		if _, _, e := syscall.AllThreadsSyscall(unix.SYS_PRCTL, unix.PR_CAPBSET_DROP, uintptr(c), 0); e == syscall.EPERM {
			boundingKept = true
			break
		} else if e != 0 {
			return false, fmt.Errorf("dropping capability %d from the bounding set: %w", c, e)
		}
	}
	if _, _, e := syscall.AllThreadsSyscall(unix.SYS_PRCTL, unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0); e != 0 && e != syscall.EINVAL {
		return boundingKept, fmt.Errorf("clearing the ambient capabilities: %w", e)
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	data := [2]unix.CapUserData{
		{Effective: uint32(mask), Permitted: uint32(mask)},
		{Effective: uint32(mask >> 32), Permitted: uint32(mask >> 32)},
	}
	_, _, e := syscall.AllThreadsSyscall(unix.SYS_CAPSET, uintptr(unsafe.Pointer(&hdr)), uintptr(unsafe.Pointer(&data[0])), 0)
	runtime.KeepAlive(&hdr)
	runtime.KeepAlive(&data)
	if e != 0 {
		return boundingKept, fmt.Errorf("capset: %w", e)
	}
	return boundingKept, nil
}

// lastCap is the highest capability number this kernel knows.
func lastCap() int {
	b, err := os.ReadFile("/proc/sys/kernel/cap_last_cap")
	if err == nil {
		if n, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && n >= 0 && n < 64 {
			return n
		}
	}
	return 40 // CAP_CHECKPOINT_RESTORE, the last one of Linux 5.9..6.x
}

// dropPrivileges is the last start step: only keptCaps remain. A binary
// that cannot (linked with cgo) keeps its capabilities, with a warning.
func (s *stack) dropPrivileges() error {
	keep := make([]int, len(keptCaps))
	why := make([]string, len(keptCaps))
	for i, k := range keptCaps {
		keep[i], why[i] = k.cap, k.why
	}
	boundingKept, err := dropCaps(keep)
	if errors.Is(err, errCgo) {
		s.log.Warn("capabilities not dropped", zap.Error(err))
		return nil
	}
	if err != nil {
		return fmt.Errorf("dropping capabilities: %w", err)
	}
	s.log.Info("capabilities dropped", zap.Strings("kept", why), zap.Bool("bounding_set_kept", boundingKept))
	return nil
}

// raiseNofile raises the soft limit of open descriptors to the hard one
// (Go's runtime does so at start too; this says so and returns it).
func raiseNofile() uint64 {
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		return 1024
	}
	if lim.Cur < lim.Max {
		raised := lim
		raised.Cur = raised.Max
		if unix.Setrlimit(unix.RLIMIT_NOFILE, &raised) == nil {
			lim = raised
		}
	}
	return lim.Cur
}

package appliance

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"unsafe"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"
	"kernel.org/pub/linux/libs/security/libcap/psx"
)

// Capabilities the appliance needs (linux/capability.h numbers).
const (
	capSetGID   = 6  // switch to dataplane.user's group
	capSetUID   = 7  // and to its uid
	capNetAdmin = 12 // attach XDP, netlink neighbour requests
	capNetRaw   = 13 // create AF_XDP sockets
	capSysAdmin = 21 // BPF before CAP_BPF and CAP_PERFMON existed
	capPerfmon  = 38 // the verifier's pointer arithmetic on packet data
	capBPF      = 39 // load the program, create its maps
)

var capNames = map[int]string{capNetAdmin: "CAP_NET_ADMIN", capNetRaw: "CAP_NET_RAW", capSysAdmin: "CAP_SYS_ADMIN", capPerfmon: "CAP_PERFMON", capBPF: "CAP_BPF"}

// privilegesHint says what the appliance needs when it lacks it; `xlb run`
// prints it after its own name.
const privilegesHint = "needs root (or CAP_NET_ADMIN, CAP_NET_RAW, CAP_BPF and CAP_PERFMON) to attach XDP and open AF_XDP sockets"

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
	for _, c := range []int{capNetAdmin, capNetRaw, capBPF, capPerfmon} {
		if eff&(1<<c) == 0 && !((c == capBPF || c == capPerfmon) && eff&(1<<capSysAdmin) != 0) {
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

// checkSwitch fails with one line when the process cannot become id
// (dataplane.user), or was told to keep its privileges as well.
func checkSwitch(id Identity, keep bool) error {
	if !id.switches() {
		return nil
	}
	if keep {
		return fmt.Errorf("dataplane.user %q gives up what --keep-privileges keeps: use one or the other", id.Cfg)
	}
	eff, err := effectiveCaps()
	if err != nil || eff&(1<<capSetUID) == 0 || eff&(1<<capSetGID) == 0 {
		return fmt.Errorf("dataplane.user %q (uid %d): switching to it needs root (CAP_SETUID and CAP_SETGID); running as uid %d", id.Cfg, id.UID, os.Geteuid())
	}
	return nil
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
// (CAP_IPC_LOCK), the listeners bound. The maps are used through the
// descriptors already open (a reload's VIPs, the counters /metrics
// reads), which needs no capability where the kernel checks them at
// creation only (Linux 6.5 on); bpfCaps finds out.
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

// allThreads runs a system call on every thread of the process, as
// capabilities, uids and prctl flags are per thread: without cgo through
// the runtime (syscall.AllThreadsSyscall), with cgo through psx's signal
// to each thread (the runtime refuses AllThreadsSyscall there). Both run
// it on the calling thread first and return its error without going on;
// a thread whose result differs ends the process. Arguments past the
// third are zero, as prctl wants them (psx's three-argument call leaves
// them unset).
func allThreads(trap, a1, a2, a3 uintptr) (r1, r2 uintptr, err unix.Errno) {
	return psx.Syscall6(trap, a1, a2, a3, 0, 0, 0)
}

// target is what dropPrivs leaves every thread with.
type target struct {
	keep uint64 // capability mask: effective and permitted
	// id is the user to switch to, nil to stay who started the process.
	id *Identity
}

// dropPrivs drops every capability but t.keep on every thread: from the
// bounding set (so that nothing this process execs regains them), the
// ambient and inheritable sets and the permitted and effective ones; then
// no_new_privs. With t.id, it first switches every thread to that uid and
// group with no supplementary group, keeping the capabilities across the
// switch (PR_SET_KEEPCAPS), so that what root owns is out of reach (the
// switch also makes the process undumpable: no core file, no ptrace by
// that user; it still reads its own /proc files, as /metrics does). The
// bounding set needs
// CAP_SETPCAP, which a process started with only the capabilities it
// needs lacks: then boundingKept is true and the rest is still done.
func dropPrivs(t target) (boundingKept bool, err error) {
	last := lastCap()
	for c := 0; c <= last; c++ {
		if t.keep&(1<<c) != 0 {
			continue
		}
		if _, _, e := allThreads(unix.SYS_PRCTL, unix.PR_CAPBSET_DROP, uintptr(c), 0); e == unix.EPERM {
			boundingKept = true
			break
		} else if e != 0 {
			return false, fmt.Errorf("dropping capability %d from the bounding set: %w", c, e)
		}
	}
	if _, _, e := allThreads(unix.SYS_PRCTL, unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0); e != 0 && e != unix.EINVAL {
		return boundingKept, fmt.Errorf("clearing the ambient capabilities: %w", e)
	}
	if id := t.id; id != nil {
		if err := switchUser(id.UID, id.GID); err != nil {
			return boundingKept, err
		}
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	data := [2]unix.CapUserData{
		{Effective: uint32(t.keep), Permitted: uint32(t.keep)},
		{Effective: uint32(t.keep >> 32), Permitted: uint32(t.keep >> 32)},
	}
	_, _, e := allThreads(unix.SYS_CAPSET, uintptr(unsafe.Pointer(&hdr)), uintptr(unsafe.Pointer(&data[0])), 0)
	runtime.KeepAlive(&hdr)
	runtime.KeepAlive(&data)
	if e != 0 {
		return boundingKept, fmt.Errorf("capset: %w", e)
	}
	if _, _, e := allThreads(unix.SYS_PRCTL, unix.PR_SET_NO_NEW_PRIVS, 1, 0); e != 0 {
		return boundingKept, fmt.Errorf("no_new_privs: %w", e)
	}
	return boundingKept, verifyThreads(t, !boundingKept)
}

// switchUser sets every thread's uids to uid and gids to gid, with no
// supplementary group, its permitted capabilities kept (the effective
// ones the kernel clears: capset sets them again).
func switchUser(uid, gid int) error {
	if _, _, e := allThreads(unix.SYS_PRCTL, unix.PR_SET_KEEPCAPS, 1, 0); e != 0 {
		return fmt.Errorf("keeping capabilities across the switch to uid %d: %w", uid, e)
	}
	if _, _, e := allThreads(unix.SYS_SETGROUPS, 0, 0, 0); e != 0 {
		return fmt.Errorf("dropping the supplementary groups: %w", e)
	}
	if _, _, e := allThreads(unix.SYS_SETRESGID, uintptr(gid), uintptr(gid), uintptr(gid)); e != 0 {
		return fmt.Errorf("switching to gid %d: %w", gid, e)
	}
	if _, _, e := allThreads(unix.SYS_SETRESUID, uintptr(uid), uintptr(uid), uintptr(uid)); e != 0 {
		return fmt.Errorf("switching to uid %d: %w", uid, e)
	}
	if _, _, e := allThreads(unix.SYS_PRCTL, unix.PR_SET_KEEPCAPS, 0, 0); e != 0 {
		return fmt.Errorf("PR_SET_KEEPCAPS: %w", e)
	}
	return nil
}

// verifyThreads reads every thread's credentials back from
// /proc/self/task: a thread the broadcast missed would keep what the
// others dropped, and nothing else would say so.
func verifyThreads(t target, bounding bool) error {
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return fmt.Errorf("listing the threads to check them: %w", err)
	}
	for _, task := range tasks {
		st, err := readCreds("/proc/self/task/" + task.Name() + "/status")
		if os.IsNotExist(err) {
			continue // it ended meanwhile
		}
		if err != nil {
			return err
		}
		if bad := st.differs(t, bounding); bad != "" {
			return fmt.Errorf("thread %s still has %s", task.Name(), bad)
		}
	}
	return nil
}

// creds are the lines of a /proc status file that say what a thread may.
type creds struct {
	caps       map[string]uint64 // CapEff, CapPrm, CapInh, CapBnd, CapAmb
	uids, gids []int             // real, effective, saved, file system
	groups     int
	noNewPrivs bool
}

func readCreds(path string) (creds, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return creds{}, err
	}
	c := creds{caps: map[string]uint64{}}
	for l := range strings.Lines(string(b)) {
		k, v, ok := strings.Cut(strings.TrimSpace(l), ":")
		if !ok {
			continue
		}
		f := strings.Fields(v)
		switch {
		case strings.HasPrefix(k, "Cap") && len(f) == 1:
			n, err := strconv.ParseUint(f[0], 16, 64)
			if err != nil {
				return c, fmt.Errorf("%s: %s: %w", path, l, err)
			}
			c.caps[k] = n
		case k == "Uid" || k == "Gid":
			ids := make([]int, len(f))
			for i, s := range f {
				if ids[i], err = strconv.Atoi(s); err != nil {
					return c, fmt.Errorf("%s: %s: %w", path, l, err)
				}
			}
			if k == "Uid" {
				c.uids = ids
			} else {
				c.gids = ids
			}
		case k == "Groups":
			c.groups = len(f)
		case k == "NoNewPrivs":
			c.noNewPrivs = len(f) == 1 && f[0] == "1"
		}
	}
	return c, nil
}

// differs names what c has beyond t ("" when nothing); bounding: the
// bounding set was dropped too.
func (c creds) differs(t target, bounding bool) string {
	for _, k := range []string{"CapEff", "CapPrm"} {
		if c.caps[k] != t.keep {
			return fmt.Sprintf("%s %016x, want %016x", k, c.caps[k], t.keep)
		}
	}
	for _, k := range []string{"CapInh", "CapAmb"} {
		if c.caps[k] != 0 {
			return fmt.Sprintf("%s %016x", k, c.caps[k])
		}
	}
	if bounding && c.caps["CapBnd"] != t.keep {
		return fmt.Sprintf("CapBnd %016x, want %016x", c.caps["CapBnd"], t.keep)
	}
	if !c.noNewPrivs {
		return "no_new_privs unset"
	}
	if t.id == nil {
		return ""
	}
	for _, u := range c.uids {
		if u != t.id.UID {
			return fmt.Sprintf("uids %v, want %d", c.uids, t.id.UID)
		}
	}
	for _, g := range c.gids {
		if g != t.id.GID {
			return fmt.Sprintf("gids %v, want %d", c.gids, t.id.GID)
		}
	}
	if len(c.uids) != 4 || len(c.gids) != 4 {
		return fmt.Sprintf("uids %v, gids %v unreadable", c.uids, c.gids)
	}
	if c.groups != 0 {
		return fmt.Sprintf("%d supplementary groups", c.groups)
	}
	return ""
}

// bpfCaps is what, beyond keep, the maps need to be used through their
// descriptors after start: nothing from Linux 6.5 on; before, with
// kernel.unprivileged_bpf_disabled set (the distributions' default), the
// bpf() system call refuses every command without CAP_BPF (CAP_SYS_ADMIN
// where the kernel has no CAP_BPF). Measured: a lookup on m from a thread
// locked for it, with only keep effective, and its effective set restored
// after. Restored, not left to die with the thread: a locked thread the
// runtime cannot end (the main one) would stay, differing from the
// others, and the drop on every thread that follows ends a process whose
// threads answer differently.
func bpfCaps(m interface{ Lookup(key, value any) error }, keep uint64) (uint64, error) {
	type result struct {
		need uint64
		err  error
	}
	done := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
		var orig [2]unix.CapUserData
		if err := unix.Capget(&hdr, &orig[0]); err != nil {
			runtime.UnlockOSThread()
			done <- result{err: fmt.Errorf("capget: %w", err)}
			return
		}
		// Lowered only: a process without some of keep measures with
		// what it has.
		low := orig
		low[0].Effective &= uint32(keep)
		low[1].Effective &= uint32(keep >> 32)
		if err := unix.Capset(&hdr, &low[0]); err != nil {
			runtime.UnlockOSThread()
			done <- result{err: fmt.Errorf("capset on the measuring thread: %w", err)}
			return
		}
		var key [16]byte
		var val uint8
		lookupErr := m.Lookup(key, &val)
		// The permitted set is untouched: the effective one may come back.
		if err := unix.Capset(&hdr, &orig[0]); err != nil {
			// Still locked: the thread ends with the goroutine, or stays
			// out of use.
			done <- result{err: fmt.Errorf("restoring the measuring thread's capabilities: %w", err)}
			return
		}
		runtime.UnlockOSThread()
		switch {
		case errors.Is(lookupErr, unix.EPERM) && lastCap() >= capBPF:
			done <- result{need: 1 << capBPF}
		case errors.Is(lookupErr, unix.EPERM):
			done <- result{need: 1 << capSysAdmin}
		default:
			done <- result{} // found or not: it was allowed
		}
	}()
	r := <-done
	return r.need, r.err
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

// errKeep ends a start whose privileges could not be dropped.
const errKeep = "refusing to run with them (xlb run --keep-privileges runs anyway)"

// afterDrop, when set (by a test build), runs once privileges are dropped.
var afterDrop func(*zap.Logger)

// dropPrivileges is the last start step: only keptCaps (and what the
// maps need on this kernel) remain, on every thread, as dataplane.user
// when set. What cannot be dropped stops the start, unless
// --keep-privileges said to keep everything.
func (s *stack) dropPrivileges() error {
	d := dropper{log: s.log, keep: s.a.keepPrivileges, id: s.id, cfgPath: s.cfg.Path,
		vips: s.objs.VIPs, drop: dropPrivs}
	if s.cfg.FlowSync != nil {
		d.keyFile = s.cfg.FlowSync.KeyFile
	}
	return d.run()
}

// dropper is dropPrivileges without the stack: what it reads and the
// drop itself (dropPrivs, which a test replaces).
type dropper struct {
	log     *zap.Logger
	keep    bool // --keep-privileges
	id      Identity
	cfgPath string
	keyFile string // flow_sync.key_file: a reload reads it too ("": none)
	vips    interface{ Lookup(key, value any) error }
	drop    func(target) (boundingKept bool, err error)
}

func (d dropper) run() error {
	if d.keep {
		d.log.Warn("capabilities kept (--keep-privileges): xlb runs with every capability it was started with")
		return nil
	}
	var t target
	why := make([]string, 0, len(keptCaps)+1)
	for _, k := range keptCaps {
		t.keep |= 1 << k.cap
		why = append(why, k.why)
	}
	need, err := bpfCaps(d.vips, t.keep)
	if err != nil {
		return fmt.Errorf("dropping capabilities: measuring what the BPF maps need: %w; %s", err, errKeep)
	}
	if need != 0 {
		t.keep |= need
		why = append(why, fmt.Sprintf("%s: this kernel checks it on every use of a BPF map (before Linux 6.5, with kernel.unprivileged_bpf_disabled)", capName(need)))
	}
	if d.id.switches() {
		t.id = &d.id
	}
	boundingKept, err := d.drop(t)
	if err != nil {
		return fmt.Errorf("dropping capabilities: %w; %s", err, errKeep)
	}
	d.log.Info("capabilities dropped", zap.Strings("kept", why), zap.Bool("bounding_set_kept", boundingKept),
		zap.Int("uid", os.Getuid()), zap.Int("gid", os.Getgid()), zap.String("user", d.id.Name))
	if afterDrop != nil {
		afterDrop(d.log)
	}
	// A reload reads the file again (and the key file it names), as
	// this user without root's rights over files: one it cannot read
	// would fail every reload.
	for _, path := range []string{d.cfgPath, d.keyFile} {
		if path == "" {
			continue
		}
		f, err := os.Open(path)
		if err != nil {
			return fmt.Errorf("%s after dropping privileges (uid %d): a reload could not read it; make it readable by that user", oneLine(err), os.Getuid())
		}
		f.Close()
	}
	return nil
}

// capName names the one capability in mask.
func capName(mask uint64) string {
	for c := 0; c < 64; c++ {
		if mask == 1<<c {
			if n, ok := capNames[c]; ok {
				return n
			}
			return fmt.Sprintf("capability %d", c)
		}
	}
	return fmt.Sprintf("capabilities %016x", mask)
}

// switches says the process must change user: dataplane.user names
// another than the one it runs as.
func (id Identity) switches() bool {
	return id.Configured && (id.UID != os.Geteuid() || id.GID != os.Getegid() || os.Getuid() != id.UID)
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

package appliance

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

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

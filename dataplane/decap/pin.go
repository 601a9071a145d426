package decap

import (
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
)

// DefaultPinRoot is where `xlb decap` pins by default: the usual bpffs
// mount.
const DefaultPinRoot = "/sys/fs/bpf"

// Files of a pin directory.
const (
	pinLink     = "link"
	pinLocal    = "local"
	pinAllow    = "allow"
	pinVIPs     = "vips"
	pinCounters = "stats"
)

// Mode is how the program is attached to an interface.
type Mode string

// Attach modes.
const (
	ModeAuto    Mode = "auto"    // native, else generic
	ModeNative  Mode = "native"  // in the driver
	ModeGeneric Mode = "generic" // after the skb is built; any driver
	ModeKept    Mode = "kept"    // Pin replaced the program of a pinned link, whose mode stays
)

// ErrNotPinned is wrapped by Unpin and ReadPinned when the interface has
// no pinned decap program.
var ErrNotPinned = errors.New("decap: not attached")

// PinDir is the directory under root that holds the pins of ifname:
// root/xlb-decap-IFNAME.
func PinDir(root, ifname string) string {
	return filepath.Join(root, "xlb-decap-"+ifname)
}

// Pin attaches o's program to ifindex (of the calling thread's network
// namespace) with a BPF link pinned at dir/link, and pins the maps at
// dir/local, dir/allow, dir/vips and dir/stats, so that it all outlives
// the process. When dir
// already holds a link to the same interface, the link's program is
// replaced in place (no frame misses decapsulation; the counters restart
// with the new maps) and the mode returned is ModeKept. root, dir's
// parent, must be a bpffs.
func Pin(dir string, o *Objects, ifindex int, mode Mode) (Mode, error) {
	if o.Program == nil {
		return "", ErrClosed
	}
	if ifindex <= 0 {
		return "", fmt.Errorf("decap: attaching: bad ifindex %d", ifindex)
	}
	if err := requireBPFFS(filepath.Dir(dir)); err != nil {
		return "", err
	}
	created := true
	if err := os.Mkdir(dir, 0o700); errors.Is(err, fs.ErrExist) {
		created = false
	} else if err != nil {
		return "", fmt.Errorf("decap: %w", err)
	}
	used, err := pinLinkTo(dir, o.Program, ifindex, mode)
	if err != nil {
		if created {
			_ = os.Remove(dir) // nothing attached: leave nothing behind
		}
		return "", err
	}
	for _, p := range []struct {
		name string
		m    *ebpf.Map
	}{{pinLocal, o.Local}, {pinAllow, o.Allow}, {pinVIPs, o.VIPs}, {pinCounters, o.Counters}} {
		path := filepath.Join(dir, p.name)
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return "", fmt.Errorf("decap: replacing %s: %w", path, err)
		}
		if err := p.m.Pin(path); err != nil {
			return "", fmt.Errorf("decap: pinning %s: %w", path, err)
		}
	}
	return used, nil
}

// pinLinkTo updates the link pinned in dir when it is attached to ifindex,
// else attaches a new one there.
func pinLinkTo(dir string, prog *ebpf.Program, ifindex int, mode Mode) (Mode, error) {
	path := filepath.Join(dir, pinLink)
	if old, err := link.LoadPinnedLink(path, nil); err == nil {
		same := false
		if info, err := old.Info(); err == nil && info.XDP() != nil {
			same = int(info.XDP().Ifindex) == ifindex
		}
		if same && old.Update(prog) == nil {
			return ModeKept, old.Close()
		}
		// A link left from a vanished interface, or another one's: gone.
		err := errors.Join(old.Unpin(), old.Close())
		if err != nil {
			return "", fmt.Errorf("decap: removing stale link %s: %w", path, err)
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("decap: reading %s: %w", path, err)
	}
	l, used, err := attach(prog, ifindex, mode)
	if err != nil {
		return "", err
	}
	defer l.Close() // the pin keeps it
	if err := l.Pin(path); err != nil {
		return "", fmt.Errorf("decap: pinning %s: %w", path, err)
	}
	return used, nil
}

func attach(prog *ebpf.Program, ifindex int, mode Mode) (link.Link, Mode, error) {
	one := func(m Mode, flags link.XDPAttachFlags) (link.Link, Mode, error) {
		l, err := link.AttachXDP(link.XDPOptions{Program: prog, Interface: ifindex, Flags: flags})
		if err != nil {
			return nil, "", fmt.Errorf("decap: attaching to ifindex %d in %s mode: %w", ifindex, m, err)
		}
		return l, m, nil
	}
	switch mode {
	case ModeNative:
		return one(ModeNative, link.XDPDriverMode)
	case ModeGeneric:
		return one(ModeGeneric, link.XDPGenericMode)
	case ModeAuto, "":
		l, m, errNative := one(ModeNative, link.XDPDriverMode)
		if errNative == nil {
			return l, m, nil
		}
		l, m, errGeneric := one(ModeGeneric, link.XDPGenericMode)
		if errGeneric == nil {
			return l, m, nil
		}
		return nil, "", errors.Join(errNative, errGeneric)
	}
	return nil, "", fmt.Errorf("decap: unknown XDP mode %q: want auto, native or generic", mode)
}

// Unpin detaches the program pinned in dir and removes dir. It wraps
// ErrNotPinned when there is nothing there.
func Unpin(dir string) error {
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%w: no %s", ErrNotPinned, dir)
	}
	var errs []error
	path := filepath.Join(dir, pinLink)
	if l, err := link.LoadPinnedLink(path, nil); err == nil {
		// The pin and this descriptor are the link's last references:
		// closing both detaches the program.
		errs = append(errs, l.Unpin(), l.Close())
	} else if !errors.Is(err, fs.ErrNotExist) {
		errs = append(errs, fmt.Errorf("reading %s: %w", path, err))
	}
	for _, name := range []string{pinLocal, pinAllow, pinVIPs, pinCounters} {
		if err := os.Remove(filepath.Join(dir, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	errs = append(errs, os.Remove(dir))
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("decap: detaching: %w", err)
	}
	return nil
}

// Pinned is what a pin directory says about the program it holds.
type Pinned struct {
	Ifindex int            // the interface the link is attached to (0: none left)
	Local   []netip.Addr   // the local addresses
	Allow   []netip.Prefix // the balancers' addresses, the outer sources accepted
	VIPs    []netip.Prefix // the inner destinations delivered
	Stats   Stats
}

// ReadPinned reads the pins in dir. It wraps ErrNotPinned when there is
// nothing there.
func ReadPinned(dir string) (Pinned, error) {
	var p Pinned
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		return p, fmt.Errorf("%w: no %s", ErrNotPinned, dir)
	}
	if l, err := link.LoadPinnedLink(filepath.Join(dir, pinLink), nil); err == nil {
		if info, err := l.Info(); err == nil && info.XDP() != nil {
			p.Ifindex = int(info.XDP().Ifindex)
		}
		_ = l.Close()
	}
	local, err := ebpf.LoadPinnedMap(filepath.Join(dir, pinLocal), nil)
	if err != nil {
		return p, fmt.Errorf("decap: %w", err)
	}
	defer local.Close()
	if p.Local, err = localAddrs(local); err != nil {
		return p, err
	}
	for _, pm := range []struct {
		name, what string
		to         *[]netip.Prefix
	}{{pinAllow, "allowed sources", &p.Allow}, {pinVIPs, "VIPs", &p.VIPs}} {
		m, err := ebpf.LoadPinnedMap(filepath.Join(dir, pm.name), nil)
		if err != nil {
			return p, fmt.Errorf("decap: %w", err)
		}
		*pm.to, err = readPrefixes(m, pm.what)
		_ = m.Close()
		if err != nil {
			return p, err
		}
	}
	counters, err := ebpf.LoadPinnedMap(filepath.Join(dir, pinCounters), nil)
	if err != nil {
		return p, fmt.Errorf("decap: %w", err)
	}
	defer counters.Close()
	p.Stats, err = readStats(counters)
	return p, err
}

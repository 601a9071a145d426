package main

import (
	"errors"
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// A veth hands its peer the sender's skb as is: with checksum offload the
// TCP/UDP checksum is only the pseudo-header part (CHECKSUM_PARTIAL), and
// with TSO/GSO a "frame" may be 64 KiB. The kernel on the other side trusts
// the skb, but an XDP program or AF_XDP socket sees the bytes, and a frame
// sent on from there reaches the backend with a wrong checksum or does not
// fit. With these offloads off the sender computes every checksum and
// segments to the MTU, as a real NIC would put frames on a wire.

// offloads are the legacy ethtool set commands turned off, dependants first
// (the kernel drops TSO by itself once checksumming is off).
var offloads = []struct {
	name     string
	get, set uint32
}{
	{"gso", unix.ETHTOOL_GGSO, unix.ETHTOOL_SGSO},
	{"tso", unix.ETHTOOL_GTSO, unix.ETHTOOL_STSO},
	{"sg", unix.ETHTOOL_GSG, unix.ETHTOOL_SSG},
	{"tx-checksum", unix.ETHTOOL_GTXCSUM, unix.ETHTOOL_STXCSUM},
}

func cmdOffloadOff(args []string) error {
	if len(args) == 0 {
		return fmt.Errorf("offload-off: name at least one interface (%w)", errUsage)
	}
	for _, dev := range args {
		if err := offloadOff(dev); err != nil {
			return err
		}
	}
	return nil
}

// offloadOff turns the offloads off on dev, in the caller's namespace.
func offloadOff(dev string) error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("offload-off: socket: %w", err)
	}
	defer unix.Close(fd)
	for _, o := range offloads {
		if _, err := ethtoolValue(fd, dev, o.set, 0); err != nil {
			return fmt.Errorf("offload-off: %s: turning %s off: %w", dev, o.name, err)
		}
	}
	return nil
}

// offloadsOn names the offloads still on (for tests and checks).
func offloadsOn(dev string) ([]string, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	var on []string
	for _, o := range offloads {
		v, err := ethtoolValue(fd, dev, o.get, 0)
		if err != nil {
			return nil, fmt.Errorf("%s: reading %s: %w", dev, o.name, err)
		}
		if v != 0 {
			on = append(on, o.name)
		}
	}
	return on, nil
}

// ethtoolValue runs one SIOCETHTOOL command on struct ethtool_value and
// returns the value the kernel left there.
func ethtoolValue(fd int, dev string, cmd, data uint32) (uint32, error) {
	if len(dev) == 0 || len(dev) >= unix.IFNAMSIZ {
		return 0, errors.New("bad interface name")
	}
	val := &struct{ cmd, data uint32 }{cmd, data}
	// struct ifreq with ifr_data pointing at val; the pointer is kept as
	// unsafe.Pointer so the collector sees it.
	req := &struct {
		name [unix.IFNAMSIZ]byte
		data unsafe.Pointer
		_    [24 - unsafe.Sizeof(uintptr(0))]byte
	}{data: unsafe.Pointer(val)}
	copy(req.name[:], dev)
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.SIOCETHTOOL, uintptr(unsafe.Pointer(req))); errno != 0 {
		return 0, errno
	}
	return val.data, nil
}

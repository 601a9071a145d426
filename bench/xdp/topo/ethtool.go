package topo

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ethtoolValue is struct ethtool_value.
type ethtoolValue struct {
	cmd, data uint32
}

// ifreqData is struct ifreq with its union used as ifr_data.
type ifreqData struct {
	name [unix.IFNAMSIZ]byte
	data unsafe.Pointer
	_    [16]byte
}

// setFeature runs one legacy ethtool set command (ETHTOOL_SGRO, ...) on dev
// of the calling thread's namespace.
func setFeature(dev string, cmd, on uint32) error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("socket for ethtool: %w", err)
	}
	defer unix.Close(fd)
	v := &ethtoolValue{cmd: cmd, data: on}
	ifr := &ifreqData{data: unsafe.Pointer(v)}
	copy(ifr.name[:unix.IFNAMSIZ-1], dev)
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.SIOCETHTOOL, uintptr(unsafe.Pointer(ifr))); errno != 0 {
		return fmt.Errorf("ethtool %#x=%d on %s: %w", cmd, on, dev, errno)
	}
	return nil
}

// prepareVeth sets dev's offloads for the bench: segmentation and transmit
// checksum offloads off, so every frame on the wire is complete and fits
// the MTU as on a real link (a veth otherwise hands its peer partial
// checksums, which an XDP program would forward as they are); GRO on,
// which gives a veth its NAPI instance without an XDP program, so NAPI can
// run threaded (see Topo.Threaded).
func prepareVeth(dev string) error {
	for _, f := range []struct {
		cmd, on uint32
	}{
		{unix.ETHTOOL_SGSO, 0},
		{unix.ETHTOOL_STSO, 0},
		{unix.ETHTOOL_SSG, 0},
		{unix.ETHTOOL_STXCSUM, 0},
		{unix.ETHTOOL_SGRO, 1},
	} {
		if err := setFeature(dev, f.cmd, f.on); err != nil {
			return err
		}
	}
	return nil
}

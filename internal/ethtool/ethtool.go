// Package ethtool is the one home of the SIOCETHTOOL ioctls xlb uses: the
// channel counts of an interface (ETHTOOL_GCHANNELS, for its rx queues) and
// the legacy offload switches (ETHTOOL_GGSO/SGSO and the like, struct
// ethtool_value). golang.org/x/sys/unix has the constants but helpers only
// for the driver and timestamping info; the structs here follow
// include/uapi/linux/ethtool.h.
//
// Every call acts on the interface of the calling thread's network
// namespace: the socket a Socket holds is made there.
package ethtool

import (
	"errors"
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Socket is a datagram socket to send ethtool ioctls on.
type Socket struct{ fd int }

// Open makes the socket, in the calling thread's network namespace.
func Open() (*Socket, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("socket for ethtool: %w", err)
	}
	return &Socket{fd: fd}, nil
}

// Close closes the socket.
func (s *Socket) Close() error { return unix.Close(s.fd) }

// ifreqData is struct ifreq with its union used as ifr_data; the pointer
// is kept as unsafe.Pointer so that the collector sees it.
type ifreqData struct {
	name [unix.IFNAMSIZ]byte
	data unsafe.Pointer
	_    [24 - unsafe.Sizeof(uintptr(0))]byte // the rest of the union
}

// ioctl runs SIOCETHTOOL on ifname with data, a pointer to the command's
// struct (its first field the command number). The error is the errno.
func (s *Socket) ioctl(ifname string, data unsafe.Pointer) error {
	if len(ifname) == 0 || len(ifname) >= unix.IFNAMSIZ {
		return fmt.Errorf("bad interface name %q", ifname)
	}
	ifr := &ifreqData{data: data}
	copy(ifr.name[:], ifname)
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(s.fd), unix.SIOCETHTOOL, uintptr(unsafe.Pointer(ifr))); errno != 0 {
		return errno
	}
	return nil
}

// Channels is struct ethtool_channels, less its command number: the most
// channels of each kind the device supports and how many it has now.
type Channels struct {
	MaxRx, MaxTx, MaxOther, MaxCombined uint32
	Rx, Tx, Other, Combined             uint32
}

// RxQueues is the number of rx queues the channels make (the kernel's
// real_num_rx_queues): rx-only plus combined channels. 0 when the driver
// reports none.
func (c Channels) RxQueues() int { return int(c.Rx + c.Combined) }

// Channels reads ifname's channel counts (ETHTOOL_GCHANNELS). A driver
// without channel reporting answers an error wrapping unix.EOPNOTSUPP.
func (s *Socket) Channels(ifname string) (Channels, error) {
	req := struct {
		cmd uint32
		ch  Channels
	}{cmd: unix.ETHTOOL_GCHANNELS}
	if err := s.ioctl(ifname, unsafe.Pointer(&req)); err != nil {
		return Channels{}, fmt.Errorf("reading %s's channels (ETHTOOL_GCHANNELS): %w", ifname, err)
	}
	return req.ch, nil
}

// value runs one command on struct ethtool_value and returns the value the
// kernel left there.
func (s *Socket) value(ifname string, cmd, data uint32) (uint32, error) {
	v := struct{ cmd, data uint32 }{cmd, data}
	err := s.ioctl(ifname, unsafe.Pointer(&v))
	return v.data, err
}

// Offload is one legacy offload switch: its name as ethtool -k abbreviates
// it and the get and set commands on struct ethtool_value.
type Offload struct {
	Name     string
	Get, Set uint32
}

// The offloads xlb's tools turn on or off.
var (
	GSO        = Offload{"gso", unix.ETHTOOL_GGSO, unix.ETHTOOL_SGSO}
	TSO        = Offload{"tso", unix.ETHTOOL_GTSO, unix.ETHTOOL_STSO}
	SG         = Offload{"sg", unix.ETHTOOL_GSG, unix.ETHTOOL_SSG}
	TxChecksum = Offload{"tx-checksum", unix.ETHTOOL_GTXCSUM, unix.ETHTOOL_STXCSUM}
	GRO        = Offload{"gro", unix.ETHTOOL_GGRO, unix.ETHTOOL_SGRO}
)

// Offload reports whether o is on on ifname.
func (s *Socket) Offload(ifname string, o Offload) (bool, error) {
	v, err := s.value(ifname, o.Get, 0)
	if err != nil {
		return false, fmt.Errorf("reading %s on %s: %w", o.Name, ifname, err)
	}
	return v != 0, nil
}

// SetOffload turns o on or off on ifname.
func (s *Socket) SetOffload(ifname string, o Offload, on bool) error {
	var v uint32
	word := "off"
	if on {
		v, word = 1, "on"
	}
	if _, err := s.value(ifname, o.Set, v); err != nil {
		return fmt.Errorf("turning %s %s on %s: %w", o.Name, word, ifname, err)
	}
	return nil
}

// RxQueues opens a socket, reads ifname's channels and closes it: the rx
// queue count (Channels.RxQueues). A driver that reports no channels, or
// none that receive, gives 0 and no error, so that the caller falls back
// to what netlink reports (IFLA_NUM_RX_QUEUES).
func RxQueues(ifname string) (int, error) {
	s, err := Open()
	if err != nil {
		return 0, err
	}
	defer s.Close()
	ch, err := s.Channels(ifname)
	if errors.Is(err, unix.EOPNOTSUPP) {
		return 0, nil
	}
	return ch.RxQueues(), err
}

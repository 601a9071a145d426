package appliance

import (
	"errors"
	"fmt"
	"slices"
	"unsafe"

	"golang.org/x/sys/unix"

	"xlb/config"
)

// ethtoolChannels is struct ethtool_channels (ETHTOOL_GCHANNELS).
type ethtoolChannels struct {
	cmd                                         uint32
	maxRx, maxTx, maxOther, maxCombined         uint32
	rxCount, txCount, otherCount, combinedCount uint32
}

// ifreqData is struct ifreq with its union used as ifr_data.
type ifreqData struct {
	name [unix.IFNAMSIZ]byte
	data unsafe.Pointer
	_    [16]byte // the rest of the union
}

// rxQueueCount is the number of rx queues AF_XDP can bind to on ifname
// (the kernel's real_num_rx_queues): the rx-only plus combined channels
// that ethtool reports, asked through a socket so that it is the interface
// of this network namespace (sysfs may show another's). A driver without
// channel reporting falls back to the queues netlink reports
// (IFLA_NUM_RX_QUEUES, the queues allocated).
func rxQueueCount(ifname string, netlinkQueues int) (int, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return 0, fmt.Errorf("socket for ethtool: %w", err)
	}
	defer unix.Close(fd)
	ch := &ethtoolChannels{cmd: unix.ETHTOOL_GCHANNELS}
	ifr := &ifreqData{data: unsafe.Pointer(ch)}
	copy(ifr.name[:unix.IFNAMSIZ-1], ifname)
	_, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.SIOCETHTOOL, uintptr(unsafe.Pointer(ifr)))
	switch {
	case errno == 0 && ch.rxCount+ch.combinedCount > 0:
		return int(ch.rxCount + ch.combinedCount), nil
	case errno == 0 || errors.Is(errno, unix.EOPNOTSUPP):
		if netlinkQueues > 0 {
			return netlinkQueues, nil
		}
		return 1, nil
	}
	return 0, fmt.Errorf("reading %s's channels (ETHTOOL_GCHANNELS): %w", ifname, errno)
}

// resolveQueues turns dataplane.queues and dataplane.cpus into the queue
// list and, per queue, the CPU to pin its worker to (-1: none).
func resolveQueues(d *config.Dataplane, ifname string, count int) (queues, cpus []int, err error) {
	if d.AllQueues {
		for q := range count {
			queues = append(queues, q)
		}
	} else {
		queues = slices.Clone(d.Queues)
		for _, q := range queues {
			if q >= count {
				return nil, nil, fmt.Errorf("dataplane.queues lists queue %d but %s has %d rx queue(s) (0..%d)", q, ifname, count, count-1)
			}
		}
	}
	cpus = make([]int, len(queues))
	for i := range cpus {
		cpus[i] = -1
	}
	if len(d.CPUs) > 0 {
		if len(d.CPUs) != len(queues) {
			return nil, nil, fmt.Errorf("dataplane.cpus lists %d CPU(s) for the %d rx queue(s) of %s; give one CPU per queue", len(d.CPUs), len(queues), ifname)
		}
		copy(cpus, d.CPUs)
	}
	return queues, cpus, nil
}

// checkCPUs fails when a CPU to pin a worker to is not one this process may
// run on, before anything is attached.
func checkCPUs(cpus []int) error {
	var allowed unix.CPUSet
	if err := unix.SchedGetaffinity(0, &allowed); err != nil {
		return fmt.Errorf("reading the CPUs this process may use: %w", err)
	}
	for _, c := range cpus {
		if c >= 0 && !allowed.IsSet(c) {
			return fmt.Errorf("dataplane.cpus lists CPU %d, which this process may not run on (it may use %d CPUs)", c, allowed.Count())
		}
	}
	return nil
}

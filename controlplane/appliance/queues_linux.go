package appliance

import (
	"fmt"
	"slices"

	"golang.org/x/sys/unix"

	"xlb/config"
	"xlb/internal/ethtool"
)

// rxQueueCount is the number of rx queues AF_XDP can bind to on ifname
// (the kernel's real_num_rx_queues): the rx-only plus combined channels
// that ethtool reports, asked through a socket so that it is the interface
// of this network namespace (sysfs may show another's). A driver without
// channel reporting falls back to the queues netlink reports
// (IFLA_NUM_RX_QUEUES, the queues allocated).
func rxQueueCount(ifname string, netlinkQueues int) (int, error) {
	n, err := ethtool.RxQueues(ifname)
	switch {
	case err != nil:
		return 0, err
	case n > 0:
		return n, nil
	case netlinkQueues > 0:
		return netlinkQueues, nil
	}
	return 1, nil
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

package xdpprog

import "fmt"

// Stats are the program's verdict counters, summed over CPUs since Load.
// Every frame the program sees is counted in exactly one of them.
type Stats struct {
	Redirected     uint64 // VIP frames handed to the rx queue's AF_XDP socket
	PassedNoSocket uint64 // VIP frames passed because the queue has no socket
	PassedNotVIP   uint64 // frames not to a VIP, or not IP: the host's
	PassedNDP      uint64 // IPv6 neighbour discovery to a VIP
	// PassedShort counts frames passed because a header was truncated
	// before the destination address could be read (not known to be VIP
	// traffic).
	PassedShort uint64
	// PassedMalformedVIP counts frames to a VIP passed because a header
	// after the address was truncated or malformed: VIP traffic the
	// kernel then drops.
	PassedMalformedVIP uint64
	// PassedVLANOffload counts frames whose VLAN tag the receive metadata
	// held and that could not be put back (an unknown TPID, no
	// headroom): passed to the kernel, which has the tag.
	PassedVLANOffload uint64
	// Retagged counts frames whose VLAN tag the program put back from the
	// receive metadata; each is counted under its verdict too (not in
	// Total).
	Retagged uint64
}

// Total is the number of frames counted.
func (s Stats) Total() uint64 {
	return s.Redirected + s.PassedNoSocket + s.PassedNotVIP + s.PassedNDP + s.PassedShort + s.PassedMalformedVIP + s.PassedVLANOffload
}

// Stats reads and sums the per-CPU counters.
func (o *Objects) Stats() (Stats, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.Counters == nil {
		return Stats{}, ErrClosed
	}
	var sums [numStats]uint64
	var perCPU []uint64
	for i := range sums {
		if err := o.Counters.Lookup(uint32(i), &perCPU); err != nil {
			return Stats{}, fmt.Errorf("xdpprog: reading counter %d: %w", i, err)
		}
		for _, v := range perCPU {
			sums[i] += v
		}
	}
	return Stats{
		Redirected:         sums[statRedirected],
		PassedNoSocket:     sums[statPassedNoSocket],
		PassedNotVIP:       sums[statPassedNotVIP],
		PassedNDP:          sums[statPassedNDP],
		PassedShort:        sums[statPassedShort],
		PassedMalformedVIP: sums[statPassedMalformedVIP],
		PassedVLANOffload:  sums[statPassedVLANOffload],
		Retagged:           sums[statRetagged],
	}, nil
}

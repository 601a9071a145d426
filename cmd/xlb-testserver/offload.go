package main

import (
	"fmt"

	"xlb/internal/ethtool"
)

// A veth hands its peer the sender's skb as is: with checksum offload the
// TCP/UDP checksum is only the pseudo-header part (CHECKSUM_PARTIAL), and
// with TSO/GSO a "frame" may be 64 KiB. The kernel on the other side trusts
// the skb, but an XDP program or AF_XDP socket sees the bytes, and a frame
// sent on from there reaches the backend with a wrong checksum or does not
// fit. With these offloads off the sender computes every checksum and
// segments to the MTU, as a real NIC would put frames on a wire.

// offloads are the offloads turned off, dependants first (the kernel drops
// TSO by itself once checksumming is off).
var offloads = []ethtool.Offload{ethtool.GSO, ethtool.TSO, ethtool.SG, ethtool.TxChecksum}

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
	s, err := ethtool.Open()
	if err != nil {
		return fmt.Errorf("offload-off: %w", err)
	}
	defer s.Close()
	for _, o := range offloads {
		if err := s.SetOffload(dev, o, false); err != nil {
			return fmt.Errorf("offload-off: %w", err)
		}
	}
	return nil
}

// offloadsOn names the offloads still on (for tests and checks).
func offloadsOn(dev string) ([]string, error) {
	s, err := ethtool.Open()
	if err != nil {
		return nil, err
	}
	defer s.Close()
	var on []string
	for _, o := range offloads {
		v, err := s.Offload(dev, o)
		if err != nil {
			return nil, err
		}
		if v {
			on = append(on, o.Name)
		}
	}
	return on, nil
}

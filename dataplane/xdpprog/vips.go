package xdpprog

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"

	"github.com/cilium/ebpf"
)

// vipKey is the VIP map's key: the address in 16 bytes, IPv4-mapped for
// IPv4, and its value: the IP version.
func vipKey(a netip.Addr) (key [16]byte, version uint8, err error) {
	switch {
	case !a.IsValid():
		return key, 0, fmt.Errorf("%w: invalid address", ErrAddr)
	case a.Zone() != "":
		return key, 0, fmt.Errorf("%w: %s has a zone", ErrAddr, a)
	case a.Is4In6():
		// As a key it would be the IPv4 VIP's; the config rejects it too.
		return key, 0, fmt.Errorf("%w: %s is IPv4-mapped; use %s", ErrAddr, a, a.Unmap())
	case a.Is4():
		return a.As16(), 4, nil
	}
	return a.As16(), 6, nil
}

// SetVIPs makes addrs the set of VIPs. It adds the new addresses before it
// deletes stale ones, so a VIP in both the old and the new set never stops
// being redirected; addresses the map holds already are not written again.
// Nothing is changed when an address is unusable (wraps ErrAddr) or there
// are more than MaxVIPs (ErrTooMany); a failing map update can leave the
// union of both sets, and the next SetVIPs, which then reads the map back,
// repairs it.
func (o *Objects) SetVIPs(addrs []netip.Addr) error {
	want := make(map[[16]byte]uint8, len(addrs))
	for _, a := range addrs {
		k, v, err := vipKey(a)
		if err != nil {
			return err
		}
		want[k] = v
	}
	if len(want) > MaxVIPs {
		return fmt.Errorf("%w: %d, at most %d", ErrTooMany, len(want), MaxVIPs)
	}

	o.mu.Lock()
	defer o.mu.Unlock()
	if o.VIPs == nil {
		return ErrClosed
	}
	have := o.vipKeys
	o.vipKeys = nil // until every write below has succeeded
	if have == nil {
		keys, err := o.vipKeysLocked()
		if err != nil {
			return err
		}
		have = make(map[[16]byte]uint8, len(keys))
		for _, k := range keys {
			have[k] = 0 // no version: rewritten if wanted
		}
	}
	stale := 0
	for k := range have {
		if _, ok := want[k]; !ok {
			stale++
		}
	}
	if stale+len(want) > 2*MaxVIPs {
		// Only after an earlier failed SetVIPs; the map cannot hold both.
		return fmt.Errorf("%w: %d stale entries still in the map", ErrTooMany, stale)
	}
	for k, v := range want {
		if have[k] == v {
			continue
		}
		if err := o.VIPs.Update(k, v, ebpf.UpdateAny); err != nil {
			return fmt.Errorf("xdpprog: adding VIP %s: %w", netip.AddrFrom16(k).Unmap(), err)
		}
	}
	for k := range have {
		if _, ok := want[k]; ok {
			continue
		}
		if err := o.VIPs.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("xdpprog: removing VIP %s: %w", netip.AddrFrom16(k).Unmap(), err)
		}
	}
	o.vipKeys = want
	return nil
}

// ListVIPs returns the addresses in the VIP map, sorted.
func (o *Objects) ListVIPs() ([]netip.Addr, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.VIPs == nil {
		return nil, ErrClosed
	}
	keys, err := o.vipKeysLocked()
	if err != nil {
		return nil, err
	}
	out := make([]netip.Addr, 0, len(keys))
	for _, k := range keys {
		out = append(out, netip.AddrFrom16(k).Unmap())
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return out, nil
}

func (o *Objects) vipKeysLocked() ([][16]byte, error) {
	var (
		keys [][16]byte
		k    [16]byte
		v    uint8
	)
	it := o.VIPs.Iterate()
	for it.Next(&k, &v) {
		keys = append(keys, k)
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("xdpprog: reading VIPs: %w", err)
	}
	return keys, nil
}

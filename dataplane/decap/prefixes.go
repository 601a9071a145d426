package decap

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"

	"github.com/cilium/ebpf"
)

// Sizes of the prefix maps.
const (
	MaxAllow   = 256  // balancer addresses or prefixes in Allow
	MaxVIPs    = 1024 // served addresses or prefixes in VIPs
	maxMartian = 16
)

// ErrPrefix is wrapped for an allowed source or VIP that cannot be one.
var ErrPrefix = errors.New("decap: not a usable address or prefix")

// martians are the sources no client and no balancer sends from, per
// family: dropped as outer and as inner sources whatever Allow says.
// Directed broadcasts of the host's subnets are left to the kernel, which
// drops them as sources (they depend on routes, not on this list).
var martians = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),      // this network, the unspecified address
	netip.MustParsePrefix("127.0.0.0/8"),    // loopback
	netip.MustParsePrefix("169.254.0.0/16"), // link-local: never routed to a balancer
	netip.MustParsePrefix("224.0.0.0/4"),    // multicast
	netip.MustParsePrefix("240.0.0.0/4"),    // reserved, and the broadcast 255.255.255.255
	netip.MustParsePrefix("::/128"),         // unspecified
	netip.MustParsePrefix("::1/128"),        // loopback
	netip.MustParsePrefix("::ffff:0:0/96"),  // IPv4-mapped: never on the wire
	netip.MustParsePrefix("fe80::/10"),      // link-local
	netip.MustParsePrefix("ff00::/8"),       // multicast
}

// Martians returns the martian prefixes the program drops as sources.
func Martians() []netip.Prefix { return append([]netip.Prefix(nil), martians...) }

// prefixKeyOf is the key of p in the prefix maps (LPM tries): the
// prefix length in host order, then the family as a 32-bit big-endian
// word (4 or 6) and the address (IPv4 in the first 4 bytes), the length
// counting the family word, so that the families never cover each other
// (IPv4 is not stored IPv4-mapped here: ::ffff:0:0/96 is an IPv6 martian).
func prefixKeyOf(p netip.Prefix) [24]byte {
	var k [24]byte
	binary.NativeEndian.PutUint32(k[0:], uint32(32+p.Bits()))
	a := p.Addr()
	if a.Is4() {
		k[7] = 4
		b := a.As4()
		copy(k[8:], b[:])
	} else {
		k[7] = 6
		b := a.As16()
		copy(k[8:], b[:])
	}
	return k
}

// prefixOfKey undoes prefixKeyOf.
func prefixOfKey(k [24]byte) (netip.Prefix, bool) {
	bits := int(binary.NativeEndian.Uint32(k[0:])) - 32
	switch k[7] {
	case 4:
		return netip.PrefixFrom(netip.AddrFrom4([4]byte(k[8:12])), bits), true
	case 6:
		return netip.PrefixFrom(netip.AddrFrom16([16]byte(k[8:24])), bits), true
	}
	return netip.Prefix{}, false
}

// CheckPrefix says why p cannot be an allowed source or a VIP: not valid,
// zoned, written IPv4-mapped, with host bits set, or overlapping a
// martian prefix (the program drops such sources whatever the lists say,
// and a list as wide as 0.0.0.0/0 would make every inner source a
// balancer's).
func CheckPrefix(p netip.Prefix) error {
	a := p.Addr()
	switch {
	case !p.IsValid():
		return fmt.Errorf("%w: %v", ErrPrefix, p)
	case a.Zone() != "":
		return fmt.Errorf("%w: %v has a zone", ErrPrefix, p)
	case a.Is4In6():
		return fmt.Errorf("%w: %v is IPv4-mapped: write it as IPv4", ErrPrefix, p)
	case p.Masked() != p:
		return fmt.Errorf("%w: %v has host bits set (%v?)", ErrPrefix, p, p.Masked())
	}
	for _, m := range martians {
		if p.Overlaps(m) {
			return fmt.Errorf("%w: %v overlaps the martian prefix %v", ErrPrefix, p, m)
		}
	}
	return nil
}

// setPrefixes replaces the prefixes of the prefix map m with want: adds
// the new ones first, then removes those that are gone, so a prefix in
// both is never missing.
func setPrefixes(m *ebpf.Map, want []netip.Prefix, max int, what string) error {
	keys := make(map[[24]byte]bool, len(want))
	for _, p := range want {
		if err := CheckPrefix(p); err != nil {
			return err
		}
		keys[prefixKeyOf(p)] = true
	}
	if len(keys) > max {
		return fmt.Errorf("%w: %d %s, at most %d", ErrTooMany, len(keys), what, max)
	}
	var stale [][24]byte
	var k [24]byte
	var v uint8
	it := m.Iterate()
	for it.Next(&k, &v) {
		if !keys[k] {
			stale = append(stale, k)
		}
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("decap: reading %s: %w", what, err)
	}
	for k := range keys {
		if err := m.Put(k, uint8(1)); err != nil {
			return fmt.Errorf("decap: adding to %s: %w", what, err)
		}
	}
	for _, k := range stale {
		if err := m.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("decap: removing from %s: %w", what, err)
		}
	}
	return nil
}

// readPrefixes lists the prefixes in the prefix map m.
func readPrefixes(m *ebpf.Map, what string) ([]netip.Prefix, error) {
	out := []netip.Prefix{}
	var k [24]byte
	var v uint8
	it := m.Iterate()
	for it.Next(&k, &v) {
		if p, ok := prefixOfKey(k); ok {
			out = append(out, p)
		}
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("decap: reading %s: %w", what, err)
	}
	return out, nil
}

// SetAllow replaces the outer sources the program accepts tunnels from:
// the balancers' addresses (or prefixes). Empty: every tunnel frame to
// this host is dropped. It wraps ErrPrefix (CheckPrefix) and ErrTooMany
// beyond MaxAllow.
func (o *Objects) SetAllow(prefixes []netip.Prefix) error {
	if o.Allow == nil {
		return ErrClosed
	}
	return setPrefixes(o.Allow, prefixes, MaxAllow, "allowed sources")
}

// SetVIPs replaces the inner destinations the program delivers: the
// addresses (or prefixes) this host serves. It wraps ErrPrefix and
// ErrTooMany beyond MaxVIPs.
func (o *Objects) SetVIPs(prefixes []netip.Prefix) error {
	if o.VIPs == nil {
		return ErrClosed
	}
	return setPrefixes(o.VIPs, prefixes, MaxVIPs, "VIPs")
}

// fillMartians writes the martian prefixes into m, once at Load.
func fillMartians(m *ebpf.Map) error {
	for _, p := range martians {
		if err := m.Put(prefixKeyOf(p), uint8(1)); err != nil {
			return fmt.Errorf("decap: adding martian %v: %w", p, err)
		}
	}
	return nil
}

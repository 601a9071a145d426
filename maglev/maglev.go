package maglev

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// DefaultSize is the default table size (65537, a prime): ~65 slots per
// backend at N=1000, enough for S2's shares within table granularity.
const DefaultSize = 65537

// minSize is the smallest table size NewBuilder accepts.
const minSize = 7

// Errors returned by NewBuilder and Build, possibly wrapped; test with
// errors.Is.
var (
	ErrNotPrime        = errors.New("maglev: table size is not a prime >= 7")
	ErrNoBackends      = errors.New("maglev: no backends")
	ErrDuplicateKey    = errors.New("maglev: duplicate backend key")
	ErrTooManyBackends = errors.New("maglev: more backends than half the table size or than MaxBackends")
)

// MaxBackends is the most backends a table can name: an entry is 2 bytes,
// and the value 0xFFFF is kept for a free slot during the build.
const MaxBackends = 1<<16 - 1

// Backend is one member of an eligible set.
type Backend struct {
	// Key is the backend's unique, stable identity (e.g. "web/10.0.0.1").
	// It orders the build and seeds the backend's permutation.
	Key string
	// Weight is the relative weight. A set whose weights are all 0 shares
	// equally (W1b); otherwise a backend of weight 0 gets no slot.
	Weight uint32
}

// empty marks a free slot during population. Build refuses more than
// MaxBackends backends, so no backend index can equal it.
const empty = ^uint16(0)

// perm is one backend's population state: where its permutation continues,
// and its weight accumulator. One small struct per backend keeps the fill
// loop on a single cache line per backend.
type perm struct {
	key    string // only for sorting; cleared after the build
	index  uint16 // index into the caller's slice
	weight uint32
	next   uint32 // next preferred slot to try
	skip   uint32 // step of the permutation, in [1, M-1]
	acc    uint64 // weight accumulator; < maxWeight between rounds
}

// Builder builds Maglev tables of one size. It reuses its buffers between
// builds, so that a rebuild with no more backends than before does not
// allocate. A Builder is not safe for concurrent use.
type Builder struct {
	size  uint32
	perms []perm
}

// NewBuilder returns a Builder for tables of size entries. It returns
// ErrNotPrime unless size is a prime >= 7.
func NewBuilder(size uint32) (*Builder, error) {
	if size < minSize || !IsPrime(size) {
		return nil, fmt.Errorf("size %d: %w", size, ErrNotPrime)
	}
	return &Builder{size: size}, nil
}

// Size returns the table size M the Builder builds.
func (b *Builder) Size() uint32 { return b.size }

// Build fills table, which must have length Size(), so that table[i] is an
// index into backends (the caller's slice, in the caller's order). The result
// depends only on the set of (Key, Weight) pairs: never on the order of
// backends, on map order, randomness or the machine (S5).
//
// It returns ErrNoBackends for an empty set, ErrDuplicateKey if a Key repeats
// and ErrTooManyBackends for more than Size()/2 backends, weight 0 included
// (Maglev's shares need several slots per backend) or more than MaxBackends
// (an entry is 2 bytes); a table of the wrong length is an error too. On error table's contents are unspecified.
func (b *Builder) Build(backends []Backend, table []uint16) error {
	m := b.size
	switch {
	case len(table) != int(m):
		return fmt.Errorf("maglev: table has %d entries, want %d", len(table), m)
	case len(backends) == 0:
		return ErrNoBackends
	case uint64(len(backends)) > uint64(m/2):
		return fmt.Errorf("%d backends for size %d: %w", len(backends), m, ErrTooManyBackends)
	case len(backends) > MaxBackends:
		return fmt.Errorf("%d backends, at most %d: %w", len(backends), MaxBackends, ErrTooManyBackends)
	}

	ps := b.perms[:0]
	var maxWeight uint32
	for i := range backends {
		ps = append(ps, perm{key: backends[i].Key, index: uint16(i), weight: backends[i].Weight})
		maxWeight = max(maxWeight, backends[i].Weight)
	}
	b.perms = ps
	// Drop the references to the caller's strings when done.
	defer func() { clear(b.perms[:cap(b.perms)]) }()

	// The Key order is the build order; it MUST NOT change (S5).
	slices.SortFunc(ps, func(x, y perm) int { return strings.Compare(x.key, y.key) })
	for i := 1; i < len(ps); i++ {
		if ps[i].key == ps[i-1].key {
			return fmt.Errorf("key %q: %w", ps[i].key, ErrDuplicateKey)
		}
	}

	// W1b: all zero means all equal. Otherwise weight-0 backends never take
	// a slot, so they are left out of the fill loop (kept in Key order).
	if maxWeight == 0 {
		for i := range ps {
			ps[i].weight = 1
		}
		maxWeight = 1
	}
	active := ps[:0]
	for _, p := range ps {
		if p.weight == 0 {
			continue
		}
		h1, h2 := keyHashes(p.key)
		p.next = uint32(h1 % uint64(m))
		p.skip = uint32(h2%uint64(m-1)) + 1
		active = append(active, p)
	}

	for i := range table {
		table[i] = empty
	}
	populate(active, table, uint64(maxWeight))
	return nil
}

// populate runs the weighted Maglev rounds until every slot of table is
// taken. Each take walks the backend's permutation from where it left off,
// so a build costs O(M log M) probes in total rather than an M×N matrix.
func populate(active []perm, table []uint16, maxWeight uint64) {
	m := uint32(len(table))
	filled := uint32(0)
	for {
		for i := range active {
			p := &active[i]
			p.acc += uint64(p.weight)
			if p.acc < maxWeight {
				continue
			}
			p.acc -= maxWeight

			// Always terminates: the permutation visits every slot and
			// at least one is free.
			c := p.next
			for table[c] != empty {
				c = step(c, p.skip, m)
			}
			table[c] = p.index
			p.next = step(c, p.skip, m)
			if filled++; filled == m {
				return
			}
		}
	}
}

// step returns (c + skip) mod m for c, skip < m, without overflowing uint32.
func step(c, skip, m uint32) uint32 {
	if c >= m-skip {
		return c - (m - skip)
	}
	return c + skip
}

// Lookup returns the backend index for selection hash h: table[h % len(table)].
func Lookup(table []uint16, h uint64) uint16 {
	return table[h%uint64(len(table))]
}

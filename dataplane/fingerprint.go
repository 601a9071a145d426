package dataplane

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"slices"
)

// Fingerprint identifies what decides svc's new flows: its side, its
// eligible set (each backend by address, the Maglev key, with the weight it
// is selected with) and its Maglev table (each slot by the backend it
// names). Names are left out: they decide nothing.
// Two instances with the same configuration and health view compute the
// same fingerprint (S5) whatever their reload histories and however their
// files order the backends, because nothing in it depends on BackendRef
// slots or on positions in Eligible; a fleet whose members show different
// fingerprints for a service picks different backends for some of its new
// flows. It is 16 hex digits; hashing the table costs about its size, so
// the control plane computes it when the set or table changes
// (Service.Fingerprint) and reports read that.
func (s *Snapshot) Fingerprint(svc *Service) string {
	// ids[i] identifies Eligible[i].
	ids := make([]uint64, len(svc.Eligible))
	for i, ref := range svc.Eligible {
		h := fnv.New64a()
		if be := s.Backend(ref); be != nil {
			h.Write(be.Addr[:])
			h.Write(binary.LittleEndian.AppendUint32(nil, be.Weight))
		}
		ids[i] = h.Sum64()
	}
	h := fnv.New64a()
	var b [8]byte
	put := func(v uint64) {
		binary.LittleEndian.PutUint64(b[:], v)
		h.Write(b[:])
	}
	put(uint64(svc.Side))
	set := slices.Clone(ids)
	slices.Sort(set)
	put(uint64(len(set)))
	for _, id := range set {
		put(id)
	}
	put(uint64(len(svc.Table)))
	for _, e := range svc.Table {
		if int(e) < len(ids) {
			put(ids[e])
		} else {
			put(^uint64(0))
		}
	}
	return fmt.Sprintf("%016x", h.Sum64())
}

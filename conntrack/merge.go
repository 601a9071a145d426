package conntrack

import "fmt"

// MergeResult says what Merge did with another instance's record.
type MergeResult uint8

const (
	// MergeStored: the table had no live entry for the key (or a
	// half-open one, which proves nothing, for another backend); the
	// record is stored as an established peer entry.
	MergeStored MergeResult = iota + 1
	// MergeRefreshed: a live entry for the same backend; its last use is
	// raised to the record's where that is later, and a half-open one is
	// confirmed.
	MergeRefreshed
	// MergeConflict: a live established entry for another backend; it is
	// kept as it is.
	MergeConflict
	// MergeExpired: the record's last use is already past its idle
	// timeout at now; nothing is stored.
	MergeExpired
	// MergeRefused: both of the key's buckets are full of live entries
	// that a peer record may not displace (established entries of this
	// instance's own flows); nothing is stored.
	MergeRefused
)

func (r MergeResult) String() string {
	switch r {
	case MergeStored:
		return "stored"
	case MergeRefreshed:
		return "refreshed"
	case MergeConflict:
		return "conflict"
	case MergeExpired:
		return "expired"
	case MergeRefused:
		return "refused"
	}
	return fmt.Sprintf("MergeResult(%d)", uint8(r))
}

// Merge applies a record of a flow that another instance tracks (SPEC
// [flow_sync]): v names the backend by this table's reference, lastUse
// is on this table's clock (ms), taken as now if later. v.Peer should be
// set; v.HalfOpen is ignored (a record is of an established flow). A
// stored record may displace a half-open entry or the least recently used
// peer entry of a full bucket, never an established entry of this
// instance's own. It takes both of the key's bucket locks; no allocation.
func (t *Table) Merge(k *Key, v Value, lastUse, now int64) MergeResult {
	// A record is of an established flow: the sender sends no other.
	v.HalfOpen = false
	val := v.pack()
	lastUse = min(lastUse, now) // another clock's future is our present
	if expired(val, lastUse, now) {
		return MergeExpired
	}
	h := t.Hint(k)
	var w keyWords
	w.from(k)
	st := &t.stats[h.bi&uint64(len(t.stats)-1)]
	t.lockPair(h.bi, h.bi2)
	defer t.unlockPair(h.bi, h.bi2)
	b, i, home, alt := t.locate(h, &w)
	if i < 0 {
		if t.insert(h, &w, val, lastUse, now, st, halfOpen|peerBit) == Refused {
			st.mergeRefused.Add(1)
			return MergeRefused
		}
		return MergeStored
	}
	s := &b.slots[i]
	old, last := s.val.Load(), int64(s.last.Load())
	switch {
	case expired(old, last, now):
		// Not update: its expiry test would be at lastUse, not now.
		b.write(i, home, alt, nil, val, lastUse)
		st.inserts.Add(1)
		st.reclaimed.Add(1)
		return MergeStored
	case uint32(old) != v.Backend:
		if old&halfOpen == 0 {
			return MergeConflict
		}
		// One packet here proves less than a flow established there.
		b.update(i, home, alt, val, lastUse, st)
		return MergeStored
	case old&halfOpen != 0:
		// Confirmed by the record: established now, and still this
		// instance's own where it was (packets of the flow came here).
		if old&peerBit == 0 {
			val &^= peerBit
		}
		b.update(i, home, alt, val, max(last, lastUse), st)
	default:
		// Never lower it, not even below a concurrent Touch.
		for cur := last; lastUse > cur && !s.last.CompareAndSwap(uint64(cur), uint64(lastUse)); {
			cur = int64(s.last.Load())
		}
	}
	return MergeRefreshed
}

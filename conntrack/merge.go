package conntrack

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

// Merge applies a record of a flow that another instance tracks (SPEC
// [flow_sync]): v names the backend by this table's reference, lastUse
// is on this table's clock (ms). v.Peer should be set. A stored record
// may displace a half-open entry or the least recently used peer entry of
// a full bucket, never an established entry of this instance's own.
func (t *Table) Merge(k *Key, v Value, lastUse, now int64) MergeResult {
	panic("conntrack: Merge not implemented yet")
}

// Buckets is the number of buckets: RangeBuckets walks [0, Buckets()).
func (t *Table) Buckets() int { return len(t.buckets) }

// RangeBuckets is Range over buckets [from, to) only, so that a walk of
// the whole table can be spread over time.
func (t *Table) RangeBuckets(from, to int, now int64, fn func(k Key, e Entry) bool) {
	panic("conntrack: RangeBuckets not implemented yet")
}

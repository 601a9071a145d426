package flowsync

import (
	"xlb/conntrack"
	"xlb/dataplane"
)

// table is what the Syncer uses of the tracking table (a
// *conntrack.Table); tests put a fake behind it.
type table interface {
	Merge(k *conntrack.Key, v conntrack.Value, lastUse, now int64) conntrack.MergeResult
	Buckets() int
	Capacity() int
	RangeBuckets(from, to int, now int64, fn func(k conntrack.Key, e conntrack.Entry) bool)
}

// ring is what the Syncer uses of a decider's *dataplane.SyncRing.
type ring interface {
	Pop(dst []dataplane.SyncRecord) int
	Drops() uint64
}

// engine is what the Syncer uses of the *dataplane.Engine.
type engine interface {
	Load() *dataplane.Snapshot
	table() table
	// rings appends the deciders' rings to dst[:0].
	rings(dst []ring) []ring
}

type realEngine struct{ e *dataplane.Engine }

func (r realEngine) Load() *dataplane.Snapshot { return r.e.Load() }
func (r realEngine) table() table              { return r.e.Conntrack() }
func (r realEngine) rings(dst []ring) []ring {
	dst = dst[:0]
	for _, rg := range r.e.SyncRings() {
		dst = append(dst, rg)
	}
	return dst
}

package dataplane

import (
	"sync"
	"sync/atomic"

	"xlb/conntrack"
)

// A conntrack table kept in a file (conntrack.Open) is that file's pages,
// mapped shared: a file truncated under the running process turns every
// access past its new end into a fault. The workers run with faults made
// panics (debug.SetPanicOnFault) and hand what they recover to Contain: a
// fault in the mapping of the table their batch used replaces the
// engine's table by an empty one in anonymous memory, of the same
// capacity, and the batch goes on with it. The flows tracked so far are
// lost (their entries are in pages that are gone); new ones are tracked
// again at once. The faulted table stays referenced, mapped, for the
// process's life, since a decider may still be inside it; it is
// abandoned, so that one waiting there for a bucket lock or a slot the
// faulted decider left held panics out and resumes too.

// tableFaults is what an engine keeps of the faults contained in its
// tables.
type tableFaults struct {
	mu    sync.Mutex // one replacement at a time: the new table is made once
	count atomic.Uint64
	dead  []*conntrack.Table // replaced tables, kept mapped for good
	on    func(TableFault)
}

// TableFault says what the first contained fault in a table did.
type TableFault struct {
	// Old is the table that faulted, New the empty one that replaced it
	// (nil when making it failed: Err; the fault then still crashes).
	Old, New *conntrack.Table
	// Offset is how far into Old's buckets the fault was.
	Offset uintptr
	Err    error
	// LockErr is New's Lock error (nil: locked, or too small to need it).
	LockErr error
}

// OnTableFault sets what is told of each table replaced after a fault (the
// appliance logs it and stops keeping the table's state). Set before any
// decider runs; fn runs on the decider's goroutine, once per table.
func (e *Engine) OnTableFault(fn func(TableFault)) { e.faults.on = fn }

// ConntrackFaults counts the faults contained in the engine's table
// mappings: one per decider that met one (the first replaced the table).
func (e *Engine) ConntrackFaults() uint64 { return e.faults.count.Load() }

// replaceFaulted replaces old, in whose mapping a fault off bytes into its
// buckets was contained, by an empty table of its capacity, unless another
// decider already did. It fails only when the new table cannot be made.
func (e *Engine) replaceFaulted(old *conntrack.Table, off uintptr) error {
	f := &e.faults
	f.count.Add(1)
	f.mu.Lock()
	defer f.mu.Unlock()
	if e.ct.Load() != old {
		return nil
	}
	nt, err := conntrack.New(old.Capacity())
	if err != nil {
		if f.on != nil {
			f.on(TableFault{Old: old, Offset: off, Err: err})
		}
		return err
	}
	lockErr := nt.Lock()
	f.dead = append(f.dead, old)
	e.ct.Store(nt)
	// Deciders still inside old may wait for a lock or a slot the
	// faulted one left held: they panic out, and Contain resumes them.
	old.Abandon()
	if f.on != nil {
		f.on(TableFault{Old: old, New: nt, Offset: off, LockErr: lockErr})
	}
	return nil
}

// Decided counts the frames the decider has decided, ever: what a worker
// reads before Process, for Contain.
func (dc *Decider) Decided() uint64 { return dc.stats.decided }

// Contain takes what a panic of Process(frames, now) left: r, from
// recover, and since, Decided before that call. When r is a fault in the
// mapping of the file table the batch used, that table is replaced (by
// the first decider to meet a fault in it) by an empty one in anonymous
// memory, and the frames the fault left undecided are decided with it:
// every frame of the batch is decided, rewritten and counted once, as if
// no fault had happened. (A frame is counted only after its table access,
// decision and rewrite, and the one the fault interrupted had only
// touched the table: it is decided again.) So is a decider that waited in
// the replaced table, for a lock or a slot the faulted one left held
// (conntrack.Table.Abandon). Anything else is false, and the caller
// panics again.
func (dc *Decider) Contain(r any, frames []Frame, since uint64, now int64) bool {
	t := dc.ct
	if off, ok := t.FaultAt(r); ok {
		if err := dc.e.replaceFaulted(t, off); err != nil {
			return false
		}
	} else if !t.WaitedIn(r) {
		return false
	}
	done := int(dc.stats.decided - since)
	// The frames decided before the fault were counted in the batch
	// Process did not finish: flushed now, as it would have.
	dc.stats.flush()
	dc.Process(frames[done:], now)
	return true
}

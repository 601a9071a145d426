package conntrack

import (
	"errors"
	"fmt"
	"runtime"
	"runtime/debug"
	"unsafe"
)

// A table kept in a file (Open) is the file's pages, mapped shared: if the
// file shrinks under a running process (truncated by someone else), every
// access to a page past its new end is a SIGBUS, which the Go runtime
// turns into a crash, not an error. A goroutine that runs with
// debug.SetPanicOnFault(true) gets a panic instead, whose value is a
// runtime.Error with the faulting address (Addr); FaultAt tells such a
// panic in this table's mapping from any other, which must still crash.
// Every goroutine that reads or writes a file table after Open (the
// workers, through the engine) runs so, and recovers only those.

// ErrFault is what Guard returns (wrapped) for a fault in the table's
// mapping.
var ErrFault = errors.New("conntrack: memory fault in the table's file mapping (the file was truncated or changed under this process)")

// addrError is the panic value of a memory fault under
// debug.SetPanicOnFault: a runtime.Error that knows the faulting address.
type addrError interface {
	runtime.Error
	Addr() uintptr
}

// FaultAt reports whether r, a value recovered from a panic, is a memory
// fault at an address inside t's file mapping, and returns how far into
// the buckets it was. Anything else (another panic, a fault elsewhere, a
// table in anonymous memory, which cannot fault) is false: the caller
// panics again.
func (t *Table) FaultAt(r any) (uintptr, bool) {
	e, ok := r.(addrError)
	if !ok || t == nil || !t.mem.Mapped || t.mem.File == "" || len(t.mapping) == 0 {
		return 0, false
	}
	addr := e.Addr()
	base := uintptr(unsafe.Pointer(&t.mapping[0]))
	if addr < base || addr-base >= uintptr(len(t.mapping)) {
		return 0, false
	}
	return addr - base, true
}

// ErrAbandoned is the panic value (as an error) of a goroutine that waited
// in a table given up after a fault (Abandon).
var ErrAbandoned = errors.New("conntrack: waited in a table abandoned after a fault")

// abandonedPanic is what a waiter in an abandoned table panics with.
type abandonedPanic struct{ t *Table }

func (p abandonedPanic) Error() string { return ErrAbandoned.Error() }
func (p abandonedPanic) Unwrap() error { return ErrAbandoned }

// Abandon gives t up after a fault in its mapping: a writer that faulted
// may have left a bucket locked or a slot mid-write (odd sequence), and a
// goroutine waiting there would wait forever. From now on such a waiter,
// once past its short spin, panics instead (WaitedIn tells it); nothing
// else changes, and t stays usable for what does not wait.
func (t *Table) Abandon() { t.abandoned.Store(true) }

// Abandoned reports whether Abandon was called.
func (t *Table) Abandoned() bool { return t.abandoned.Load() }

// WaitedIn reports whether r, recovered from a panic, is a waiter's in t
// after Abandon.
func (t *Table) WaitedIn(r any) bool {
	p, ok := r.(abandonedPanic)
	return ok && p.t == t
}

// Guard runs fn, which uses t, on the calling goroutine with faults made
// panics, and turns a fault in t's file mapping into an error wrapping
// ErrFault; any other panic goes on. Control plane use (a walk of a kept
// table, tests); the workers contain faults in their own loop.
func Guard(t *Table, fn func()) (err error) {
	old := debug.SetPanicOnFault(true)
	defer debug.SetPanicOnFault(old)
	defer func() {
		r := recover()
		if r == nil {
			return
		}
		off, ok := t.FaultAt(r)
		if !ok {
			panic(r)
		}
		err = fmt.Errorf("%w: %s, %d bytes into its buckets", ErrFault, t.mem.File, off)
	}()
	fn()
	return nil
}

// Offsets is where h's two buckets begin in the table's buckets, in bytes,
// the unit of FaultAt's offset: which keys a fault (a file shrunk to some
// size) reaches. Tests and diagnostics only.
func (h Hint) Offsets() (first, second uintptr) {
	const size = unsafe.Sizeof(bucket{})
	return uintptr(h.bi) * size, uintptr(h.bi2) * size
}

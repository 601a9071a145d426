package conntrack

import "errors"

// ErrForeignFile is what Open's Refused wraps: the file exists but is not a
// table this process can take over or migrate.
var ErrForeignFile = errors.New("not a conntrack table of a known layout and this boot")

// OpenInfo says what Open found.
type OpenInfo struct {
	// Kept: the file held a table of this layout, size and boot, now in
	// use with its entries (Entries live ones, Torn slots cleared).
	Kept bool
	// Migrated: the file held a table of this boot of another layout this
	// binary reads, or of another capacity. Its live entries were copied
	// into a new table of this binary's layout and the capacity asked for,
	// with the old table's ID: Entries of them are in it, Dropped did not
	// fit (a smaller table evicts), Torn slots were skipped.
	Migrated               bool
	FromLayout             uint32
	FromCapacity           int
	Entries, Torn, Dropped int
	// Misplaced: slots of a kept table cleared because their key could
	// not be where it was (damage over the slots: dropMisplaced).
	Misplaced int
	// Refused is why an existing file was not used (nil: none, kept or
	// migrated): ErrForeignFile, or ErrUnsafeFile for a link or a file
	// others could have written; it was renamed to RefusedAs and
	// the table starts empty.
	Refused   error
	RefusedAs string
}

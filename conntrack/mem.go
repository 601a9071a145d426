package conntrack

import "time"

// Memory is how a table's memory was allocated: what `xlb run` logs at
// start and tests check.
type Memory struct {
	Bytes      int  // the buckets, 64 bytes per entry
	Mapped     bool // its own mapping, outside the Go heap (tables of 4 MiB and more)
	HugeAdvice bool // madvise(MADV_HUGEPAGE) accepted (THP not "never")
	// Populate is how every page was faulted in at New, before any
	// packet: "madvise" (MADV_POPULATE_WRITE) or "touch" (a write per
	// page); PopulateTime what it took.
	Populate     string
	PopulateTime time.Duration
	Locked       bool   // Lock succeeded: resident, never swapped out
	File         string // Open: the file the table is kept in ("" for New)
}

// Memory returns how the table's memory was allocated.
func (t *Table) Memory() Memory { return t.mem }

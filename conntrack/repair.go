package conntrack

import "unsafe"

// FileID names the file a table lives in (Open): random, new with every
// new file, so that state kept beside the table can say which table it
// belongs to. 0 for a table in anonymous memory (New).
func (t *Table) FileID() uint64 { return t.fileID }

// repair makes a table left by a killed process consistent before any
// worker uses it: every bucket unlocked, every slot a writer was inside
// (odd sequence: its words may be a mix of two entries) cleared, and every
// home's reach fitted to the keys that remain (a writer killed between
// storing an entry and widening its home's reach would otherwise leave it
// out of lookups), and the counters recounted (recount). It returns how
// many slots it cleared. No concurrent use.
func (t *Table) repair() (torn int) {
	for bi := range t.buckets {
		b := &t.buckets[bi]
		for i := range slotsPerBucket {
			h := b.slots[i].hdr.Load()
			if hdrSeq(h)&1 != 0 {
				// seq+1: even again, and different from what any
				// reader saw.
				// What the slot keeps as a home (reach, spill) stays.
				b.slots[i].hdr.Store(uint64(hdrSeq(h)+1)<<32 | h&homeBits)
				torn++
			}
		}
		for home := range slotsPerBucket {
			b.fitReach(home)
		}
		// Unlocked last: fitReach writes headers as a lock holder does,
		// and one of slot 0 keeps the lock bit set.
		h0 := &b.slots[0].hdr
		h0.Store(h0.Load() &^ lockBit)
	}
	t.recount()
	return torn
}

// Reset empties the table: control plane use before workers run (a table
// kept in a file whose companion state was lost), counters included. No
// concurrent use.
func (t *Table) Reset() {
	if len(t.buckets) == 0 {
		return
	}
	b := unsafe.Slice((*byte)(unsafe.Pointer(&t.buckets[0])), len(t.buckets)*int(unsafe.Sizeof(bucket{})))
	clear(b)
	for i := range t.stats {
		t.stats[i] = stripe{}
	}
}

// recount sets the counters of a table another process filled (kept or
// migrated by Open): the entries stored count as inserts, so that Len
// starts right, and nothing else; what a migration's Upserts counted
// (evictions of a smaller table, spills) was the move, not traffic. No
// concurrent use.
func (t *Table) recount() {
	for i := range t.stats {
		t.stats[i] = stripe{}
	}
	for bi := range t.buckets {
		used := 0
		for i := range slotsPerBucket {
			if t.buckets[bi].slots[i].hdr.Load()&hdrUsed != 0 {
				used++
			}
		}
		t.stats[uint64(bi)&uint64(len(t.stats)-1)].inserts.Add(uint64(used))
	}
}

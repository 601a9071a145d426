package conntrack

// Table file layouts (Open): the number in a file's header says how its
// slots are encoded and what an entry means. A binary writes the layout of
// its own bucket geometry (fileLayout, from the build) and migrates a file
// of any layout it reads (readableLayout).
const (
	// layout2: two buckets per key (alt and spill bits in the slot
	// header), half-open entries (value bit 63), 64-byte slots, eight per
	// bucket. What ships. A key whose hash fields pick one bucket twice
	// once had that bucket alone; it now has the neighbour as its second
	// (Table.hint). Every placement of the older binaries is still valid,
	// so their files are kept as they are; an older binary reading a
	// newer file clears as misplaced only such keys stored in the
	// neighbour, a few in a table.
	layout2 = 2
	// layoutTest4 is a test-only layout that never ships: layout 2's slot
	// encoding with four slots per bucket, built with the tag
	// xlb_ct_layout_alt, so that tests can replace a binary by one of
	// another table layout and back. Its number cannot be mistaken for a
	// shipped layout's.
	layoutTest4 = 0x7e57_0002
)

// readableLayout reports whether Open can migrate a file of layout l:
// every layout whose slots it can decode (slotWords). Both known layouts
// encode a slot alike; only their geometry, which the header gives,
// differs.
func readableLayout(l uint32) bool { return l == layout2 || l == layoutTest4 }

//go:build xlb_ct_layout_alt

package conntrack

// A test build's geometry (tag xlb_ct_layout_alt, never shipped): four
// slots per bucket, file layout layoutTest4. scripts/e2e runs a binary of
// each build on one state_dir to show that flows survive a change of table
// layout both ways.
const (
	slotsPerBucket = 4
	fileLayout     = layoutTest4
)

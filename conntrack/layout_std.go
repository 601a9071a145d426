//go:build !xlb_ct_layout_alt

package conntrack

// The shipped bucket geometry: eight slots per bucket, file layout 2.
const (
	slotsPerBucket = 8
	fileLayout     = layout2
)

package healthcheck

import "testing"

// TestThresholds: a target starts unhealthy and changes state only after the
// threshold of consecutive results; anything faster does not flap it.
func TestThresholds(t *testing.T) {
	for _, tc := range []struct {
		name       string
		up, down   int
		seq        string // p: pass, f: fail
		want       string // state after each: u unhealthy, H healthy
		changesAtI []int
	}{
		{"starts unhealthy, never answered", 2, 2, "ffff", "uuuu", nil},
		{"healthy after 2 passes", 2, 2, "pp", "uH", []int{1}},
		{"threshold 1", 1, 1, "pfp", "HuH", []int{0, 1, 2}},
		{"a failure resets the passes", 3, 2, "ppfpppp", "uuuuuHH", []int{5}},
		{"unhealthy after 3 failures", 1, 3, "pfffp", "HHHuH", []int{0, 3, 4}},
		{"flapping faster than the thresholds, healthy", 2, 2, "ppfpfpfpfp", "uHHHHHHHHH", []int{1}},
		{"flapping faster than the thresholds, never healthy", 2, 2, "pfpfpfpf", "uuuuuuuu", nil},
		{"thresholds below 1 count as 1", 0, 0, "pf", "Hu", []int{0, 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var h health
			var changes []int
			got := ""
			for i, c := range tc.seq {
				if h.record(c == 'p', tc.up, tc.down) {
					changes = append(changes, i)
				}
				if h.healthy {
					got += "H"
				} else {
					got += "u"
				}
			}
			if got != tc.want || len(changes) != len(tc.changesAtI) {
				t.Fatalf("%s: states %s changes at %v, want %s at %v", tc.seq, got, changes, tc.want, tc.changesAtI)
			}
			for i := range changes {
				if changes[i] != tc.changesAtI[i] {
					t.Fatalf("changes at %v, want %v", changes, tc.changesAtI)
				}
			}
		})
	}
}

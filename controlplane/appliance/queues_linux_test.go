package appliance

import (
	"strings"
	"testing"

	"github.com/vishvananda/netlink"

	"xlb/config"
)

// TestRxQueueCount: "all" queues is the rx queue count the kernel reports
// (ETHTOOL_GCHANNELS) for the interface of this namespace: a veth made with
// 3 rx queues.
func TestRxQueueCount(t *testing.T) {
	n := newRunNS(t)
	var got int
	err := n.Do(func() error {
		veth := &netlink.Veth{
			LinkAttrs: netlink.LinkAttrs{Name: "xrt-q3", NumRxQueues: 3, NumTxQueues: 1},
			PeerName:  "xrt-q3p", PeerNumRxQueues: 1, PeerNumTxQueues: 1,
		}
		if err := netlink.LinkAdd(veth); err != nil {
			return err
		}
		// No netlink count to fall back on: the answer is ethtool's.
		var err error
		got, err = rxQueueCount("xrt-q3", 0)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if got != 3 {
		t.Errorf("rxQueueCount = %d, want 3", got)
	}
}

func TestResolveQueues(t *testing.T) {
	for _, tc := range []struct {
		name   string
		d      config.Dataplane
		count  int
		queues []int
		cpus   []int
		err    string
	}{
		{"all", config.Dataplane{AllQueues: true}, 3, []int{0, 1, 2}, []int{-1, -1, -1}, ""},
		{"all pinned", config.Dataplane{AllQueues: true, CPUs: []int{4, 5}}, 2, []int{0, 1}, []int{4, 5}, ""},
		{"listed", config.Dataplane{Queues: []int{2, 0}, CPUs: []int{1, 0}}, 4, []int{2, 0}, []int{1, 0}, ""},
		{"queue beyond", config.Dataplane{Queues: []int{0, 4}}, 4, nil, nil, "queue 4 but xrt0 has 4 rx queue(s) (0..3)"},
		{"all, cpus of another count", config.Dataplane{AllQueues: true, CPUs: []int{0}}, 2, nil, nil, "1 CPU(s) for the 2 rx queue(s)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			qs, cpus, err := resolveQueues(&tc.d, "xrt0", tc.count)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !equalInts(qs, tc.queues) || !equalInts(cpus, tc.cpus) {
				t.Errorf("queues %v cpus %v, want %v %v", qs, cpus, tc.queues, tc.cpus)
			}
		})
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

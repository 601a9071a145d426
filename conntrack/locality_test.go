package conntrack

import "testing"

// TestLocality_HalfLoad checks the package doc's locality figure on the
// two-bucket layout: at half load about three keys in four sit in their
// home slot and nearly nine in ten within its 128-byte block (the first
// two slots of the probe order), which is why lookups read one line.
func TestLocality_HalfLoad(t *testing.T) {
	tb := mustNew(t, 1<<16)
	for i := 0; i < tb.Capacity()/2; i++ {
		k := key5(i)
		if r := tb.Upsert(&k, val(i), 1); r != Inserted {
			t.Fatalf("insert %d at half load: %v", i, r)
		}
	}
	var used, home, block int
	for bi := range tb.buckets {
		for j := range tb.buckets[bi].slots {
			h := tb.buckets[bi].slots[j].hdr.Load()
			if h&hdrUsed == 0 {
				continue
			}
			used++
			if hdrHome(h) == j {
				home++
			}
			if hdrHome(h)>>1 == j>>1 {
				block++
			}
		}
	}
	homeShare, blockShare := float64(home)/float64(used), float64(block)/float64(used)
	t.Logf("half load: %d keys, %.3f in their home slot, %.3f in its block", used, homeShare, blockShare)
	if used != tb.Capacity()/2 || homeShare < 0.70 || blockShare < 0.85 {
		t.Errorf("half load: %d keys stored of %d, %.3f in home slot (want ≥ 0.70), %.3f in its block (want ≥ 0.85)",
			used, tb.Capacity()/2, homeShare, blockShare)
	}
}

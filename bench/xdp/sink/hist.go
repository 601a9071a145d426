package sink

import "math/bits"

// Histogram counts nanosecond values in log-linear buckets: exact below
// subBuckets, and with subBuckets buckets per power of two above, so a
// value's bucket is within 1/subBuckets (3%) of it. Fixed size, no
// allocation per value.
type Histogram struct {
	Counts [numBuckets]uint64
	N      uint64
	Sum    uint64 // of the values, for the mean
	Max    uint64
}

const (
	subBits    = 5
	subBuckets = 1 << subBits
	maxExp     = 40 // values up to 2^40 ns (18 minutes); more are clamped
	numBuckets = (maxExp - subBits + 2) * subBuckets
)

// bucket returns v's bucket index.
func bucket(v uint64) int {
	if v < subBuckets {
		return int(v)
	}
	e := bits.Len64(v) - subBits - 1 // v>>e is in [subBuckets, 2*subBuckets)
	if e > maxExp-subBits {
		return numBuckets - 1
	}
	return (e+1)*subBuckets + int(v>>e) - subBuckets
}

// lowest returns the smallest value of bucket i.
func lowest(i int) uint64 {
	if i < subBuckets {
		return uint64(i)
	}
	e := i/subBuckets - 1
	return uint64(subBuckets+i%subBuckets) << e
}

// Add counts v.
func (h *Histogram) Add(v uint64) {
	h.Counts[bucket(v)]++
	h.N++
	h.Sum += v
	if v > h.Max {
		h.Max = v
	}
}

// Merge adds o's counts to h.
func (h *Histogram) Merge(o *Histogram) {
	for i, c := range o.Counts {
		h.Counts[i] += c
	}
	h.N += o.N
	h.Sum += o.Sum
	h.Max = max(h.Max, o.Max)
}

// Quantile returns the value below which a fraction q (0..1) of the values
// lie: the middle of the bucket that holds the ceil(q*N)-th smallest value,
// never above Max. 0 when empty.
func (h *Histogram) Quantile(q float64) uint64 {
	if h.N == 0 {
		return 0
	}
	rank := uint64(q*float64(h.N) + 0.5)
	rank = min(max(rank, 1), h.N)
	var seen uint64
	for i, c := range h.Counts {
		seen += c
		if seen >= rank {
			lo := lowest(i)
			hi := lo
			if i+1 < numBuckets {
				hi = lowest(i+1) - 1
			}
			return min(lo+(hi-lo)/2, h.Max)
		}
	}
	return h.Max
}

// Mean returns the mean value (0 when empty).
func (h *Histogram) Mean() float64 {
	if h.N == 0 {
		return 0
	}
	return float64(h.Sum) / float64(h.N)
}

// Above returns how many values were at least v (to the bucket: values in
// v's bucket count).
func (h *Histogram) Above(v uint64) uint64 {
	var n uint64
	for i := bucket(v); i < numBuckets; i++ {
		n += h.Counts[i]
	}
	return n
}

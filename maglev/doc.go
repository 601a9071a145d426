// Package maglev builds weighted, deterministic Maglev lookup tables
// (SPEC S1–S5). Two processes given the same backends and weights build
// bit-identical tables.
//
// # Algorithm
//
// Maglev (Eisenbud et al., NSDI 2016) with weights. Everything below is part
// of the table format: another implementation that follows it builds the same
// table, and changing any of it changes every table (S5), so it MUST NOT
// change.
//
//  1. Backends are sorted by Key, bytewise (strings.Compare). Keys must be
//     unique. The build never depends on the order of the caller's slice.
//  2. Weights: if every weight is 0 every weight counts as 1 (W1b); otherwise
//     a backend of weight 0 takes no slot and is left out of the steps below.
//  3. Each remaining backend gets a permutation of the M table slots (M prime):
//     offset = h1(Key) mod M, skip = h2(Key) mod (M-1) + 1, and its j-th
//     preference is (offset + j·skip) mod M. Since M is prime and
//     0 < skip < M, this visits every slot exactly once.
//  4. Population, in rounds. In each round every backend, in Key order, adds
//     its weight to its accumulator (initially 0); if the accumulator is then
//     ≥ W, the largest weight, the accumulator drops by W and the backend
//     takes its next preferred slot that is still free. Population stops as
//     soon as all M slots are taken, possibly in the middle of a round.
//     A backend of the largest weight takes a slot every round, one of weight
//     w on average w/W per round, so its share approaches w / Σ weights. With
//     equal weights this is plain Maglev.
//
// # Hash
//
// h1 and h2 are 64-bit FNV-1a of the Key's bytes followed by one extra
// byte (0x01 for h1, 0x02 for h2), passed through MurmurHash3's 64-bit
// finalizer fmix64:
//
//	fnv(data)  : h = 14695981039346656037
//	             for each byte c: h ^= c; h *= 1099511628211   (mod 2^64)
//	fmix64(k)  : k ^= k >> 33; k *= 0xff51afd7ed558ccd
//	             k ^= k >> 33; k *= 0xc4ceb9fe1a85ec53
//	             k ^= k >> 33
//	h1(Key)    = fmix64(fnv(Key || 0x01))
//	h2(Key)    = fmix64(fnv(Key || 0x02))
//
// FNV-1a alone mixes its last bytes poorly (keys that differ only in a final
// digit would get nearby values); the finalizer spreads every input bit over
// the whole word before the reductions mod M and mod M-1.
//
// # Lookup
//
// Lookup(table, h) is table[h mod M], where h is the selection hash (§2).
package maglev

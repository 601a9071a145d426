package maglev

// The key hashes h1 and h2 of the package documentation. They are part of the
// table format (S5): they MUST NOT change.

const (
	fnvOffset64 = 14695981039346656037
	fnvPrime64  = 1099511628211
)

// keyHashes returns h1(key) and h2(key): FNV-1a-64 of key followed by the
// byte 1 (h1) or 2 (h2), each finished by fmix64. The common prefix is
// hashed once.
func keyHashes(key string) (h1, h2 uint64) {
	h := uint64(fnvOffset64)
	for i := 0; i < len(key); i++ {
		h ^= uint64(key[i])
		h *= fnvPrime64
	}
	return fmix64((h ^ 1) * fnvPrime64), fmix64((h ^ 2) * fnvPrime64)
}

// fmix64 is MurmurHash3's 64-bit finalizer: every input bit affects every
// output bit.
func fmix64(k uint64) uint64 {
	k ^= k >> 33
	k *= 0xff51afd7ed558ccd
	k ^= k >> 33
	k *= 0xc4ceb9fe1a85ec53
	k ^= k >> 33
	return k
}

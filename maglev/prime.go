package maglev

// IsPrime reports whether n is prime. Trial division by 6k±1 up to √n: at
// most ~22k divisions for a uint32, and it runs only when a table size is
// validated.
func IsPrime(n uint32) bool {
	if n < 4 {
		return n >= 2
	}
	if n%2 == 0 || n%3 == 0 {
		return false
	}
	// uint64 so that i*i cannot overflow near 2^32.
	for i := uint64(5); i*i <= uint64(n); i += 6 {
		if uint64(n)%i == 0 || uint64(n)%(i+2) == 0 {
			return false
		}
	}
	return true
}

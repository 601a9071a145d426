package healthcheck

import (
	"fmt"
	"net/http"
	"strconv"
)

// parseWeight reads the weight report of a 200 reply's header (W1, W1a).
// The header parser has already stripped the whitespace around the value.
func parseWeight(h http.Header) (uint32, WeightState, string) {
	vs := h.Values(WeightHeader)
	switch {
	case len(vs) == 0:
		return 0, WeightMissing, "no " + WeightHeader + " header"
	case len(vs) > 1:
		return 0, WeightInvalid, fmt.Sprintf("%s given %d times", WeightHeader, len(vs))
	}
	v := vs[0]
	if !digits(v) {
		return 0, WeightInvalid, fmt.Sprintf("%s %q is not a decimal integer", WeightHeader, clip(v))
	}
	n, err := strconv.ParseUint(v, 10, 32)
	if err != nil || n > MaxWeight {
		return 0, WeightInvalid, fmt.Sprintf("%s %q is outside 0..%d", WeightHeader, clip(v), MaxWeight)
	}
	return uint32(n), WeightValid, ""
}

// digits reports a non-empty string of ASCII digits: no sign, no blanks, no
// fraction, which strconv alone would let through ("+7") or not say why.
func digits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// clip shortens what a backend sent before it goes into a log line.
func clip(s string) string {
	const n = 32
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

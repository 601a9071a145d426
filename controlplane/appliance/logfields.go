package appliance

import (
	"net/netip"

	"go.uber.org/zap"
)

// addrField logs an address that may be absent (no IPv6 address on the
// interface, say) as "none" rather than the zero Addr's "invalid IP",
// which reads like an error.
func addrField(key string, a netip.Addr) zap.Field {
	if !a.IsValid() {
		return zap.String(key, "none")
	}
	return zap.Stringer(key, a)
}

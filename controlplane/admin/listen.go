package admin

import (
	"fmt"
	"net"
	"net/netip"
	"strings"
)

// loopbackOnly reports whether a host:port listens on loopback only. An
// empty host or an unspecified address listens on every interface; a
// name other than localhost is not resolved and counts as not loopback.
func loopbackOnly(listen string) (bool, error) {
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return false, fmt.Errorf("admin: listen %q: %w", listen, err)
	}
	if strings.EqualFold(host, "localhost") {
		return true, nil
	}
	a, err := netip.ParseAddr(host)
	return err == nil && a.IsLoopback(), nil
}

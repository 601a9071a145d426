package appliance

import (
	"net/netip"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// TestAddrField: an absent address is logged as "none", a present one as
// itself (the encapsulation sources and BGP next hops at start).
func TestAddrField(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	zap.New(core).Info("local addresses", addrField("encap_src_v4", netip.MustParseAddr("192.0.2.1")),
		addrField("encap_src_v6", netip.Addr{}))
	got := logs.All()[0].ContextMap()
	if got["encap_src_v4"] != "192.0.2.1" || got["encap_src_v6"] != "none" {
		t.Errorf("logged %v, want encap_src_v4 192.0.2.1 and encap_src_v6 none", got)
	}
}

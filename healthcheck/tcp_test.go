package healthcheck

import (
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"xlb/config"
)

// tcpServer accepts connections on 127.0.0.1 and writes banner to each.
func tcpServer(t *testing.T, banner string) netip.AddrPort {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = c.Write([]byte(banner))
				_ = c.SetReadDeadline(time.Now().Add(time.Second))
				_, _ = c.Read(make([]byte, 1))
			}()
		}
	}()
	return netip.MustParseAddrPort(ln.Addr().String())
}

func tcpTarget(ap netip.AddrPort, response string) Target {
	ck := httpCheck(int(ap.Port()))
	ck.Type, ck.RequestPath, ck.Response = config.CheckTCP, "", response
	return Target{Key: "t", Addr: ap.Addr(), Check: ck}
}

// TestTCP_Verdicts: a TCP check passes when the connection opens (and the
// backend's first bytes start with the response, when one is set); it
// reports no weight.
func TestTCP_Verdicts(t *testing.T) {
	banner := tcpServer(t, "+OK ready\r\n")
	silent := tcpServer(t, "")
	for _, tc := range []struct {
		name     string
		ap       netip.AddrPort
		response string
		pass     bool
		reason   string
	}{
		{"connects", banner, "", true, "TCP connected"},
		{"banner matches", banner, "+OK", true, "response matches"},
		{"banner differs", banner, "-ERR", false, `sent "+OK ", not "-ERR"`},
		{"nothing sent", silent, "+OK", false, "timed out after 200ms"},
		{"refused", closedPort(t), "", false, "connection refused"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tg := tcpTarget(tc.ap, tc.response)
			if tc.ap == silent {
				tg.Check.Timeout = 200 * time.Millisecond
			}
			o := probe1(t, tg)
			if o.pass != tc.pass || o.state != WeightNone || !strings.Contains(o.reason, tc.reason) {
				t.Errorf("%+v, want pass %v, no weight, reason containing %q", o, tc.pass, tc.reason)
			}
		})
	}
}

package cptest

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"xlb/dataplane/craft"
	"xlb/quiclb"
)

// QUICKey is the AES-128 key of QUICText's encrypted configuration.
var QUICKey, _ = hex.DecodeString("8f95f09245765f80256934e50c66207f")

// QUICText is testdata/quic/service.toml, the QUIC-LB tests' service on
// 203.0.113.10 UDP 443 (endpoints q1..q3 with server IDs 0001..0003, q4
// without): rotation 1 in the clear (server ID 2, nonce 6), rotation 2
// encrypted with QUICKey, whose key file it writes, and a nonce of nonce2
// octets (14: one AES pass; else four).
func QUICText(tb testing.TB, nonce2 int) string {
	tb.Helper()
	_, here, _, _ := runtime.Caller(0)
	data, err := os.ReadFile(filepath.Join(filepath.Dir(here), "..", "..", "testdata", "quic", "service.toml"))
	if err != nil {
		tb.Fatal(err)
	}
	key := filepath.Join(tb.TempDir(), "quic-lb.key")
	if err := os.WriteFile(key, []byte(hex.EncodeToString(QUICKey)+"\n"), 0o600); err != nil {
		tb.Fatal(err)
	}
	return strings.NewReplacer("KEYFILE", key, "NONCE2", fmt.Sprint(nonce2)).Replace(string(data))
}

// QUICConfigs are the configurations QUICText's servers use: rotation 1
// (plaintext) and rotation 2 (encrypted, nonce of nonce2 octets).
func QUICConfigs(tb testing.TB, nonce2 int) (plain, enc *quiclb.Config) {
	tb.Helper()
	plain, err := quiclb.New(1, 2, 6, nil)
	if err != nil {
		tb.Fatal(err)
	}
	enc, err = quiclb.New(2, 2, nonce2, QUICKey)
	if err != nil {
		tb.Fatal(err)
	}
	return plain, enc
}

// QUICCID is a connection ID of configuration c for server ID sid (hex);
// n makes the nonce, as a server's differ per connection.
func QUICCID(tb testing.TB, c *quiclb.Config, sid string, n int) []byte {
	tb.Helper()
	s, err := hex.DecodeString(sid)
	if err != nil {
		tb.Fatal(err)
	}
	nonce := make([]byte, c.NonceLen())
	binary.BigEndian.PutUint32(nonce, uint32(n)*2654435761)
	id, err := c.Encode(nil, s, nonce, nil)
	if err != nil {
		tb.Fatal(err)
	}
	return id
}

// QUICShort is a QUIC short-header packet to dcid.
func QUICShort(dcid []byte) []byte { return craft.QUICPayload(craft.QUICShort, dcid) }

// QUICLong is a QUIC version 1 long-header packet of type typ (0 Initial,
// 1 0-RTT, 2 Handshake) to dcid.
func QUICLong(typ byte, dcid []byte) []byte {
	return craft.QUICPayload(craft.QUICInitial+craft.QUICType(typ), dcid)
}

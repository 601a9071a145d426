// Package quiclb reads and writes QUIC connection IDs that carry a server
// ID, as the IETF's QUIC-LB draft (draft-ietf-quic-load-balancers,
// "Generating Routable QUIC Connection IDs") defines them, so that a
// balancer that holds the same configuration as the servers routes a
// connection by its ID, whatever the client's address and port.
//
// # Connection ID
//
// A routable connection ID is one octet, then the server ID, then a nonce,
// then (optionally) bytes the server keeps for itself:
//
//	first octet | server ID (1..15) | nonce (4..18) | server's own bytes
//	CR(3) LEN(5)  └───── plaintext block: server ID + nonce ≤ 19 ─────┘
//
// The first octet's three high bits (CR) name the configuration the ID was
// made with: 0 to 6, so that a new key or new lengths can roll out while
// IDs of the old one live; 0b111 means the server had no configuration and
// the ID is unroutable. Its five low bits are the length of the rest of the
// ID (the servers here always write it; the balancer does not rely on it).
//
// A configuration without a key leaves the block in the clear. With an
// AES-128 key the block is encrypted: as one AES block when server ID and
// nonce are exactly 16 octets, otherwise by a four-round Feistel network
// whose round function is AES of the expanded half (see feistel.go). The
// balancer needs only three of the four rounds back when the server ID
// fits in the left half.
//
// # Who uses it
//
// The data plane decodes (Config.ServerID): no allocation, no lock, the
// caller's Scratch holding the AES work. The test bed's QUIC server and the
// tests encode (Config.Encode). DCID finds the destination connection ID
// of a QUIC packet and says which kind of packet carries it.
package quiclb

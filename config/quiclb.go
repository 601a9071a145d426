package config

import (
	"bytes"
	"encoding/hex"

	"xlb/quiclb"
)

// maxQUICLBConfigs: two configurations at a time, so that a new key or
// new lengths roll out under a second config rotation value while the
// IDs of the first still live.
const maxQUICLBConfigs = 2

// quicLB converts a service's [[backend_service.quic_lb]] and checks its
// endpoints' server IDs against them.
func (c *converter) quicLB(p string, s *Service, r *rawService) {
	qp := c.at(p, ".quic_lb")
	if len(r.QUICLB) > 0 && s.Protocol != ServiceUDP {
		c.add(qp, "QUIC-LB applies to UDP services only, not %s", s.Protocol)
	}
	if len(r.QUICLB) > maxQUICLBConfigs {
		c.add(qp, "has %d configurations; at most %d are allowed (one in use, one rolling out)", len(r.QUICLB), maxQUICLBConfigs)
	}
	byRotation := map[uint8]int{}
	for i := range r.QUICLB {
		ip := c.index(qp, i)
		raw := &r.QUICLB[i]
		q := QUICLB{
			Rotation:    uint8(c.integer(c.at(ip, ".config_rotation"), raw.ConfigRotation, 0, 0, quiclb.MaxRotation)),
			ServerIDLen: int(c.integer(c.at(ip, ".server_id_length"), raw.ServerIDLength, 0, quiclb.MinServerIDLen, quiclb.MaxServerIDLen)),
			NonceLen:    int(c.integer(c.at(ip, ".nonce_length"), raw.NonceLength, 0, quiclb.MinNonceLen, quiclb.MaxBlockLen-quiclb.MinServerIDLen)),
		}
		c.required(c.at(ip, ".config_rotation"), raw.ConfigRotation)
		c.required(c.at(ip, ".server_id_length"), raw.ServerIDLength)
		c.required(c.at(ip, ".nonce_length"), raw.NonceLength)
		if q.ServerIDLen > 0 && q.NonceLen > 0 && q.ServerIDLen+q.NonceLen > quiclb.MaxBlockLen {
			c.add(c.at(ip, ".nonce_length"), "server_id_length %d + nonce_length %d is %d; QUIC's 20-octet connection IDs allow at most %d",
				q.ServerIDLen, q.NonceLen, q.ServerIDLen+q.NonceLen, quiclb.MaxBlockLen)
		}
		if name, ok := c.text(c.at(ip, ".key_file"), raw.KeyFile); ok {
			q.KeyFile, q.Key = name, c.quicLBKey(c.at(ip, ".key_file"), name)
		}
		if raw.ConfigRotation.set {
			if j, dup := byRotation[q.Rotation]; dup {
				c.add(c.at(ip, ".config_rotation"), "%d is already the config rotation of %s", q.Rotation, c.index(qp, j))
			} else {
				byRotation[q.Rotation] = i
			}
		}
		// One allocation of server IDs serves every configuration, so
		// their server ID lengths agree.
		if i > 0 && q.ServerIDLen != 0 && s.QUICLB[0].ServerIDLen != 0 && q.ServerIDLen != s.QUICLB[0].ServerIDLen {
			c.add(c.at(ip, ".server_id_length"), "%d differs from %s's %d: an endpoint has one server ID for every configuration",
				q.ServerIDLen, c.index(qp, 0), s.QUICLB[0].ServerIDLen)
		}
		s.QUICLB = append(s.QUICLB, q)
	}
	c.serverIDs(p, s)
}

// quicLBKey reads a QUIC-LB key file: one line of 32 hex digits (an
// AES-128 key), kept as secret as flow sync's (secretFile).
func (c *converter) quicLBKey(path, name string) []byte {
	data, ok := c.secretFile(path, name, c.runAs, "one line of 32 hex digits")
	if !ok {
		return nil
	}
	line := bytes.TrimSpace(data)
	key := make([]byte, quiclb.KeyLen)
	ok = len(line) == 2*len(key)
	if ok {
		_, err := hex.Decode(key, line)
		ok = err == nil
	}
	if !ok {
		c.add(path, "%s does not hold one line of %d hex digits (an AES-128 key of %d octets)", name, 2*quiclb.KeyLen, quiclb.KeyLen)
		return nil
	}
	return key
}

// serverIDs checks each endpoint's server ID: only where the service has
// QUIC-LB, of its length, once per service.
func (c *converter) serverIDs(p string, s *Service) {
	want := 0
	if len(s.QUICLB) > 0 {
		want = s.QUICLB[0].ServerIDLen
	}
	type where struct{ group, endpoint int }
	var seen []where
	for j := range s.Groups {
		for k := range s.Groups[j].Endpoints {
			e := &s.Groups[j].Endpoints[k]
			if e.ServerID == nil {
				continue
			}
			ep := c.at(c.index(c.at(c.index(c.at(p, ".backend"), j), ".endpoints"), k), ".server_id")
			switch {
			case len(s.QUICLB) == 0:
				c.add(ep, "applies only to a service with [[backend_service.quic_lb]]")
				continue
			case want != 0 && len(e.ServerID) != want:
				c.add(ep, "has %d octets; server_id_length is %d", len(e.ServerID), want)
				continue
			}
			for _, w := range seen {
				if bytes.Equal(s.Groups[w.group].Endpoints[w.endpoint].ServerID, e.ServerID) {
					c.add(ep, "%x is already the server ID of %s", e.ServerID,
						c.index(c.at(c.index(c.at(p, ".backend"), w.group), ".endpoints"), w.endpoint))
					break
				}
			}
			seen = append(seen, where{j, k})
		}
	}
}

// serverID parses an endpoint's server_id: hex digits, an even number.
func (c *converter) serverID(path string, v val) []byte {
	s, ok := c.text(path, v)
	if !ok {
		return nil
	}
	b, err := hex.DecodeString(s)
	if err != nil || len(b) == 0 {
		c.add(path, "%q is not a server ID in hex, like \"0a1b2c\"", s)
		return nil
	}
	return b
}

package bgp

import (
	"xlb/config"
)

// Neighbors are the sessions of a [bgp] section, each with the section's
// hold time; nil for nil.
func Neighbors(b *config.BGP) []Neighbor {
	if b == nil {
		return nil
	}
	out := make([]Neighbor, 0, len(b.Neighbors))
	for _, n := range b.Neighbors {
		out = append(out, Neighbor{Address: n.Address, ASN: n.ASN, Port: n.Port, Password: n.Password,
			MultihopTTL: n.MultihopTTL, HoldTime: b.HoldTime})
	}
	return out
}

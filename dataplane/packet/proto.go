package packet

import (
	"fmt"
	"strconv"
	"strings"
)

// Proto is an IP protocol number: the IPv4 protocol field, an IPv6 next
// header. A typed uint8: free on the hot path.
type Proto uint8

// The IP protocol numbers xlb knows (IANA "Assigned Internet Protocol
// Numbers"), IPv6 extension headers included.
const (
	ProtoHopByHop Proto = 0
	ProtoICMP     Proto = 1
	ProtoIPIP     Proto = 4
	ProtoTCP      Proto = 6
	ProtoUDP      Proto = 17
	ProtoIPv6     Proto = 41
	ProtoRouting  Proto = 43
	ProtoFragment Proto = 44
	ProtoGRE      Proto = 47
	ProtoESP      Proto = 50
	ProtoAH       Proto = 51
	ProtoICMPv6   Proto = 58
	ProtoNoNext   Proto = 59
	ProtoDstOpts  Proto = 60
)

// protoNames spells the known protocols as `xlb sim` and `xlb explain`
// read and write them (IANA keywords, lower case).
var protoNames = map[Proto]string{
	ProtoHopByHop: "hopopt",
	ProtoICMP:     "icmp",
	ProtoIPIP:     "ipip",
	ProtoTCP:      "tcp",
	ProtoUDP:      "udp",
	ProtoIPv6:     "ipv6",
	ProtoRouting:  "ipv6-route",
	ProtoFragment: "ipv6-frag",
	ProtoGRE:      "gre",
	ProtoESP:      "esp",
	ProtoAH:       "ah",
	ProtoICMPv6:   "icmpv6",
	ProtoNoNext:   "ipv6-nonxt",
	ProtoDstOpts:  "ipv6-opts",
}

// String is the protocol's name (tcp, udp, icmp, icmpv6, esp, gre, ...),
// or its number when it has none here.
func (p Proto) String() string {
	if n, ok := protoNames[p]; ok {
		return n
	}
	return strconv.Itoa(int(p))
}

// ParseProto reads what String writes, in any case: a name or a number
// 0..255.
func ParseProto(s string) (Proto, error) {
	l := strings.ToLower(s)
	for p, n := range protoNames {
		if n == l {
			return p, nil
		}
	}
	n, err := strconv.ParseUint(s, 10, 8)
	if err != nil {
		return 0, fmt.Errorf("proto %q: want tcp, udp, icmp, icmpv6, esp, gre or a number 0..255", s)
	}
	return Proto(n), nil
}

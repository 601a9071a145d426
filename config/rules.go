package config

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// portSpan is what a rule takes of one VIP and protocol, kept to find
// overlaps (FR7) with the paths to blame.
type portSpan struct {
	rule    int
	vip     netip.Addr
	proto   RuleProtocol
	all     bool
	allPath string
	ranges  []PortRange
	texts   []string // the ranges as written
	paths   []string
}

// spanKey is what two rules must share to overlap (FR7).
type spanKey struct {
	vip   netip.Addr
	proto RuleProtocol
}

// serviceProtocolFor is the service protocol each rule protocol pairs with
// (FR7).
var serviceProtocolFor = [...]ServiceProtocol{
	RuleTCP:       ServiceTCP,
	RuleUDP:       ServiceUDP,
	RuleL3Default: ServiceUnspecified,
}

func (c *converter) rules(cfg *Config, raw []rawRule) {
	byName := make(map[string]int, len(raw))
	// The earlier spans of each VIP and protocol, in file order: FR7 only
	// compares rules that share both, so the check is linear in the file.
	spans := make(map[spanKey][]portSpan, len(raw))
	cfg.Rules = make([]ForwardingRule, 0, len(raw))
	for i := range raw {
		r := &raw[i]
		p := c.index("forwarding_rule", i)
		fr := ForwardingRule{Name: c.name(c.at(p, ".name"), r.Name), Service: -1}
		c.unique(c.at(p, ".name"), fr.Name, "forwarding_rule", i, byName)
		fr.VIP = c.requiredHostAddr(c.at(p, ".ip_address"), r.IPAddress)
		proto := -1
		if c.required(c.at(p, ".ip_protocol"), r.IPProtocol) {
			proto = c.enum(c.at(p, ".ip_protocol"), r.IPProtocol, ruleProtoNames[:], -1)
		}
		fr.Protocol = RuleProtocol(max(0, proto))

		before := len(c.errs)
		span := c.ports(p, r, &fr, proto)
		if proto >= 0 && fr.VIP.IsValid() && len(c.errs) == before {
			span.rule = i
			k := spanKey{span.vip, span.proto}
			c.overlaps(span, spans[k], cfg.Rules)
			spans[k] = append(spans[k], span)
		}
		c.sourceRanges(p, r, &fr)

		bp := c.at(p, ".backend_service")
		if c.required(bp, r.BackendService) {
			if name, ok := c.text(bp, r.BackendService); ok {
				if j, found := c.serviceByName[name]; !found {
					c.add(bp, "no backend_service is named %q", name)
				} else {
					fr.Service = j
					if want := serviceProtocolFor[fr.Protocol]; proto >= 0 && cfg.Services[j].Protocol != want {
						c.add(bp, "%q has protocol %s; a %s rule needs a backend_service of protocol %s",
							name, cfg.Services[j].Protocol, fr.Protocol, want)
					}
				}
			}
		}
		cfg.Rules = append(cfg.Rules, fr)
	}
}

// ports reads ports, port_range and all_ports (FR3) into fr. proto is the
// rule protocol, -1 when unknown.
func (c *converter) ports(p string, r *rawRule, fr *ForwardingRule, proto int) portSpan {
	span := portSpan{vip: fr.VIP, proto: RuleProtocol(max(0, proto))}
	allPorts := c.boolean(c.at(p, ".all_ports"), r.AllPorts, false)
	var given []string // in the order the checks below blame them
	if r.Ports.set {
		given = append(given, "ports")
	}
	if r.PortRange.set {
		given = append(given, "port_range")
	}
	if allPorts {
		given = append(given, "all_ports")
	}
	if len(given) > 1 {
		c.add(c.at(p, "."+given[1]), "%s are mutually exclusive; set only one", strings.Join(given, " and "))
		return span
	}

	if list, ok := c.list(c.at(p, ".ports"), r.Ports); ok {
		switch {
		case len(list) == 0:
			c.add(c.at(p, ".ports"), "lists no port")
		case len(list) > maxPortsPerRule:
			c.add(c.at(p, ".ports"), "lists %d ports or ranges; at most %d are allowed", len(list), maxPortsPerRule)
		}
		for k, e := range list {
			ep := c.index(c.at(p, ".ports"), k)
			s, ok := c.text(ep, val{v: e, set: true})
			if !ok {
				continue
			}
			pr, ok := c.portRange(ep, s)
			if !ok {
				continue
			}
			for m, prev := range span.ranges {
				if overlap(pr, prev) {
					c.add(ep, "%q overlaps %q of the same rule", s, span.texts[m])
				}
			}
			span.ranges = append(span.ranges, pr)
			span.texts = append(span.texts, s)
			span.paths = append(span.paths, ep)
		}
	}
	if s, ok := c.text(c.at(p, ".port_range"), r.PortRange); ok {
		if s == allPortsRange {
			span.all, span.allPath = true, c.at(p, ".port_range")
		} else if pr, ok := c.portRange(c.at(p, ".port_range"), s); ok {
			span.ranges = []PortRange{pr}
			span.texts = []string{s}
			span.paths = []string{c.at(p, ".port_range")}
		}
	}
	if allPorts {
		span.all, span.allPath = true, c.at(p, ".all_ports")
	}

	switch {
	case proto == int(RuleL3Default):
		// L3_DEFAULT always takes every port; FR7 asks for it to be said.
		if !allPorts {
			if len(given) == 1 {
				c.add(c.at(p, "."+given[0]), "an L3_DEFAULT rule takes all ports; set all_ports = true instead")
			} else {
				c.add(c.at(p, ".all_ports"), "an L3_DEFAULT rule needs all_ports = true")
			}
		}
		span.all, span.allPath = true, c.at(p, ".all_ports")
	case proto >= 0 && len(given) == 0:
		c.add(c.at(p, ".ports"), "required: a %s rule needs ports, port_range or all_ports = true", RuleProtocol(proto))
	}
	if span.all {
		fr.AllPorts = true
	} else {
		fr.Ports = span.ranges
	}
	return span
}

// portRange parses "80" or "8000-8010".
func (c *converter) portRange(path, s string) (PortRange, bool) {
	first, last, isRange := strings.Cut(s, "-")
	if !isRange {
		last = first
	}
	a, errA := parsePort(first)
	b, errB := parsePort(last)
	switch {
	case errA != nil || errB != nil:
		c.add(path, "%q is not a port or a range like \"8000-8010\"", s)
	case a == 0 || b == 0:
		c.add(path, "%q: ports must be in [1, 65535]", s)
	case a > b:
		c.add(path, "%q: the first port is larger than the last", s)
	default:
		return PortRange{First: a, Last: b}, true
	}
	return PortRange{}, false
}

// parsePort takes decimal digits only (no sign, blanks or prefixes).
func parsePort(s string) (uint16, error) {
	if s == "" || strings.Trim(s, "0123456789") != "" {
		return 0, strconv.ErrSyntax
	}
	n, err := strconv.ParseUint(s, 10, 16)
	return uint16(n), err
}

func overlap(a, b PortRange) bool { return a.First <= b.Last && b.First <= a.Last }

// overlaps reports, at the later rule, each earlier rule with the same VIP and
// protocol that shares a port with it (FR7). Two L3_DEFAULT rules on one VIP
// always overlap, since both take all ports.
func (c *converter) overlaps(s portSpan, earlier []portSpan, rules []ForwardingRule) {
	for _, e := range earlier {
		if e.vip != s.vip || e.proto != s.proto {
			continue
		}
		what, path := "", ""
		switch {
		case s.all:
			what, path = "all ports", s.allPath
		case e.all && len(s.paths) > 0:
			what, path = strconv.Quote(s.texts[0]), s.paths[0]
		default:
			for k, pr := range s.ranges {
				for _, q := range e.ranges {
					if what == "" && overlap(pr, q) {
						what, path = strconv.Quote(s.texts[k]), s.paths[k]
					}
				}
			}
		}
		if what != "" {
			c.add(path, "%s overlaps forwarding_rule[%d] (%q) on %s %s",
				what, e.rule, rules[e.rule].Name, s.vip, s.proto)
		}
	}
}

// sourceRanges reads the allow-list of FR6.
func (c *converter) sourceRanges(p string, r *rawRule, fr *ForwardingRule) {
	sp := c.at(p, ".source_ip_ranges")
	list, ok := c.list(sp, r.SourceIPRanges)
	if !ok {
		return
	}
	if len(list) > maxSourceRanges {
		c.add(sp, "lists %d ranges; at most %d are allowed", len(list), maxSourceRanges)
	}
	for k, e := range list {
		ep := c.index(sp, k)
		s, ok := c.text(ep, val{v: e, set: true})
		if !ok {
			continue
		}
		pfx, ok := c.prefix(ep, s)
		if !ok {
			continue
		}
		// A range of the other family than the VIP could never match.
		if fr.VIP.IsValid() && pfx.Addr().Is4() != fr.VIP.Is4() {
			c.add(ep, "%s is %s but ip_address %s is %s", s, family(pfx.Addr()), fr.VIP, family(fr.VIP))
			continue
		}
		fr.SourceRanges = append(fr.SourceRanges, pfx)
	}
}

// prefix parses an address or a CIDR; an address is a /32 or a /128.
func (c *converter) prefix(path, s string) (netip.Prefix, bool) {
	var pfx netip.Prefix
	if strings.Contains(s, "/") {
		var err error
		if pfx, err = netip.ParsePrefix(s); err != nil {
			c.add(path, "%q is not an address or a CIDR", s)
			return pfx, false
		}
		if pfx != pfx.Masked() {
			c.add(path, "%s has host bits set; did you mean %s?", s, pfx.Masked())
			return pfx, false
		}
	} else {
		a, err := netip.ParseAddr(s)
		if err != nil || a.Zone() != "" {
			c.add(path, "%q is not an address or a CIDR", s)
			return pfx, false
		}
		pfx = netip.PrefixFrom(a, a.BitLen())
	}
	if pfx.Addr().Is4In6() {
		c.add(path, "%s is IPv4-mapped; write IPv4 ranges as IPv4", s)
		return pfx, false
	}
	return pfx, true
}

func family(a netip.Addr) string {
	if a.Is4() {
		return "IPv4"
	}
	return "IPv6"
}

// families checks L2_DSR services: the frame goes to the endpoint with the
// VIP still as destination, so an endpoint must be of the family of every
// VIP routed to its service. IPIP and GUE encapsulate and carry either.
func (c *converter) families(cfg *Config) {
	// firstRule[si][0] is the first rule with an IPv6 VIP routed to service
	// si, [1] the first with an IPv4 VIP; -1 when there is none. One pass
	// over the rules, so the check is linear in the file.
	firstRule := make([][2]int, len(cfg.Services))
	for i := range firstRule {
		firstRule[i] = [2]int{-1, -1}
	}
	for ri, r := range cfg.Rules {
		if r.Service < 0 || r.Service >= len(cfg.Services) || !r.VIP.IsValid() {
			continue
		}
		if f := &firstRule[r.Service][b2i(r.VIP.Is4())]; *f < 0 {
			*f = ri
		}
	}
	for si, s := range cfg.Services {
		if s.ForwardingMethod != ForwardL2DSR {
			continue
		}
		for j, g := range s.Groups {
			for k, e := range g.Endpoints {
				if !e.IP.IsValid() {
					continue
				}
				ri := firstRule[si][b2i(!e.IP.Is4())]
				if ri < 0 {
					continue
				}
				vip := cfg.Rules[ri].VIP
				c.add(fmt.Sprintf("backend_service[%d].backend[%d].endpoints[%d].ip", si, j, k),
					"%s endpoint %s cannot serve %s VIP %s of forwarding_rule[%d] with forwarding_method L2_DSR; use IPIP or GUE",
					family(e.IP), e.IP, family(vip), vip, ri)
			}
		}
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

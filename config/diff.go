package config

import (
	"fmt"
	"net/netip"
	"reflect"
	"strconv"
	"strings"
	"time"
)

// ChangeOp is what applying a configuration does to one of its elements.
type ChangeOp uint8

const (
	Removed ChangeOp = iota
	Added
	Changed
)

var changeOpNames = [...]string{"removed", "added", "changed"}

func (o ChangeOp) String() string { return changeOpNames[o] }

// The kinds of element a Change names.
const (
	KindRule        = "rule"         // a [[forwarding_rule]], by name
	KindHealthCheck = "health_check" // a [[health_check]], by name
	KindService     = "service"      // a [[backend_service]], by name
	KindBackend     = "backend"      // an endpoint: "service/name", the same service and address
	KindSection     = "section"      // [bgp] or [flow_sync] as a whole, Name the section
)

// Change is one element a reload adds, removes or changes.
type Change struct {
	Op   ChangeOp
	Kind string
	// Name is the element's name: a rule's, a check's, a service's;
	// "service/name" for a backend; "[bgp]" or "[flow_sync]" for a
	// section.
	Name string
	// Detail says what the element is (added, removed) or what changed,
	// each key as `key old -> new` ("" when there is nothing to add).
	Detail string
}

// String is the change as one line, e.g. "added backend web/b3: 10.0.1.3
// in pool-a" or "changed rule web-tcp: ports 80 -> 80,443".
func (c Change) String() string {
	s := c.Op.String() + " "
	if c.Kind == KindSection {
		s += c.Name
	} else {
		s += c.Kind + " " + c.Name
	}
	if c.Detail != "" {
		s += ": " + c.Detail
	}
	return s
}

// Changes is what applying one configuration in place of another
// changes, in this order: forwarding rules, health checks, backend
// services, backends, then the [bgp] and [flow_sync] sections; within
// each, the removed ones (in the old file's order), then the added and
// the changed ones (in the new file's). [dataplane] and [admin] are not
// compared: a reload refuses to change them.
type Changes []Change

// Diff is what applying next in place of old changes. Elements are
// matched by name (rules, health checks, services) and a backend by its
// service and address, as the control plane keeps them across a reload:
// a backend whose address changes is one removed and one added; one
// whose name, group or MAC changes is changed.
func Diff(old, next *Config) Changes {
	var cs Changes
	cs = append(cs, diffRules(old, next)...)
	cs = append(cs, diffChecks(old, next)...)
	cs = append(cs, diffServices(old, next)...)
	cs = append(cs, diffBackends(old, next)...)
	cs = append(cs, diffSection("[bgp]", old.BGP, next.BGP)...)
	cs = append(cs, diffSection("[flow_sync]", old.FlowSync, next.FlowSync)...)
	return cs
}

// Lines are the changes, one line each (none when nothing changes).
func (cs Changes) Lines() []string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = c.String()
	}
	return out
}

// String is Lines, one a line, or "no changes".
func (cs Changes) String() string {
	if len(cs) == 0 {
		return "no changes"
	}
	return strings.Join(cs.Lines(), "\n")
}

// Names lists the names of the changes of op and kind, in order.
func (cs Changes) Names(op ChangeOp, kind string) []string {
	var out []string
	for _, c := range cs {
		if c.Op == op && c.Kind == kind {
			out = append(out, c.Name)
		}
	}
	return out
}

// fields collects `key old -> new` for each key whose values differ.
type fields []string

func (f *fields) cmp(key string, a, b any) {
	if !reflect.DeepEqual(a, b) {
		*f = append(*f, fmt.Sprintf("%s %v -> %v", key, a, b))
	}
}

func (f fields) String() string { return strings.Join(f, ", ") }

// byName indexes names.
func byName[T any](xs []T, name func(T) string) map[string]int {
	m := make(map[string]int, len(xs))
	for i, x := range xs {
		m[name(x)] = i
	}
	return m
}

// diffNamed lists the removed, added and changed elements of kind, which
// are matched by name; describe says what an element is, compare what
// changed between two of the same name.
func diffNamed[T any](kind string, old, next []T, name func(T) string, describe func(T) string, compare func(a, b T) string) Changes {
	var cs Changes
	inNext, inOld := byName(next, name), byName(old, name)
	for _, x := range old {
		if _, ok := inNext[name(x)]; !ok {
			cs = append(cs, Change{Op: Removed, Kind: kind, Name: name(x), Detail: describe(x)})
		}
	}
	for _, x := range next {
		i, ok := inOld[name(x)]
		switch {
		case !ok:
			cs = append(cs, Change{Op: Added, Kind: kind, Name: name(x), Detail: describe(x)})
		default:
			if d := compare(old[i], x); d != "" {
				cs = append(cs, Change{Op: Changed, Kind: kind, Name: name(x), Detail: d})
			}
		}
	}
	return cs
}

func diffRules(old, next *Config) Changes {
	svc := func(c *Config, r ForwardingRule) string {
		if r.Service < 0 || r.Service >= len(c.Services) {
			return ""
		}
		return c.Services[r.Service].Name
	}
	// Rules are matched by name within one file each; describe and
	// compare need the file a rule is from for its service's name.
	type ruleOf struct {
		c *Config
		r ForwardingRule
	}
	wrap := func(c *Config) []ruleOf {
		out := make([]ruleOf, len(c.Rules))
		for i, r := range c.Rules {
			out[i] = ruleOf{c, r}
		}
		return out
	}
	return diffNamed(KindRule, wrap(old), wrap(next),
		func(x ruleOf) string { return x.r.Name },
		func(x ruleOf) string {
			s := x.r.VIP.String() + " " + x.r.Protocol.String()
			if x.r.Protocol != RuleL3Default {
				s += " " + rulePorts(x.r)
			}
			if len(x.r.SourceRanges) > 0 {
				s += " from " + prefixes(x.r.SourceRanges)
			}
			return s + " -> " + svc(x.c, x.r)
		},
		func(a, b ruleOf) string {
			var f fields
			f.cmp("ip_address", a.r.VIP, b.r.VIP)
			f.cmp("ip_protocol", a.r.Protocol, b.r.Protocol)
			f.cmp("ports", rulePorts(a.r), rulePorts(b.r))
			f.cmp("source_ip_ranges", prefixes(a.r.SourceRanges), prefixes(b.r.SourceRanges))
			f.cmp("backend_service", svc(a.c, a.r), svc(b.c, b.r))
			return f.String()
		})
}

// rulePorts is a rule's ports as the file writes them: "80,8000-8080",
// or "all ports".
func rulePorts(r ForwardingRule) string {
	if r.AllPorts {
		return "all ports"
	}
	parts := make([]string, len(r.Ports))
	for i, p := range r.Ports {
		parts[i] = strconv.Itoa(int(p.First))
		if p.Last != p.First {
			parts[i] += "-" + strconv.Itoa(int(p.Last))
		}
	}
	return strings.Join(parts, ",")
}

func prefixes(ps []netip.Prefix) string {
	if len(ps) == 0 {
		return "any"
	}
	parts := make([]string, len(ps))
	for i, p := range ps {
		parts[i] = p.String()
	}
	return strings.Join(parts, ",")
}

func diffChecks(old, next *Config) Changes {
	return diffNamed(KindHealthCheck, old.HealthChecks, next.HealthChecks,
		func(h HealthCheck) string { return h.Name },
		func(h HealthCheck) string { return h.Type.String() },
		func(a, b HealthCheck) string {
			var f fields
			f.cmp("type", a.Type, b.Type)
			f.cmp("port", a.Port, b.Port)
			f.cmp("request_path", a.RequestPath, b.RequestPath)
			f.cmp("host", a.Host, b.Host)
			f.cmp("response", a.Response, b.Response)
			f.cmp("check_interval_sec", secs(a.CheckInterval), secs(b.CheckInterval))
			f.cmp("timeout_sec", secs(a.Timeout), secs(b.Timeout))
			f.cmp("healthy_threshold", a.HealthyThreshold, b.HealthyThreshold)
			f.cmp("unhealthy_threshold", a.UnhealthyThreshold, b.UnhealthyThreshold)
			return f.String()
		})
}

func secs(d time.Duration) string { return strconv.FormatFloat(d.Seconds(), 'g', -1, 64) }

func diffServices(old, next *Config) Changes {
	type svcOf struct {
		c *Config
		s Service
	}
	wrap := func(c *Config) []svcOf {
		out := make([]svcOf, len(c.Services))
		for i, s := range c.Services {
			out[i] = svcOf{c, s}
		}
		return out
	}
	check := func(x svcOf) string {
		if x.s.HealthCheck < 0 || x.s.HealthCheck >= len(x.c.HealthChecks) {
			return "none"
		}
		return x.c.HealthChecks[x.s.HealthCheck].Name
	}
	return diffNamed(KindService, wrap(old), wrap(next),
		func(x svcOf) string { return x.s.Name },
		func(x svcOf) string {
			n := 0
			for _, g := range x.s.Groups {
				n += len(g.Endpoints)
			}
			return fmt.Sprintf("%s, %s, %s", x.s.Protocol, x.s.Locality, plural(n, "backend"))
		},
		func(a, b svcOf) string {
			var f fields
			f.cmp("protocol", a.s.Protocol, b.s.Protocol)
			f.cmp("session_affinity", a.s.Affinity, b.s.Affinity)
			f.cmp("locality_lb_policy", a.s.Locality, b.s.Locality)
			f.cmp("health_checks", check(a), check(b))
			f.cmp("connection_draining_timeout_sec", secs(a.s.DrainingTimeout), secs(b.s.DrainingTimeout))
			f.cmp("forwarding_method", a.s.ForwardingMethod, b.s.ForwardingMethod)
			f.cmp("gue_port", a.s.GUEPort, b.s.GUEPort)
			f.cmp("maglev_table_size", a.s.MaglevTableSize, b.s.MaglevTableSize)
			f.cmp("tracking_mode", a.s.Tracking.Mode, b.s.Tracking.Mode)
			f.cmp("connection_persistence_on_unhealthy_backends", a.s.Tracking.Persistence, b.s.Tracking.Persistence)
			f.cmp("idle_timeout_sec", secs(a.s.Tracking.IdleTimeout), secs(b.s.Tracking.IdleTimeout))
			f.cmp("failover_ratio", a.s.Failover.Ratio, b.s.Failover.Ratio)
			f.cmp("drop_traffic_if_unhealthy", a.s.Failover.DropTrafficIfUnhealthy, b.s.Failover.DropTrafficIfUnhealthy)
			f.cmp("disable_connection_drain_on_failover", a.s.Failover.DisableDrainOnFailover, b.s.Failover.DisableDrainOnFailover)
			if !reflect.DeepEqual(a.s.QUICLB, b.s.QUICLB) {
				// Keys are not printed.
				f = append(f, "quic_lb")
			}
			return f.String()
		})
}

func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// backendOf is an endpoint with what a change says of it.
type backendOf struct {
	service string
	group   string
	fail    bool
	ep      Endpoint
}

func (b backendOf) key() string  { return b.service + "\x00" + b.ep.IP.String() }
func (b backendOf) name() string { return b.service + "/" + b.ep.Name }

func (b backendOf) describe() string {
	s := ""
	if b.ep.Name != b.ep.IP.String() {
		s = b.ep.IP.String() + " "
	}
	s += "in " + b.group
	if b.fail {
		s += " (failover)"
	}
	return s
}

func backendsOf(c *Config) []backendOf {
	var out []backendOf
	for _, s := range c.Services {
		for _, g := range s.Groups {
			for _, ep := range g.Endpoints {
				out = append(out, backendOf{service: s.Name, group: g.Name, fail: g.Failover, ep: ep})
			}
		}
	}
	return out
}

func diffBackends(old, next *Config) Changes {
	var cs Changes
	ob, nb := backendsOf(old), backendsOf(next)
	inNext, inOld := byName(nb, backendOf.key), byName(ob, backendOf.key)
	for _, b := range ob {
		if _, ok := inNext[b.key()]; !ok {
			cs = append(cs, Change{Op: Removed, Kind: KindBackend, Name: b.name(), Detail: b.describe()})
		}
	}
	side := func(fail bool) string {
		if fail {
			return "failover"
		}
		return "primary"
	}
	for _, b := range nb {
		i, ok := inOld[b.key()]
		if !ok {
			cs = append(cs, Change{Op: Added, Kind: KindBackend, Name: b.name(), Detail: b.describe()})
			continue
		}
		a := ob[i]
		var f fields
		f.cmp("name", a.ep.Name, b.ep.Name)
		f.cmp("group", a.group, b.group)
		f.cmp("failover", side(a.fail), side(b.fail))
		f.cmp("mac", macOf(a.ep), macOf(b.ep))
		f.cmp("server_id", fmt.Sprintf("%x", a.ep.ServerID), fmt.Sprintf("%x", b.ep.ServerID))
		if len(f) > 0 {
			cs = append(cs, Change{Op: Changed, Kind: KindBackend, Name: b.name(), Detail: f.String()})
		}
	}
	return cs
}

func macOf(ep Endpoint) string {
	if !ep.HasMAC {
		return "resolved"
	}
	m := ep.MAC
	return fmt.Sprintf("%02x:%02x:%02x:%02x:%02x:%02x", m[0], m[1], m[2], m[3], m[4], m[5])
}

// diffSection compares a section as a whole: added, removed or changed.
func diffSection[T any](name string, a, b *T) Changes {
	switch {
	case a == nil && b == nil:
		return nil
	case a == nil:
		return Changes{{Op: Added, Kind: KindSection, Name: name}}
	case b == nil:
		return Changes{{Op: Removed, Kind: KindSection, Name: name}}
	case !reflect.DeepEqual(a, b):
		return Changes{{Op: Changed, Kind: KindSection, Name: name}}
	}
	return nil
}

package config

import (
	"fmt"
	"net"
	"net/netip"
	"path"
	"strconv"
	"strings"
)

// Defaults and limits of the schema (docs/config.md lists them all). Limits
// that the rules (docs/rules.md) do not fix follow Google Cloud's for the
// same field, or merely keep values sane.
const (
	defaultFrameSize         = 4096
	defaultRingSize          = 2048
	defaultConntrackCapacity = 4194304
	defaultAdminListen       = "127.0.0.1:9110"
	defaultAdminSocket       = "/run/xlb/admin.sock"
	// defaultStateDir keeps tracked flows across restarts unless the file
	// says state_dir = "" (the socket's directory: one for xlb's files).
	defaultStateDir = "/run/xlb"
	// maxSocketPath leaves room in sun_path (108 bytes with its NUL) for
	// the private directory the socket is made in before it is renamed
	// into place (admin.ListenSocket).
	maxSocketPath = 80

	defaultCheckPort         = 80
	defaultRequestPath       = "/"
	defaultCheckIntervalSec  = 5
	defaultTimeoutSec        = 5
	defaultThreshold         = 2
	maxCheckSec              = 300 // Google Cloud's limit for interval and timeout
	maxThreshold             = 10  // Google Cloud's limit
	defaultMaglevTableSize   = 65537
	minMaglevTableSize       = 251
	maxMaglevTableSize       = 16777213
	defaultGUEPort           = 5555
	defaultIdleTimeoutSec    = 60
	maxIdleTimeoutSec        = 86400
	maxDrainingTimeoutSec    = 3600
	maxGroupsPerRole         = 50 // F2
	maxQueueOrCPU            = 1<<16 - 1
	maxInterfaceNameLen      = 15 // IFNAMSIZ - 1 on Linux
	minConntrackCapacity     = 1024
	maxConntrackCapacity     = 1 << 28
	defaultSYNTimeoutSec     = 5
	maxSYNTimeoutSec         = 3600
	maxNewEntryRate          = 100_000_000
	minRingSize, maxRingSize = 64, 65536
	maxPortsPerRule          = 5  // FR3
	maxSourceRanges          = 64 // FR6
	// maxEndpoints bounds a service's endpoints: a Maglev table entry is 2
	// bytes (maglev.MaxBackends).
	maxEndpoints  = 1<<16 - 1
	allPortsRange = "1-65535"
	queuesAll     = "all"
)

// convert builds the Config; problems are collected in c.errs, and the
// returned value is meaningful only when there are none.
func (c *converter) convert(r *rawFile) *Config {
	cfg := &Config{
		Dataplane: c.dataplane(&r.Dataplane),
		Admin:     c.admin(&r.Admin),
	}
	c.runAs = cfg.Dataplane.User
	c.checkByName = map[string]int{}
	for i := range r.HealthCheck {
		cfg.HealthChecks = append(cfg.HealthChecks, c.healthCheck(i, &r.HealthCheck[i]))
	}
	c.serviceByName = make(map[string]int, len(r.BackendService))
	endpoints, named := 0, false
	for i := range r.BackendService {
		for j := range r.BackendService[i].Backend {
			for k := range r.BackendService[i].Backend[j].Endpoints {
				endpoints++
				named = named || r.BackendService[i].Backend[j].Endpoints[k].Name.set
			}
		}
	}
	c.endpointNames = nil
	if named {
		c.endpointNames = make(map[string]endpointRef, endpoints)
	}
	cfg.Services = make([]Service, 0, len(r.BackendService))
	for i := range r.BackendService {
		cfg.Services = append(cfg.Services, c.service(i, &r.BackendService[i], cfg.HealthChecks))
	}
	c.rules(cfg, r.ForwardingRule)
	c.families(cfg)
	if r.BGP != nil {
		cfg.BGP = c.bgp(r.BGP)
	}
	if r.FlowSync != nil {
		cfg.FlowSync = c.flowSync(r.FlowSync, cfg)
	}
	return cfg
}

func (c *converter) dataplane(r *rawDataplane) Dataplane {
	const p = "dataplane"
	d := Dataplane{
		Interface:              c.str(p+".interface", r.Interface, ""),
		XDPMode:                XDPMode(c.enum(p+".xdp_mode", r.XDPMode, xdpModeNames[:], int(XDPAuto))),
		ZeroCopy:               ZeroCopy(c.enum(p+".zero_copy", r.ZeroCopy, zeroCopyNames[:], int(ZeroCopyAuto))),
		FrameSize:              int(c.integer(p+".frame_size", r.FrameSize, defaultFrameSize, 2048, 4096)),
		RingSize:               int(c.integer(p+".ring_size", r.RingSize, defaultRingSize, minRingSize, maxRingSize)),
		ConntrackCapacity:      int(c.integer(p+".conntrack_capacity", r.ConntrackCapacity, defaultConntrackCapacity, minConntrackCapacity, maxConntrackCapacity)),
		ConntrackSYNTimeoutSec: int(c.integer(p+".conntrack_syn_timeout_sec", r.ConntrackSYNTimeout, defaultSYNTimeoutSec, 1, maxSYNTimeoutSec)),
		ConntrackNewEntryRate:  int(c.integer(p+".conntrack_new_entry_rate", r.ConntrackNewEntryRate, 0, 0, maxNewEntryRate)),
		StateDir:               c.str(p+".state_dir", r.StateDir, defaultStateDir),
	}
	if user, ok := c.text(p+".user", r.User); ok && !validUserName(user) {
		c.add(p+".user", "%q is neither a user name nor a uid", user)
	} else {
		d.User = user
	}
	if d.StateDir != "" && !strings.HasPrefix(d.StateDir, "/") {
		c.add(p+".state_dir", "%q is not an absolute path", d.StateDir)
	}
	if r.Interface.set && !validInterfaceName(d.Interface) {
		c.add(p+".interface", "%q is not a valid interface name", d.Interface)
	}
	// The frame is one page or half of one; AF_XDP takes nothing else.
	if d.FrameSize != 2048 && d.FrameSize != 4096 {
		c.add(p+".frame_size", "%d is not 2048 or 4096", d.FrameSize)
	}
	if d.RingSize&(d.RingSize-1) != 0 {
		c.add(p+".ring_size", "%d is not a power of two", d.RingSize)
	}

	switch q := r.Queues.v.(type) {
	case nil:
		d.AllQueues = true
	case string:
		d.AllQueues = q == queuesAll
		if !d.AllQueues {
			c.add(p+".queues", "%q is neither \"all\" nor a list of queue numbers", q)
		}
	case []any:
		d.Queues = c.smallInts(p+".queues", q, true)
		if len(q) == 0 {
			c.add(p+".queues", "lists no queue")
		}
	default:
		c.wrongType(p+".queues", `"all" or an array`, q)
	}
	if cpus, ok := c.list(p+".cpus", r.CPUs); ok {
		// Unique: two workers pinned to one CPU take turns on it, each
		// polling its queue, at half the rate or less.
		d.CPUs = c.smallInts(p+".cpus", cpus, true)
		if d.Queues != nil && len(cpus) != len(d.Queues) {
			c.add(p+".cpus", "lists %d CPUs for %d queues; give one CPU per queue", len(cpus), len(d.Queues))
		}
	}
	return d
}

// smallInts converts a list of queue or CPU numbers.
func (c *converter) smallInts(path string, elems []any, unique bool) []int {
	out := make([]int, 0, len(elems))
	seen := map[int64]int{}
	for i, e := range elems {
		ep := fmt.Sprintf("%s[%d]", path, i)
		n := c.integer(ep, val{v: e, set: true}, -1, 0, maxQueueOrCPU)
		if n < 0 {
			continue
		}
		if j, dup := seen[n]; dup && unique {
			c.add(ep, "%d is already listed at %s[%d]", n, path, j)
		}
		seen[n] = i
		out = append(out, int(n))
	}
	return out
}

// validInterfaceName follows the kernel's rules for interface names.
func validInterfaceName(s string) bool {
	if s == "" || len(s) > maxInterfaceNameLen || s == "." || s == ".." {
		return false
	}
	return printable(s) && !strings.ContainsAny(s, "/:")
}

// validUserName accepts what useradd does (letters, digits, '_', '-',
// '.', not first a '-', at most 32 bytes) and decimal uids below 2^32-1
// (that one is the "no uid" of the kernel's setresuid).
func validUserName(s string) bool {
	if n, err := strconv.ParseUint(s, 10, 32); err == nil {
		return n < 1<<32-1
	}
	if s == "" || len(s) > 32 || s[0] == '-' {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-' || r == '.') {
			return false
		}
	}
	return true
}

func (c *converter) admin(r *rawAdmin) Admin {
	const p = "admin.listen"
	a := Admin{Listen: c.str(p, r.Listen, defaultAdminListen),
		Socket: c.str("admin.socket", r.Socket, defaultAdminSocket),
		Pprof:  c.boolean("admin.pprof", r.Pprof, false)}
	if _, port, err := net.SplitHostPort(a.Listen); err != nil {
		c.add(p, "%q is not host:port", a.Listen)
	} else if n, err := strconv.ParseUint(port, 10, 16); err != nil || n == 0 {
		c.add(p, "%q: port %q is not a number in [1, 65535]", a.Listen, port)
	}
	switch s := a.Socket; {
	case !strings.HasPrefix(s, "/"):
		c.add("admin.socket", "%q is not an absolute path", s)
	case len(s) > maxSocketPath:
		c.add("admin.socket", "%q is %d bytes, at most %d (a Unix socket's path is short)", s, len(s), maxSocketPath)
	case !printable(s) || path.Clean(s) != s || s == "/":
		c.add("admin.socket", "%q is not a clean file path (no blanks, no //, . or .., not a directory)", s)
	}
	return a
}

func (c *converter) healthCheck(i int, r *rawHealthCheck) HealthCheck {
	p := fmt.Sprintf("health_check[%d]", i)
	h := HealthCheck{
		Name:               c.name(p+".name", r.Name),
		Port:               int(c.integer(p+".port", r.Port, defaultCheckPort, 1, 65535)),
		RequestPath:        c.str(p+".request_path", r.RequestPath, defaultRequestPath),
		Host:               c.str(p+".host", r.Host, ""),
		Response:           c.str(p+".response", r.Response, ""),
		HealthyThreshold:   int(c.integer(p+".healthy_threshold", r.HealthyThreshold, defaultThreshold, 1, maxThreshold)),
		UnhealthyThreshold: int(c.integer(p+".unhealthy_threshold", r.UnhealthyThreshold, defaultThreshold, 1, maxThreshold)),
	}
	c.unique(p+".name", h.Name, "health_check", i, c.checkByName)
	if c.required(p+".type", r.Type) {
		h.Type = HealthCheckType(max(0, c.enum(p+".type", r.Type, checkTypeNames[:], -1)))
	}
	interval := c.integer(p+".check_interval_sec", r.CheckIntervalSec, defaultCheckIntervalSec, 1, maxCheckSec)
	timeout := c.integer(p+".timeout_sec", r.TimeoutSec, defaultTimeoutSec, 1, maxCheckSec)
	if timeout > interval {
		c.add(p+".timeout_sec", "%d is larger than check_interval_sec %d", timeout, interval)
	}
	h.CheckInterval, h.Timeout = seconds(interval), seconds(timeout)

	// The path and Host go into a request line and a header as they are.
	if !strings.HasPrefix(h.RequestPath, "/") || !printable(h.RequestPath) {
		c.add(p+".request_path", "%q must start with / and contain no blanks or control characters", h.RequestPath)
	}
	if h.Host != "" && !printable(h.Host) {
		c.add(p+".host", "%q must contain no blanks or control characters", h.Host)
	}
	// An HTTP-only setting on a TCP check would be silently ignored.
	if h.Type == CheckTCP {
		if r.RequestPath.set {
			c.add(p+".request_path", "applies only to HTTP health checks")
		}
		if r.Host.set {
			c.add(p+".host", "applies only to HTTP health checks")
		}
	}
	return h
}

// unique records name as the name of element i of a kind, reporting an
// earlier element that has it already.
func (c *converter) unique(path, name, kind string, i int, byName map[string]int) {
	if name == "" {
		return
	}
	if j, dup := byName[name]; dup {
		c.add(path, "%q is already the name of %s[%d]", name, kind, j)
		return
	}
	byName[name] = i
}

// endpointRef is where an endpoint name was first used.
type endpointRef struct {
	path     string
	explicit bool
}

func (c *converter) service(i int, r *rawService, checks []HealthCheck) Service {
	p := c.index("backend_service", i)
	s := Service{
		Name:             c.name(c.at(p, ".name"), r.Name),
		Protocol:         ServiceProtocol(c.enum(c.at(p, ".protocol"), r.Protocol, svcProtoNames[:], int(ServiceTCP))),
		Affinity:         Affinity(c.enum(c.at(p, ".session_affinity"), r.SessionAffinity, affinityNames[:], int(AffinityNone))),
		Locality:         LocalityPolicy(c.enum(c.at(p, ".locality_lb_policy"), r.LocalityLBPolicy, localityNames[:], int(LocalityMaglev))),
		HealthCheck:      -1,
		DrainingTimeout:  seconds(c.integer(c.at(p, ".connection_draining_timeout_sec"), r.ConnectionDrainingTimeoutSec, 0, 0, maxDrainingTimeoutSec)),
		ForwardingMethod: ForwardingMethod(c.enum(c.at(p, ".forwarding_method"), r.ForwardingMethod, methodNames[:], int(ForwardL2DSR))),
		GUEPort:          uint16(c.integer(c.at(p, ".gue_port"), r.GUEPort, defaultGUEPort, 1, 65535)),
	}
	c.unique(c.at(p, ".name"), s.Name, "backend_service", i, c.serviceByName)
	if r.GUEPort.set && s.ForwardingMethod != ForwardGUE {
		c.add(c.at(p, ".gue_port"), "applies only to forwarding_method GUE, not %s", s.ForwardingMethod)
	}

	// Exactly one health check, as in Google Cloud.
	hp := c.at(p, ".health_checks")
	if names, ok := c.list(hp, r.HealthChecks); ok {
		if len(names) != 1 {
			c.add(hp, "lists %d health checks; exactly one is required", len(names))
		} else if name := c.str(c.index(hp, 0), val{v: names[0], set: true}, ""); name != "" {
			if j, found := c.checkByName[name]; found {
				s.HealthCheck = j
			} else {
				c.add(c.index(hp, 0), "no health_check is named %q", name)
			}
		}
	} else if !r.HealthChecks.set {
		c.add(hp, "required: name exactly one health check")
	}
	// W1: weights come from the HTTP reply.
	if s.Locality == LocalityWeightedMaglev && s.HealthCheck >= 0 && checks[s.HealthCheck].Type != CheckHTTP {
		c.add(c.at(p, ".locality_lb_policy"), "WEIGHTED_MAGLEV needs an HTTP health check; %q is %s",
			checks[s.HealthCheck].Name, checks[s.HealthCheck].Type)
	}

	tp := c.at(p, ".connection_tracking_policy")
	s.Tracking = TrackingPolicy{
		Mode:        TrackingMode(c.enum(c.at(tp, ".tracking_mode"), r.Tracking.TrackingMode, trackingNames[:], int(PerConnection))),
		Persistence: Persistence(c.enum(c.at(tp, ".connection_persistence_on_unhealthy_backends"), r.Tracking.Persistence, persistenceNames[:], int(PersistDefaultForProtocol))),
		IdleTimeout: seconds(c.integer(c.at(tp, ".idle_timeout_sec"), r.Tracking.IdleTimeout, defaultIdleTimeoutSec, 1, maxIdleTimeoutSec)),
	}
	// P1: the table of SPEC §6.1 has no meaning for this pair.
	if s.Tracking.Persistence == PersistAlways && s.Tracking.Mode == PerSession {
		c.add(c.at(tp, ".connection_persistence_on_unhealthy_backends"), "ALWAYS_PERSIST is invalid with tracking_mode PER_SESSION")
	}

	fp := c.at(p, ".failover_policy")
	s.Failover = FailoverPolicy{
		Ratio:                  c.ratio(c.at(fp, ".failover_ratio"), r.Failover.Ratio, 0),
		DropTrafficIfUnhealthy: c.boolean(c.at(fp, ".drop_traffic_if_unhealthy"), r.Failover.Drop, false),
		DisableDrainOnFailover: c.boolean(c.at(fp, ".disable_connection_drain_on_failover"), r.Failover.DisableDrain, false),
	}

	c.groups(p, &s, r.Backend)
	c.quicLB(p, &s, r)

	size := c.integer(c.at(p, ".maglev_table_size"), r.MaglevTableSize, defaultMaglevTableSize, minMaglevTableSize, maxMaglevTableSize)
	s.MaglevTableSize = uint32(size)
	if !c.isPrime(size) {
		c.add(c.at(p, ".maglev_table_size"), "%d is not a prime", size)
	}
	n := countEndpoints(&s)
	if size <= 2*int64(n) {
		c.add(c.at(p, ".maglev_table_size"), "%d is not larger than 2 × %d endpoints", size, n)
	}
	if n > maxEndpoints {
		c.add(c.at(p, ".backend"), "has %d endpoints; at most %d are allowed", n, maxEndpoints)
	}
	return s
}

func (c *converter) groups(p string, s *Service, raw []rawGroup) {
	var groupNames map[string]int
	if len(raw) > 1 {
		groupNames = make(map[string]int, len(raw))
	}
	n := 0
	for j := range raw {
		n += len(raw[j].Endpoints)
	}
	// The addresses so far, to find one given twice: few per service, so
	// a list searched in turn, and a map only for many.
	var addrs map[netip.Addr]epIndex
	if n > 16 {
		addrs = make(map[netip.Addr]epIndex, n)
	}
	s.Groups = make([]Group, 0, len(raw))
	var primary, failover int
	for j := range raw {
		gp := c.index(c.at(p, ".backend"), j)
		g := Group{
			Name:     c.name(c.at(gp, ".group"), raw[j].Group),
			Failover: c.boolean(c.at(gp, ".failover"), raw[j].Failover, false),
		}
		if groupNames != nil {
			c.unique(c.at(gp, ".group"), g.Name, c.at(p, ".backend"), j, groupNames)
		}
		if g.Failover {
			failover++
		} else {
			primary++
		}
		if len(raw[j].Endpoints) == 0 {
			c.add(c.at(gp, ".endpoints"), "a group needs at least one endpoint")
		}
		g.Endpoints = make([]Endpoint, 0, len(raw[j].Endpoints))
		for k := range raw[j].Endpoints {
			ep := c.index(c.at(gp, ".endpoints"), k)
			e := c.endpoint(ep, &raw[j].Endpoints[k])
			if e.IP.IsValid() {
				prev, dup := epIndex{}, false
				if addrs != nil {
					if prev, dup = addrs[e.IP]; !dup {
						addrs[e.IP] = epIndex{j, k}
					}
				} else {
					prev, dup = findEndpoint(s.Groups, g.Endpoints, e.IP, j)
				}
				if dup {
					c.add(c.at(ep, ".ip"), "%s is already an endpoint of this service at %s", e.IP,
						c.index(c.at(c.index(c.at(p, ".backend"), prev.group), ".endpoints"), prev.endpoint))
				}
			}
			g.Endpoints = append(g.Endpoints, e)
		}
		s.Groups = append(s.Groups, g)
	}
	// F2.
	if primary > maxGroupsPerRole {
		c.add(c.at(p, ".backend"), "has %d primary groups; at most %d are allowed", primary, maxGroupsPerRole)
	}
	if failover > maxGroupsPerRole {
		c.add(c.at(p, ".backend"), "has %d failover groups; at most %d are allowed", failover, maxGroupsPerRole)
	}
}

// epIndex is where an endpoint is in its service: group and endpoint.
type epIndex struct{ group, endpoint int }

// findEndpoint finds the first endpoint with address ip among the groups
// before group j and then eps, group j's so far.
func findEndpoint(groups []Group, eps []Endpoint, ip netip.Addr, j int) (epIndex, bool) {
	for gi, g := range groups {
		for k, e := range g.Endpoints {
			if e.IP == ip {
				return epIndex{gi, k}, true
			}
		}
	}
	for k, e := range eps {
		if e.IP == ip {
			return epIndex{j, k}, true
		}
	}
	return epIndex{}, false
}

// endpoint converts one endpoint.
func (c *converter) endpoint(p string, r *rawEndpoint) Endpoint {
	var e Endpoint
	e.IP = c.requiredHostAddr(c.at(p, ".ip"), r.IP)

	// An unnamed endpoint is named after its address. The same address may
	// back several services, so such default names may repeat; a name
	// written in the file must be unique across the file (endpointNames
	// is nil when the file names none: nothing can repeat one).
	explicit := r.Name.set
	if explicit {
		e.Name = c.name(c.at(p, ".name"), r.Name)
	} else if e.IP.IsValid() {
		e.Name = e.IP.String()
	}
	if e.Name != "" && c.endpointNames != nil {
		if prev, dup := c.endpointNames[e.Name]; dup && (explicit || prev.explicit) {
			c.add(c.at(p, ".name"), "%q is already the name of %s", e.Name, prev.path)
		} else if !dup {
			c.endpointNames[e.Name] = endpointRef{path: p, explicit: explicit}
		}
	}

	if mac, ok := c.text(c.at(p, ".mac"), r.MAC); ok {
		hw, ok := parseMAC(mac)
		switch {
		case !ok:
			c.add(c.at(p, ".mac"), "%q is not a MAC address like 02:00:00:00:00:12", mac)
		case hw[0]&1 != 0 || hw == [6]byte{}:
			c.add(c.at(p, ".mac"), "%s is not a unicast MAC address", mac)
		default:
			e.MAC, e.HasMAC = hw, true
		}
	}
	e.ServerID = c.serverID(c.at(p, ".server_id"), r.ServerID)
	return e
}

// requiredHostAddr is the host address v at path, which must be set and
// a string (the zero Addr, with the error recorded, otherwise).
func (c *converter) requiredHostAddr(path string, v val) netip.Addr {
	if !c.required(path, v) {
		return netip.Addr{}
	}
	s, ok := c.text(path, v)
	if !ok {
		return netip.Addr{}
	}
	return c.hostAddr(path, s)
}

// hostAddr parses the address of one host (a VIP or an endpoint).
func (c *converter) hostAddr(path, s string) netip.Addr {
	a, err := netip.ParseAddr(s)
	switch {
	case err != nil:
		c.add(path, "%q is not an IP address", s)
	case a.Zone() != "":
		c.add(path, "%s: zones are not supported", s)
	case a.Is4In6():
		c.add(path, "%s is an IPv4-mapped address; write it as %s", s, a.Unmap())
	case a.IsUnspecified() || a.IsMulticast():
		c.add(path, "%s is not a unicast address", s)
	default:
		return a
	}
	return netip.Addr{}
}

// parseMAC accepts exactly xx:xx:xx:xx:xx:xx (either case), the one form
// docs/config.md shows; net.ParseMAC would also take other lengths and separators.
func parseMAC(s string) (hw [6]byte, ok bool) {
	if len(s) != 17 {
		return hw, false
	}
	for i := range hw {
		if i > 0 && s[3*i-1] != ':' {
			return hw, false
		}
		n, err := strconv.ParseUint(s[3*i:3*i+2], 16, 8)
		if err != nil {
			return hw, false
		}
		hw[i] = byte(n)
	}
	return hw, true
}

// isPrime is isPrime(n), remembering the last answer: a file's services
// mostly share one table size, and a division is slow.
func (c *converter) isPrime(n int64) bool {
	if c.primeOf != n || n == 0 {
		c.primeOf, c.prime = n, isPrime(n)
	}
	return c.prime
}

// isPrime tests by trial division: table sizes are at most 2^24.
func isPrime(n int64) bool {
	if n < 2 {
		return false
	}
	for d := int64(2); d*d <= n; d++ {
		if n%d == 0 {
			return false
		}
	}
	return true
}

func countEndpoints(s *Service) int {
	n := 0
	for _, g := range s.Groups {
		n += len(g.Endpoints)
	}
	return n
}

package config

import (
	"net/netip"
	"time"
)

// Config is a validated configuration. Nothing downstream of Load sees
// unvalidated values: every enum is typed, every reference is resolved to an
// index, every default is filled in.
type Config struct {
	// Path is the file the config was loaded from ("" when parsed from memory).
	Path string

	Dataplane    Dataplane
	Admin        Admin
	HealthChecks []HealthCheck
	Services     []Service
	Rules        []ForwardingRule
	// BGP is nil when the file has no [bgp] (nothing is announced).
	BGP *BGP
	// FlowSync is nil when the file has no [flow_sync] (each instance
	// knows only the flows it saw).
	FlowSync *FlowSync
}

// FlowSync is the [flow_sync] section: tracked flows shared with peers.
type FlowSync struct {
	// Listen is where records (UDP) and table pulls (TCP) arrive.
	Listen netip.AddrPort
	// Peers are the other instances, without Listen itself where the
	// file lists it.
	Peers []netip.AddrPort
	// KeyFile is where Keys were read from.
	KeyFile string
	// Keys are the file's keys: Keys[0] seals what is sent; every key
	// opens what arrives (a rollover). One or two.
	Keys [][32]byte
	// PullOnStart: a starting instance with no kept table fetches the
	// table from a peer before it announces its VIPs; PullTimeout bounds
	// the wait.
	PullOnStart bool
	PullTimeout time.Duration
	// MaxRecordsPerSec bounds the records this instance sends each second
	// (new flows and refreshes together); ours, not in the schema's
	// first draft.
	MaxRecordsPerSec int
}

// Dataplane is the [dataplane] section; only `xlb run` needs it.
type Dataplane struct {
	Interface string
	// Queues lists the rx queues to serve; AllQueues means every queue of
	// the interface (Queues is then nil).
	AllQueues         bool
	Queues            []int
	CPUs              []int
	XDPMode           XDPMode
	ZeroCopy          ZeroCopy
	FrameSize         int
	RingSize          int
	ConntrackCapacity int
	// ConntrackSYNTimeoutSec is the idle timeout of an entry that has seen
	// only a SYN (capped by the service's).
	ConntrackSYNTimeoutSec int
	// ConntrackNewEntryRate is how many new entries each worker records per
	// second; over it new flows are forwarded unrecorded. 0: no limit.
	ConntrackNewEntryRate int
	// StateDir keeps the conntrack table and the control plane's state
	// across `xlb run` processes: "/run/xlb" when the file does not say,
	// "" (written as state_dir = "") when nothing is kept.
	StateDir string
	// User is who `xlb run` runs as once started: a user name or a
	// decimal uid, its primary group from the user database ("": the user
	// that started it).
	User string
}

// Admin is the [admin] section.
type Admin struct {
	// Listen is the TCP listener's host:port: read-only endpoints.
	Listen string
	// Socket is the Unix socket's path: every state-changing command.
	Socket string
	// Pprof serves /debug/pprof on the TCP listener.
	Pprof bool
}

// HealthCheck is one [[health_check]].
type HealthCheck struct {
	Name               string
	Type               HealthCheckType
	Port               int
	RequestPath        string
	Host               string
	Response           string
	CheckInterval      time.Duration
	Timeout            time.Duration
	HealthyThreshold   int
	UnhealthyThreshold int
}

// Service is one [[backend_service]].
type Service struct {
	Name             string
	Protocol         ServiceProtocol
	Affinity         Affinity
	Locality         LocalityPolicy
	HealthCheck      int // index into Config.HealthChecks
	DrainingTimeout  time.Duration
	ForwardingMethod ForwardingMethod
	GUEPort          uint16
	MaglevTableSize  uint32
	Tracking         TrackingPolicy
	Failover         FailoverPolicy
	Groups           []Group
	// QUICLB are the service's QUIC-LB configurations ([[backend_service.quic_lb]]),
	// at most two, of distinct config rotation values; empty: QUIC is
	// routed like any UDP.
	QUICLB []QUICLB
}

// QUICLB is one [[backend_service.quic_lb]]: how the service's QUIC servers
// encode their server IDs in the connection IDs they issue.
type QUICLB struct {
	Rotation    uint8 // config_rotation, 0..6
	ServerIDLen int   // octets
	NonceLen    int   // octets
	// KeyFile is key_file ("": none) and Key the AES-128 key it holds;
	// nil: the IDs are in the clear.
	KeyFile string
	Key     []byte
}

// TrackingPolicy is [backend_service.connection_tracking_policy].
type TrackingPolicy struct {
	Mode        TrackingMode
	Persistence Persistence
	IdleTimeout time.Duration
}

// FailoverPolicy is [backend_service.failover_policy].
type FailoverPolicy struct {
	Ratio                  float64
	DropTrafficIfUnhealthy bool
	DisableDrainOnFailover bool
}

// Group is one [[backend_service.backend]]: a backend group.
type Group struct {
	Name      string
	Failover  bool
	Endpoints []Endpoint
}

// Endpoint is one backend.
type Endpoint struct {
	// Name is the configured name, or the address's text when unnamed.
	Name string
	IP   netip.Addr
	MAC  [6]byte
	// HasMAC says MAC was configured (an override of neighbour resolution).
	HasMAC bool
	// ServerID is the endpoint's QUIC-LB server ID (server_id), nil when
	// it has none; its service's quic_lb configurations give its length.
	ServerID []byte
}

// ForwardingRule is one [[forwarding_rule]].
type ForwardingRule struct {
	Name     string
	VIP      netip.Addr
	Protocol RuleProtocol
	// AllPorts is true for all_ports = true, for port_range = "1-65535" and
	// for L3_DEFAULT; Ports is then empty.
	AllPorts     bool
	Ports        []PortRange
	SourceRanges []netip.Prefix
	Service      int // index into Config.Services
}

// PortRange is an inclusive range of ports; a single port has First == Last.
type PortRange struct {
	First, Last uint16
}

// Contains reports whether p is in the range.
func (r PortRange) Contains(p uint16) bool { return p >= r.First && p <= r.Last }

// XDPMode is dataplane.xdp_mode.
type XDPMode uint8

const (
	XDPAuto XDPMode = iota
	XDPNative
	XDPGeneric
)

// ZeroCopy is dataplane.zero_copy.
type ZeroCopy uint8

const (
	ZeroCopyAuto ZeroCopy = iota
	ZeroCopyOn
	ZeroCopyOff
)

// HealthCheckType is health_check.type.
type HealthCheckType uint8

const (
	CheckHTTP HealthCheckType = iota
	CheckTCP
)

// ServiceProtocol is backend_service.protocol.
type ServiceProtocol uint8

const (
	ServiceTCP ServiceProtocol = iota
	ServiceUDP
	ServiceUnspecified
)

// Affinity is backend_service.session_affinity (SPEC §2).
type Affinity uint8

const (
	AffinityNone Affinity = iota
	AffinityClientIPPortProto
	AffinityClientIPProto
	AffinityClientIP
)

// LocalityPolicy is backend_service.locality_lb_policy.
type LocalityPolicy uint8

const (
	LocalityMaglev LocalityPolicy = iota
	LocalityWeightedMaglev
)

// ForwardingMethod is backend_service.forwarding_method (ours).
type ForwardingMethod uint8

const (
	ForwardL2DSR ForwardingMethod = iota
	ForwardIPIP
	ForwardGUE
)

// TrackingMode is connection_tracking_policy.tracking_mode.
type TrackingMode uint8

const (
	PerConnection TrackingMode = iota
	PerSession
)

// Persistence is connection_tracking_policy.connection_persistence_on_unhealthy_backends.
type Persistence uint8

const (
	PersistDefaultForProtocol Persistence = iota
	PersistNever
	PersistAlways
)

// RuleProtocol is forwarding_rule.ip_protocol.
type RuleProtocol uint8

const (
	RuleTCP RuleProtocol = iota
	RuleUDP
	RuleL3Default
)

var (
	affinityNames    = [...]string{"NONE", "CLIENT_IP_PORT_PROTO", "CLIENT_IP_PROTO", "CLIENT_IP"}
	localityNames    = [...]string{"MAGLEV", "WEIGHTED_MAGLEV"}
	methodNames      = [...]string{"L2_DSR", "IPIP", "GUE"}
	trackingNames    = [...]string{"PER_CONNECTION", "PER_SESSION"}
	persistenceNames = [...]string{"DEFAULT_FOR_PROTOCOL", "NEVER_PERSIST", "ALWAYS_PERSIST"}
	ruleProtoNames   = [...]string{"TCP", "UDP", "L3_DEFAULT"}
	svcProtoNames    = [...]string{"TCP", "UDP", "UNSPECIFIED"}
	checkTypeNames   = [...]string{"HTTP", "TCP"}
	xdpModeNames     = [...]string{"auto", "native", "generic"}
	zeroCopyNames    = [...]string{"auto", "on", "off"}
)

func (a Affinity) String() string         { return affinityNames[a] }
func (l LocalityPolicy) String() string   { return localityNames[l] }
func (m ForwardingMethod) String() string { return methodNames[m] }
func (m TrackingMode) String() string     { return trackingNames[m] }
func (p Persistence) String() string      { return persistenceNames[p] }
func (p RuleProtocol) String() string     { return ruleProtoNames[p] }
func (p ServiceProtocol) String() string  { return svcProtoNames[p] }
func (t HealthCheckType) String() string  { return checkTypeNames[t] }
func (m XDPMode) String() string          { return xdpModeNames[m] }
func (z ZeroCopy) String() string         { return zeroCopyNames[z] }

package dataplane

// Verdict is what happens to a frame.
type Verdict uint8

const (
	// VerdictPass leaves the frame to the host kernel (not VIP traffic, FR1).
	VerdictPass Verdict = iota
	// VerdictForward sends the rewritten frame out towards its backend.
	VerdictForward
	// VerdictDrop drops the frame; Reason says why.
	VerdictDrop
)

var verdictNames = [...]string{"pass", "forward", "drop"}

func (v Verdict) String() string { return verdictNames[v] }

// Reason says why a frame was dropped. The strings are the `reason` words of
// `xlb sim` and the `reason` label of the drop metrics; keep them stable.
type Reason uint8

const (
	ReasonNone Reason = iota
	// ReasonMalformed: VIP traffic whose headers do not parse.
	ReasonMalformed
	// ReasonNoRule: VIP traffic that matches no forwarding rule (FR4).
	ReasonNoRule
	// ReasonSourceNotAllowed: source outside the rule's source_ip_ranges (FR6).
	ReasonSourceNotAllowed
	// ReasonNoEligibleBackend: the eligible set is empty (S6, E3/E4 drop).
	ReasonNoEligibleBackend
	// ReasonBackendNotReady: the backend's MAC (or next hop) is not resolved.
	ReasonBackendNotReady
	// ReasonNoEncapSource: IPIP/GUE needs an outer source of the backend's
	// family and the balancer has none.
	ReasonNoEncapSource
	// ReasonTooBig: the encapsulated frame would exceed the frame buffer or MTU.
	ReasonTooBig
	// ReasonTableFull is reserved: the conntrack table evicts (X3) rather
	// than refusing, so no frame is dropped for it today.
	ReasonTableFull
	// ReasonVIPDraining: a frame that matches only a forwarding rule a
	// reload removed, while that rule drains (M5), and that no live
	// tracking entry carries: a new connection, or a flow never tracked.
	ReasonVIPDraining
	// ReasonMartianSource: a VIP frame whose source no client can have:
	// loopback, unspecified, multicast, broadcast (a subnet's of the
	// interface too), IPv4-mapped or -compatible in IPv6 (FR8).
	ReasonMartianSource
	// ReasonSourceIsVIP: the source is one of the VIPs (FR8).
	ReasonSourceIsVIP
	// ReasonSourceIsSelf: the source is one of the balancer's own
	// addresses (FR8).
	ReasonSourceIsSelf
	// ReasonSourceIsBackend: the source is a backend of the service the
	// frame's rule selects (FR8).
	ReasonSourceIsBackend
	// ReasonNotOurMAC: a VIP frame whose destination MAC is not the
	// interface's: broadcast, multicast or another host's (FR9).
	ReasonNotOurMAC
	numReasons
)

// NumReasons is the number of Reason values, for counter arrays.
const NumReasons = int(numReasons)

var reasonNames = [...]string{
	"", "malformed", "no-rule", "source-not-allowed", "no-eligible-backend",
	"backend-not-ready", "no-encap-source", "too-big", "table-full", "vip-draining",
	"martian-source", "source-is-vip", "source-is-self", "source-is-backend", "not-our-mac",
}

func (r Reason) String() string { return reasonNames[r] }

// Track says what a forwarded frame did to the tracking table (sim's `track`).
type Track uint8

const (
	// TrackUntracked: no entry is looked up or created (CT3), or an ICMP
	// error steered by a flow that has no entry (X1).
	TrackUntracked Track = iota
	// TrackNew: a new entry was created (or a SYN overwrote one, CT1/CT2).
	TrackNew
	// TrackHit: an existing valid entry was used.
	TrackHit
	// TrackReplaced: an entry was found invalid (M3, M4, M5) and replaced.
	TrackReplaced
)

var trackNames = [...]string{"untracked", "new", "hit", "replaced"}

func (t Track) String() string { return trackNames[t] }

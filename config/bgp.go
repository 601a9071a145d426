package config

import (
	"fmt"
	"net/netip"
	"time"
)

// BGP is the optional [bgp] section: the speaker of `xlb run` that announces
// each VIP as a host route to routers (a fleet behind ECMP). Only `xlb run`
// reads it; Config.BGP is nil when the file has no [bgp].
type BGP struct {
	ASN uint32
	// RouterID is the BGP identifier; the zero value means the interface's
	// first IPv4 address, which only `xlb run` can resolve.
	RouterID         netip.Addr
	HoldTime         time.Duration
	GracefulShutdown time.Duration
	Announce         AnnouncePolicy
	Neighbors        []BGPNeighbor
}

// BGPNeighbor is one [[bgp.neighbor]]: a router the instance dials.
type BGPNeighbor struct {
	Address netip.Addr
	ASN     uint32
	Port    uint16
	// Password is the TCP MD5 key (RFC 2385); "" for none.
	Password string
	// MultihopTTL is 0 for a directly connected (eBGP) neighbor, else the
	// TTL of eBGP multihop.
	MultihopTTL uint8
}

// AnnouncePolicy is bgp.announce.
type AnnouncePolicy uint8

const (
	// AnnounceWhenHealthy announces a VIP only while a service behind it
	// has a non-empty eligible set.
	AnnounceWhenHealthy AnnouncePolicy = iota
	// AnnounceAlways announces every VIP while the instance forwards.
	AnnounceAlways
)

var announceNames = [...]string{"when-healthy", "always"}

func (a AnnouncePolicy) String() string { return announceNames[a] }

// Limits of [bgp], as docs/config.md fixes them.
const (
	defaultBGPPort             = 179
	defaultHoldTimeSec         = 9
	minHoldTimeSec             = 3 // RFC 4271 also allows 0 (no keepalives); we do not
	defaultGracefulShutdownSec = 5
	maxGracefulShutdownSec     = 300
	maxASN                     = 1<<32 - 1
	maxTCPMD5KeyLen            = 80 // TCP_MD5SIG_MAXKEYLEN on Linux
)

func (c *converter) bgp(r *rawBGP) *BGP {
	const p = "bgp"
	b := &BGP{
		HoldTime:         seconds(c.integer(p+".hold_time_sec", r.HoldTimeSec, defaultHoldTimeSec, minHoldTimeSec, 65535)),
		GracefulShutdown: seconds(c.integer(p+".graceful_shutdown_sec", r.GracefulShutdownSec, defaultGracefulShutdownSec, 0, maxGracefulShutdownSec)),
		Announce:         AnnouncePolicy(c.enum(p+".announce", r.Announce, announceNames[:], int(AnnounceWhenHealthy))),
	}
	if c.required(p+".asn", r.ASN) {
		b.ASN = uint32(c.integer(p+".asn", r.ASN, 0, 1, maxASN))
	}
	if s, ok := c.text(p+".router_id", r.RouterID); ok {
		b.RouterID = c.routerID(p+".router_id", s)
	}
	addrs := map[netip.Addr]int{}
	for i := range r.Neighbor {
		b.Neighbors = append(b.Neighbors, c.neighbor(i, &r.Neighbor[i], b.ASN, addrs))
	}
	return b
}

// routerID parses a BGP identifier: four bytes written as an IPv4 address,
// never 0.0.0.0 (RFC 6286).
func (c *converter) routerID(path, s string) netip.Addr {
	a, err := netip.ParseAddr(s)
	switch {
	case err != nil || !a.Is4():
		c.add(path, "%q is not an IPv4 address", s)
	case a.IsUnspecified():
		c.add(path, "%s is not a valid BGP identifier", s)
	default:
		return a
	}
	return netip.Addr{}
}

func (c *converter) neighbor(i int, r *rawNeighbor, localASN uint32, addrs map[netip.Addr]int) BGPNeighbor {
	p := fmt.Sprintf("bgp.neighbor[%d]", i)
	n := BGPNeighbor{
		Port:        uint16(c.integer(p+".port", r.Port, defaultBGPPort, 1, 65535)),
		Password:    c.str(p+".password", r.Password, ""),
		MultihopTTL: uint8(c.integer(p+".multihop_ttl", r.MultihopTTL, 0, 0, 255)),
	}
	n.Address = c.requiredHostAddr(p+".address", r.Address)
	if n.Address.IsValid() {
		if j, dup := addrs[n.Address]; dup {
			c.add(p+".address", "%s is already the address of bgp.neighbor[%d]", n.Address, j)
		} else {
			addrs[n.Address] = i
		}
	}
	if c.required(p+".asn", r.ASN) {
		n.ASN = uint32(c.integer(p+".asn", r.ASN, 0, 1, maxASN))
	}
	if len(n.Password) > maxTCPMD5KeyLen {
		c.add(p+".password", "is %d bytes long; TCP MD5 keys have at most %d", len(n.Password), maxTCPMD5KeyLen)
	}
	// An iBGP session is multihop anyway; a TTL for it would be ignored.
	if n.MultihopTTL > 0 && n.ASN != 0 && n.ASN == localASN {
		c.add(p+".multihop_ttl", "applies only to eBGP neighbors; asn %d is bgp.asn", n.ASN)
	}
	return n
}

// BGPRestartFields names the [bgp] settings that differ between old and cfg
// and that only a restart applies: "bgp" when the section is added or
// removed, "bgp.asn" and "bgp.router_id" (the speaker's identity). Nil means
// a reload can apply the change: neighbors added, removed or changed,
// hold_time_sec (the speaker updates every session), graceful_shutdown_sec
// and announce (policy of the appliance), and the VIPs, which come from
// the forwarding rules.
func BGPRestartFields(old, cfg *BGP) []string {
	switch {
	case old == nil && cfg == nil:
		return nil
	case old == nil || cfg == nil:
		return []string{"bgp"}
	}
	var out []string
	if old.ASN != cfg.ASN {
		out = append(out, "bgp.asn")
	}
	if old.RouterID != cfg.RouterID {
		out = append(out, "bgp.router_id")
	}
	return out
}

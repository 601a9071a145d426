package config

import (
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"sync"
)

// The raw* types mirror the TOML schema of docs/config.md. Tables are
// structs so that the decoder walks them; every leaf is a val, which takes any
// TOML value. Types are checked during conversion instead of by the decoder,
// because the decoder stops at the first mismatch and names it without array
// indexes; this way every error is collected with its full path.

type rawFile struct {
	Dataplane      rawDataplane     `toml:"dataplane"`
	Admin          rawAdmin         `toml:"admin"`
	HealthCheck    []rawHealthCheck `toml:"health_check"`
	BackendService []rawService     `toml:"backend_service"`
	ForwardingRule []rawRule        `toml:"forwarding_rule"`
	// BGP is nil when the file has no [bgp]: the section is optional as a
	// whole, and its required keys are required only when it is there.
	BGP *rawBGP `toml:"bgp"`
	// FlowSync is nil when the file has no [flow_sync], as BGP.
	FlowSync *rawFlowSync `toml:"flow_sync"`
}

type rawDataplane struct {
	Interface             val `toml:"interface"`
	Queues                val `toml:"queues"`
	CPUs                  val `toml:"cpus"`
	XDPMode               val `toml:"xdp_mode"`
	ZeroCopy              val `toml:"zero_copy"`
	FrameSize             val `toml:"frame_size"`
	RingSize              val `toml:"ring_size"`
	ConntrackCapacity     val `toml:"conntrack_capacity"`
	ConntrackSYNTimeout   val `toml:"conntrack_syn_timeout_sec"`
	ConntrackNewEntryRate val `toml:"conntrack_new_entry_rate"`
	StateDir              val `toml:"state_dir"`
	User                  val `toml:"user"`
}

type rawAdmin struct {
	Listen val `toml:"listen"`
	Socket val `toml:"socket"`
	Pprof  val `toml:"pprof"`
}

type rawHealthCheck struct {
	Name               val `toml:"name"`
	Type               val `toml:"type"`
	Port               val `toml:"port"`
	RequestPath        val `toml:"request_path"`
	Host               val `toml:"host"`
	Response           val `toml:"response"`
	CheckIntervalSec   val `toml:"check_interval_sec"`
	TimeoutSec         val `toml:"timeout_sec"`
	HealthyThreshold   val `toml:"healthy_threshold"`
	UnhealthyThreshold val `toml:"unhealthy_threshold"`
}

type rawService struct {
	Name                         val         `toml:"name"`
	Protocol                     val         `toml:"protocol"`
	SessionAffinity              val         `toml:"session_affinity"`
	LocalityLBPolicy             val         `toml:"locality_lb_policy"`
	HealthChecks                 val         `toml:"health_checks"`
	ConnectionDrainingTimeoutSec val         `toml:"connection_draining_timeout_sec"`
	ForwardingMethod             val         `toml:"forwarding_method"`
	GUEPort                      val         `toml:"gue_port"`
	MaglevTableSize              val         `toml:"maglev_table_size"`
	Tracking                     rawTracking `toml:"connection_tracking_policy"`
	Failover                     rawFailover `toml:"failover_policy"`
	Backend                      []rawGroup  `toml:"backend"`
	QUICLB                       []rawQUICLB `toml:"quic_lb"`
}

type rawQUICLB struct {
	ConfigRotation val `toml:"config_rotation"`
	ServerIDLength val `toml:"server_id_length"`
	NonceLength    val `toml:"nonce_length"`
	KeyFile        val `toml:"key_file"`
}

type rawTracking struct {
	TrackingMode val `toml:"tracking_mode"`
	Persistence  val `toml:"connection_persistence_on_unhealthy_backends"`
	IdleTimeout  val `toml:"idle_timeout_sec"`
}

type rawFailover struct {
	Ratio        val `toml:"failover_ratio"`
	Drop         val `toml:"drop_traffic_if_unhealthy"`
	DisableDrain val `toml:"disable_connection_drain_on_failover"`
}

type rawGroup struct {
	Group     val           `toml:"group"`
	Failover  val           `toml:"failover"`
	Endpoints []rawEndpoint `toml:"endpoints"`
}

type rawEndpoint struct {
	Name     val `toml:"name"`
	IP       val `toml:"ip"`
	MAC      val `toml:"mac"`
	ServerID val `toml:"server_id"`
}

type rawRule struct {
	Name           val `toml:"name"`
	IPAddress      val `toml:"ip_address"`
	IPProtocol     val `toml:"ip_protocol"`
	Ports          val `toml:"ports"`
	PortRange      val `toml:"port_range"`
	AllPorts       val `toml:"all_ports"`
	SourceIPRanges val `toml:"source_ip_ranges"`
	BackendService val `toml:"backend_service"`
}

type rawBGP struct {
	ASN                 val           `toml:"asn"`
	RouterID            val           `toml:"router_id"`
	HoldTimeSec         val           `toml:"hold_time_sec"`
	GracefulShutdownSec val           `toml:"graceful_shutdown_sec"`
	Announce            val           `toml:"announce"`
	Neighbor            []rawNeighbor `toml:"neighbor"`
}

type rawNeighbor struct {
	Address     val `toml:"address"`
	ASN         val `toml:"asn"`
	Port        val `toml:"port"`
	Password    val `toml:"password"`
	MultihopTTL val `toml:"multihop_ttl"`
}

// val is one leaf value as the decoder found it; set says the key was
// written at all, so that defaults apply only to absent keys.
type val struct {
	v   any
	set bool
}

// UnmarshalTOML implements toml.Unmarshaler.
func (x *val) UnmarshalTOML(v any) error {
	x.v, x.set = v, true
	return nil
}

var valType = reflect.TypeFor[val]()

// checkKeys walks the generic decoding of the file against the raw types:
// every key must be one of the schema (exactly: the decoder itself matches
// struct fields case-insensitively, and MetaData.Undecoded has no array
// indexes), and every table or array of tables must have that shape, so that
// decoding into rawFile cannot fail. It reports whether the shapes were right.
func (c *converter) checkKeys(m map[string]any, t reflect.Type, path string) bool {
	fields := tomlFields(t)
	ok := true
	check := func(k string) {
		ft, known := fields[k]
		if known && ft == valType {
			return // a leaf: its type is checked during conversion
		}
		p := ""
		if !c.quiet {
			p = joinPath(path, k)
		}
		if known && ft.Kind() == reflect.Pointer {
			ft = ft.Elem() // an optional table
		}
		switch {
		case !known:
			msg := "unknown key"
			for name := range fields {
				if strings.EqualFold(name, k) {
					msg += fmt.Sprintf("; did you mean %q?", name)
				}
			}
			c.add(p, "%s", msg)
		case ft.Kind() == reflect.Struct:
			sub, isTable := m[k].(map[string]any)
			if !isTable {
				c.add(p, "expected a table, got %s", show(m[k]))
				ok = false
				return
			}
			ok = c.checkKeys(sub, ft, p) && ok
		case ft.Kind() == reflect.Slice:
			elems, isTables := tables(m[k])
			if !isTables {
				c.add(p, "expected an array of tables, got %s", show(m[k]))
				ok = false
				return
			}
			for i, e := range elems {
				ok = c.checkKeys(e, ft.Elem(), c.index(p, i)) && ok
			}
		}
	}
	if c.quiet {
		// Errors are only counted: any order will do.
		for k := range m {
			check(k)
		}
		return ok
	}
	for _, k := range slices.Sorted(maps.Keys(m)) {
		check(k)
	}
	return ok
}

// tables returns v as a list of tables: [[x]] sections decode as
// []map[string]any, inline arrays as []any.
func tables(v any) ([]map[string]any, bool) {
	switch v := v.(type) {
	case []map[string]any:
		return v, true
	case []any:
		out := make([]map[string]any, len(v))
		for i, e := range v {
			m, ok := e.(map[string]any)
			if !ok {
				return nil, false
			}
			out[i] = m
		}
		return out, true
	}
	return nil, false
}

// fieldCache holds tomlFields' answer per struct type: checkKeys asks for
// every table of the file, thousands of times for the same few types.
var fieldCache sync.Map // reflect.Type → map[string]reflect.Type

// tomlFields maps the toml tag of each field of struct type t to its type.
func tomlFields(t reflect.Type) map[string]reflect.Type {
	if f, ok := fieldCache.Load(t); ok {
		return f.(map[string]reflect.Type)
	}
	fields := make(map[string]reflect.Type, t.NumField())
	for i := range t.NumField() {
		f := t.Field(i)
		fields[f.Tag.Get("toml")] = f.Type
	}
	fieldCache.Store(t, fields)
	return fields
}

// structCache holds fieldsOf's answer per struct type.
var structCache sync.Map // reflect.Type → *structFields

// structFields are the toml tags of a struct's fields, in field order, and
// the index of each field by tag.
type structFields struct {
	tags  []string
	index map[string]int
}

func fieldsOf(t reflect.Type) *structFields {
	if f, ok := structCache.Load(t); ok {
		return f.(*structFields)
	}
	fs := &structFields{tags: make([]string, t.NumField()), index: make(map[string]int, t.NumField())}
	for i := range fs.tags {
		fs.tags[i] = t.Field(i).Tag.Get("toml")
		fs.index[fs.tags[i]] = i
	}
	structCache.Store(t, fs)
	return fs
}

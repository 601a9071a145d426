// Package admin is the appliance's admin listener: Prometheus /metrics,
// /status as JSON and /healthz, on a loopback address by default.
//
// Nothing here touches the hot path. Workers already keep their counters in
// atomics (dataplane.Stats); a scrape or a /status request reads them, the
// current snapshot and the conntrack table at request time, sums the workers'
// counters and labels them (Gather). The exported metrics are documented in
// METRICS.md beside this file.
package admin

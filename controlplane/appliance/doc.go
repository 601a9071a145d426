// Package appliance is xlb running on one interface: what `xlb run` starts
// and stops, as seesaw's engine is behind its thin binary.
//
// New takes a validated configuration; Run checks the host (privileges,
// interface, queues, CPUs, MTU), opens the conntrack table (kept in
// state_dir), starts the neighbour resolver, the control plane and the
// health checks, attaches the XDP program, opens one AF_XDP socket per rx
// queue, starts flow sync ([flow_sync]), one pinned worker per queue and
// the BGP speaker ([bgp]), serves the admin listeners, drops its
// privileges, and on return takes all of it down in reverse order. Ready is
// closed when it forwards, HealthChecked when every health-check target
// has its first result: the two points a route announcement waits for.
//
// While it runs, Status reports its state as one typed admin.Report (what
// /status serves), ReloadFile, Reload and ReloadNow (the admin socket's)
// apply a new configuration as one step (X2), and Drain, Undrain and
// DrainNode are the operator's. The reload works against small interfaces
// (VIP map, neighbour wants, health targets, control plane), so its order
// and its refusals are tested without root.
package appliance

// Package appliance is xlb running on one interface: what `xlb run` starts
// and stops, as seesaw's engine is behind its thin binary.
//
// New takes a validated configuration; Run checks the host (privileges,
// interface, queues, CPUs), starts the neighbour resolver, the control
// plane and the health checks, attaches the XDP program, opens one AF_XDP
// socket and starts one pinned worker per rx queue, serves the admin
// listener, and on return takes all of it down in reverse order. Ready is
// closed when it forwards, HealthChecked when every health-check target
// has its first result: the two points a route announcement waits for.
//
// While it runs, Status reports its state as one typed admin.Report (what
// /status serves), ReloadFile and Reload apply a new configuration as one
// step (X2), and Drain and Undrain are the operator's. The reload works
// against small interfaces (VIP map, neighbour wants, health targets,
// control plane), so its order and its refusals are tested without root.
package appliance

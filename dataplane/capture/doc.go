// Package capture copies frames out of the workers for `xlb capture`:
// tcpdump cannot see frames that the XDP program redirects to AF_XDP
// sockets, so the workers copy the ones an operator asks for, as received
// and as sent, with the engine's verdict.
//
// Each worker gets its own Ring (one writer, one reader, no lock): while a
// capture runs, the worker copies the frames of a batch that match the
// Filter's VIP before deciding them (the engine rewrites in place), and
// after deciding pushes those whose verdict matches, with the rewritten
// bytes of a forwarded frame, into the ring. A full ring drops the copy and
// counts it; the traffic is never held back. While no capture runs the
// worker's cost is one atomic load per batch.
//
// A Session drains the rings of every worker, applies the backend filter
// (a BackendRef resolved against the current snapshot, away from the
// workers) and writes pcapng: interface 0 is "rx" (frames as received),
// interface 1 is "tx" (as sent to the backend), and each packet carries a
// comment with the queue, verdict, reason, service and backend. At the
// end an interface statistics block per interface records the copies
// lost (isb_ifdrop).
package capture

// Package dataplane is the per-packet decision engine: parse, forwarding-rule
// lookup, selection and tracking keys, conntrack, eligible-set Maglev lookup,
// recording and rewrite (SPEC §1–§6, X1). The same Engine runs behind AF_XDP,
// behind the in-memory FramePort, and behind `xlb sim`; there is no second
// model of the rules anywhere. A Decider is one thread's use of the engine: a
// polling worker (dataplane/worker) owns one and feeds it the frames of a
// FramePort.
//
// Policy reaches the engine only as an immutable *Snapshot that the control
// plane builds and swaps atomically; deciders Load it once per batch and
// never wait.
package dataplane

// Package dataplane is the per-packet decision engine: parse, forwarding-rule
// lookup, frames for another MAC and sources no client can have (FR8, FR9),
// routing by QUIC-LB connection ID (quic.go: an ID that names a backend able
// to take the packet sends it there, untracked, before conntrack is asked),
// selection and tracking keys, conntrack, eligible-set Maglev lookup,
// recording and rewrite (SPEC §1–§6, X1). The same Engine runs behind
// AF_XDP, behind the in-memory FramePort, and behind `xlb sim` and `xlb
// explain`; there is no second model of the rules anywhere. A Decider is
// one thread's use of the engine: a polling worker (dataplane/worker) owns
// one and feeds it the frames of a FramePort. With [flow_sync], a decider
// also pushes the flows that become established onto its SyncRing.
//
// Policy reaches the engine only as an immutable *Snapshot that the control
// plane builds and swaps atomically; deciders Load it once per batch and
// never wait.
package dataplane

// Package reflector is a baseline for `lbbench xdp`: an AF_XDP reflector on
// xlb's own socket layer (dataplane/afxdp) and XDP program
// (dataplane/xdpprog), with no balancing logic at all. Per frame it writes
// a backend's MAC as the destination (round-robin per queue) and the
// interface's MAC as the source, and puts the frame back on the TX ring it
// came from:
//
//	NIC rx queue q ──xdpprog: VIP?──> XSKMAP[q] ──> socket q ──rx ring──> worker q
//	worker q: dst MAC = backends[rr], src MAC = ours ──tx ring──> NIC queue q
//
// That is xlb's path without the decision engine, so the two side by side
// split xlb's cost into I/O and engine. One worker per queue runs on a
// locked OS thread (pinned when Config.CPUs says so) with xlb's worker
// policy: batches of Config.Batch frames; when idle it polls without
// sleeping for Config.Spin, then sleeps in poll(2) up to Config.IdleWait.
// The hot path allocates nothing, takes no lock and makes a syscall only
// when the kernel asks for one (need-wakeup).
//
// A frame the TX ring cannot take, after one reap of the completion ring
// and a retry, is recycled and counted (TxFull), as afxdp.FramePort does.
package reflector

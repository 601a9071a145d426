// Package worker runs the per-queue polling loops of the data plane: one
// Worker per rx queue, each on its own locked OS thread (pinned to a CPU
// when configured), moving batches from a dataplane.FramePort through the
// decision engine (the worker's own dataplane.Decider) and back:
//
//	port.Receive (up to Batch frames) ─> decider.Process(frames, now) ─> port.Complete
//	nothing received ─> spin: Poller.Poll(0), a syscall only if the kernel set need-wakeup
//	idle for Spin ─> sleep: Poller.Poll(IdleWait), woken by the first frame
//
// The clock is read once per round (NowMs's CLOCK_MONOTONIC milliseconds,
// the clock the control plane must use too, and the one a conntrack table
// kept across processes carries) and the snapshot once per batch,
// inside the engine. A round allocates nothing and makes no syscall of its
// own; the port and the poller make one only when the kernel asks for it.
// Busy-polling is bounded so that an idle appliance sleeps instead of
// burning its cores.
//
// A worker runs with memory faults made panics (debug.SetPanicOnFault):
// a conntrack table kept in a file truncated under the process faults,
// and each batch's decision recovers a fault inside that table's mapping
// (the decider then goes on with an empty table in memory, every frame
// of the batch decided once: dataplane.Decider.Contain). Any other panic
// or fault still ends the process.
//
// The package lives apart from dataplane because the AF_XDP frame port
// (afxdp.FramePort) imports dataplane; it depends on neither afxdp nor the
// control plane, so its loop is tested with fake ports.
package worker

package xdp

import (
	"runtime"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// keepBusy runs a SCHED_IDLE thread spinning on cpu until the returned
// stop is called. Any other thread preempts it at once, so it takes no
// time from them; it only keeps the core out of idle, as a polling worker
// does, for the busy floor (see addFloors): on a virtual machine an
// interrupt to a busy virtual CPU is delivered much later than to an idle
// one, and that is the path's cost, not a forwarder's.
func keepBusy(cpu int) (stop func(), err error) {
	var quit atomic.Bool
	started := make(chan error, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		var set unix.CPUSet
		set.Set(cpu)
		if err := unix.SchedSetaffinity(0, &set); err != nil {
			started <- err
			return
		}
		if err := unix.SchedSetAttr(0, &unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: unix.SCHED_IDLE}, 0); err != nil {
			started <- err
			return
		}
		started <- nil
		for !quit.Load() {
		}
	}()
	if err := <-started; err != nil {
		<-done
		return nil, err
	}
	return func() { quit.Store(true); <-done }, nil
}

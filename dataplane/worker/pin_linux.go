package worker

import "golang.org/x/sys/unix"

// pin restricts the calling thread (pid 0 is the calling thread for
// sched_setaffinity) to cpu.
func pin(cpu int) error {
	var set unix.CPUSet
	set.Set(cpu)
	return unix.SchedSetaffinity(0, &set)
}

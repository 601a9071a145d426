package maglevbench

import "golang.org/x/sys/unix"

// pinOneCPU pins the calling thread to the highest-numbered CPU it may run
// on (CPU 0 tends to take more interrupts) and returns it, or -1 when that
// fails. The caller has locked its goroutine to the thread.
func pinOneCPU() int {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return -1
	}
	cpu := -1
	for i := range len(set) * 64 {
		if set.IsSet(i) {
			cpu = i
		}
	}
	if cpu < 0 {
		return -1
	}
	var one unix.CPUSet
	one.Set(cpu)
	if err := unix.SchedSetaffinity(0, &one); err != nil {
		return -1
	}
	return cpu
}

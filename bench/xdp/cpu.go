package xdp

import (
	"bufio"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// taskCPU is the CPU time a task (a thread, or a kernel thread) has run,
// from /proc/PID/schedstat (ns; the scheduler's own accounting), falling
// back to utime+stime of /proc/PID/stat (clock ticks) without schedstat.
func taskCPU(dir string) (time.Duration, bool) {
	if b, err := os.ReadFile(filepath.Join(dir, "schedstat")); err == nil {
		if f := strings.Fields(string(b)); len(f) > 0 {
			if ns, err := strconv.ParseUint(f[0], 10, 64); err == nil {
				return time.Duration(ns), true
			}
		}
	}
	f, ok := statFields(dir)
	if !ok || len(f) < 13 {
		return 0, false
	}
	u, _ := strconv.ParseUint(f[11], 10, 64)
	st, _ := strconv.ParseUint(f[12], 10, 64)
	return time.Duration(u+st) * time.Second / clockTicks, true
}

const clockTicks = 100 // USER_HZ on Linux

// pidCPU is the CPU time of task pid.
func pidCPU(pid int) time.Duration {
	d, _ := taskCPU("/proc/" + strconv.Itoa(pid))
	return d
}

// processCPU sums the CPU time of every thread of process pid.
func processCPU(pid int) time.Duration {
	base := "/proc/" + strconv.Itoa(pid) + "/task"
	ents, err := os.ReadDir(base)
	if err != nil {
		return 0
	}
	var sum time.Duration
	for _, e := range ents {
		if d, ok := taskCPU(filepath.Join(base, e.Name())); ok {
			sum += d
		}
	}
	return sum
}

// cpuTimes are /proc/stat's busy and total jiffies per CPU, and of busy
// the time the VM's host ran something else on it (steal).
type cpuTimes struct {
	busy, total, steal []uint64
}

// readCPUTimes reads /proc/stat. Busy is everything but idle and iowait.
func readCPUTimes() cpuTimes {
	var t cpuTimes
	f, err := os.Open("/proc/stat")
	if err != nil {
		return t
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) < 8 || !strings.HasPrefix(fs[0], "cpu") || fs[0] == "cpu" {
			continue
		}
		var busy, total, steal uint64
		for i, v := range fs[1:] {
			n, _ := strconv.ParseUint(v, 10, 64)
			if i >= 8 { // guest time is already in user
				break
			}
			total += n
			if i != 3 && i != 4 { // idle, iowait
				busy += n
			}
			if i == 7 {
				steal = n
			}
		}
		t.busy = append(t.busy, busy)
		t.total = append(t.total, total)
		t.steal = append(t.steal, steal)
	}
	return t
}

// busyFrac returns, per CPU, the fraction of time busy between a and b.
func busyFrac(a, b cpuTimes) []float64 {
	var out []float64
	for i := range min(len(a.busy), len(b.busy)) {
		if dt := b.total[i] - a.total[i]; dt > 0 {
			out = append(out, float64(b.busy[i]-a.busy[i])/float64(dt))
		} else {
			out = append(out, 0)
		}
	}
	return out
}

// benchNice is the nice value of every thread the bench measures: the
// generator, both NAPI threads, xlb and the reflector's workers alike, so
// that other load on the machine disturbs the figures less.
const benchNice = -10

// renice sets the nice value of task (thread) tid.
func renice(tid, nice int) error {
	return unix.Setpriority(unix.PRIO_PROCESS, tid, nice)
}

// reniceAll sets the nice value of every thread of process pid (threads
// made later inherit it from the thread that makes them) and returns the
// values they had, by thread.
func reniceAll(pid, nice int) map[int]int {
	old := map[int]int{}
	ents, _ := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/task")
	for _, e := range ents {
		tid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		// getpriority(2) returns 20 - nice.
		if p, err := unix.Getpriority(unix.PRIO_PROCESS, tid); err == nil {
			old[tid] = 20 - p
		}
		_ = renice(tid, nice)
	}
	return old
}

// restoreNice puts back what reniceAll returned (threads that are gone are
// skipped; threads made meanwhile keep the bench's value until they end).
func restoreNice(old map[int]int) {
	for tid, n := range old {
		_ = renice(tid, n)
	}
}

// setFIFO makes task pid SCHED_FIFO at the lowest real-time priority (the
// kernel's real-time throttling still leaves other tasks 5% of the core).
func setFIFO(pid int) error {
	return unix.SchedSetAttr(pid, &unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: unix.SCHED_FIFO, Priority: 1}, 0)
}

// napiSlice is the time slice of the middle's NAPI thread (see pinNAPI).
const napiSlice = 100 * time.Microsecond

// setSlice makes task pid SCHED_OTHER at nice with a custom time slice
// (sched_attr.sched_runtime; EEVDF lets a task with a shorter slice
// preempt on wakeup).
func setSlice(pid, nice int, slice time.Duration) error {
	return unix.SchedSetAttr(pid, &unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: unix.SCHED_NORMAL,
		Nice: int32(nice), Runtime: uint64(slice)}, 0)
}

// taskFaults is the page faults (minor and major) task dir has taken, from
// /proc/PID/stat.
func taskFaults(dir string) (uint64, bool) {
	f, ok := statFields(dir)
	if !ok || len(f) < 10 {
		return 0, false
	}
	minflt, _ := strconv.ParseUint(f[7], 10, 64)
	majflt, _ := strconv.ParseUint(f[9], 10, 64)
	return minflt + majflt, true
}

// threadStat is one thread's CPU time and page faults so far, and from
// the scheduler: the time it waited runnable on a run queue (schedstat's
// second field) and its context switches, voluntary (it slept: poll(2), a
// futex) and not (preempted), from /proc/PID/task/TID/status.
type threadStat struct {
	cpu         time.Duration
	faults      uint64
	wait        time.Duration
	slices      uint64 // times it got the CPU (schedstat's third field)
	vol, nonvol uint64
}

// taskSched reads task dir's run-queue wait, times on the CPU and context
// switches.
func taskSched(dir string) (wait time.Duration, slices, vol, nonvol uint64) {
	if b, err := os.ReadFile(filepath.Join(dir, "schedstat")); err == nil {
		if f := strings.Fields(string(b)); len(f) > 2 {
			ns, _ := strconv.ParseUint(f[1], 10, 64)
			wait = time.Duration(ns)
			slices, _ = strconv.ParseUint(f[2], 10, 64)
		}
	}
	b, err := os.ReadFile(filepath.Join(dir, "status"))
	if err != nil {
		return wait, slices, 0, 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(l, ":")
		if !ok {
			continue
		}
		switch k {
		case "voluntary_ctxt_switches":
			vol, _ = strconv.ParseUint(strings.TrimSpace(v), 10, 64)
		case "nonvoluntary_ctxt_switches":
			nonvol, _ = strconv.ParseUint(strings.TrimSpace(v), 10, 64)
		}
	}
	return wait, slices, vol, nonvol
}

// taskStat reads one task's threadStat.
func taskStat(dir string) threadStat {
	cpu, _ := taskCPU(dir)
	flt, _ := taskFaults(dir)
	wait, slices, vol, nonvol := taskSched(dir)
	return threadStat{cpu: cpu, faults: flt, wait: wait, slices: slices, vol: vol, nonvol: nonvol}
}

// sub is s - o, field by field (o: the same task earlier; zero for a task
// made since).
func (s threadStat) sub(o threadStat) threadStat {
	d := func(a, b uint64) uint64 { return a - min(a, b) }
	return threadStat{cpu: max(s.cpu-o.cpu, 0), faults: d(s.faults, o.faults), wait: max(s.wait-o.wait, 0),
		slices: d(s.slices, o.slices), vol: d(s.vol, o.vol), nonvol: d(s.nonvol, o.nonvol)}
}

// threadStats reads every thread of process pid, by thread id.
func threadStats(pid int) map[string]threadStat {
	base := "/proc/" + strconv.Itoa(pid) + "/task"
	ents, err := os.ReadDir(base)
	if err != nil {
		return nil
	}
	m := map[string]threadStat{}
	for _, e := range ents {
		m[e.Name()] = taskStat(filepath.Join(base, e.Name()))
	}
	return m
}

// faultsBetween returns the page faults of the whole process between two
// threadStats and those of its busiest thread over that time (the
// forwarder's worker, when it forwarded anything).
func faultsBetween(a, b map[string]threadStat) (process, busiest uint64) {
	_, w := busiestBetween(a, b)
	for tid, s1 := range b {
		process += s1.sub(a[tid]).faults
	}
	return process, w.faults
}

// busiestBetween returns the thread that ran longest between two
// threadStats (the forwarder's worker, when it forwarded anything) and
// what it did over that time.
func busiestBetween(a, b map[string]threadStat) (tid string, d threadStat) {
	d.cpu = -1
	for t, s1 := range b {
		if s := s1.sub(a[t]); s.cpu > d.cpu {
			tid, d = t, s
		}
	}
	if d.cpu < 0 {
		d.cpu = 0
	}
	return tid, d
}

// statFields are the fields of task dir's /proc stat after the command
// name (which may hold spaces and parentheses): f[0] is the state.
func statFields(dir string) ([]string, bool) {
	b, err := os.ReadFile(filepath.Join(dir, "stat"))
	if err != nil {
		return nil, false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return nil, false
	}
	return strings.Fields(s[i+1:]), true
}

// pinnedThread is the thread of process pid allowed on cpu only (xlb's
// worker: `cpus` pins it; its other threads may run anywhere), 0 if none.
func pinnedThread(pid, cpu int) int {
	base := "/proc/" + strconv.Itoa(pid) + "/task"
	ents, err := os.ReadDir(base)
	if err != nil {
		return 0
	}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(base, e.Name(), "status"))
		if err != nil {
			continue
		}
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "Cpus_allowed_list:"); ok && strings.TrimSpace(v) == strconv.Itoa(cpu) {
				tid, _ := strconv.Atoi(e.Name())
				return tid
			}
		}
	}
	return 0
}

package decap

import (
	"testing"
	"time"

	"xlb/dataplane/packet"
)

// BenchmarkProgram runs the program in the kernel's test runner and
// reports the kernel's own time per frame (kernel-ns/op; ns/op includes
// the system call). The runner does not restore the frame between
// repetitions, so a frame the program strips is run once per call (the
// kernel's clock then reads in steps of its resolution; the mean over b.N
// calls stands); frames passed untouched use the runner's repetitions.
// The counter each case names must move by b.N: the path measured is the
// one named.
func BenchmarkProgram(b *testing.B) {
	o := load(b, testPort)
	in4 := inner(b, false, packet.ProtoTCP, 0)
	in6 := inner(b, true, packet.ProtoTCP, 0)
	for _, bc := range []struct {
		name  string
		frame []byte
		stat  int
		strip bool
	}{
		{"IPIP-4in4", encap(b, in4, lb4, local4, false), statIPIP4, true},
		{"GUE-6in6", encap(b, in6, lb6, local6, true), statGUE6, true},
		{"host-TCP", in4, statPassedNotTunnel, false},
		{"not-local", encap(b, in4, lb4, other4, false), statPassedNotLocal, false},
	} {
		b.Run(bc.name, func(b *testing.B) {
			before := stats(b, o)
			var total time.Duration
			if bc.strip {
				b.ResetTimer()
				for range b.N {
					_, d, err := o.Program.Benchmark(bc.frame, 1, nil)
					if err != nil {
						b.Fatal(err)
					}
					total += d
				}
			} else {
				_, d, err := o.Program.Benchmark(bc.frame, b.N, b.ResetTimer)
				if err != nil {
					b.Fatal(err)
				}
				total = d * time.Duration(b.N)
			}
			b.StopTimer()
			if got := stats(b, o)[bc.stat] - before[bc.stat]; got < uint64(b.N) {
				b.Fatalf("counter %s moved by %d over %d runs", statNames[bc.stat], got, b.N)
			}
			b.ReportMetric(float64(total.Nanoseconds())/float64(b.N), "kernel-ns/op")
		})
	}
}

package xdpprog

import (
	"testing"
	"time"

	"github.com/google/gopacket/layers"
)

// BenchmarkProgram measures the program in the kernel (BPF_PROG_TEST_RUN
// with repeat) per kind of frame; ns/pkt is the kernel's own timing.
func BenchmarkProgram(b *testing.B) {
	o := loadObjects(b, 1)
	setVIPs(b, o, vip4, vip6)
	for _, c := range []struct {
		name  string
		frame []byte
	}{
		{"v4-host", v4(b, nil, other4, layers.IPProtocolTCP)},
		{"v4-vip", v4(b, nil, vip4, layers.IPProtocolTCP)},
		{"v6-vip", v6(b, nil, vip6, layers.IPProtocolTCP, nil)},
		{"v6-vip-ns-after-hbh", v6(b, nil, vip6, layers.IPProtocolIPv6HopByHop, ext(layers.IPProtocolICMPv6, 0, icmp6(135)))},
		{"arp", arpRequest(b, vip4)},
	} {
		b.Run(c.name, func(b *testing.B) {
			var total time.Duration
			runs := 0
			for b.Loop() {
				_, d, err := o.Program.Benchmark(c.frame, 1000, nil)
				if err != nil {
					b.Fatal(err)
				}
				total += d
				runs++
			}
			b.ReportMetric(float64(total.Nanoseconds())/float64(runs), "ns/pkt")
		})
	}
}

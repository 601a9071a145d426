package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"xlb/scripts/testbed"
)

// diagnostics says where a bed's packets went, for a test whose traffic
// failed (startXLB logs it): a lost SYN was dropped by xlb (its drop
// counters by reason, per queue and per service; a backend whose MAC is
// unknown), never reached xlb's socket (the XDP program's counters, the
// AF_XDP socket's and kernel's ring counters, the balancer veth's own
// drops) or was lost beyond it (each client's and backend's TCP counters:
// SYN retransmits, listen queue overflows, resets). It never fails: what it
// cannot read, it says so.
func diagnostics(b *testbed.Bed) string {
	var out strings.Builder
	section := func(title, body string) {
		fmt.Fprintf(&out, "== %s\n%s", title, body)
		if !strings.HasSuffix(body, "\n") {
			out.WriteByte('\n')
		}
	}

	if r, err := testbed.HTTPGet(b.LB.NS, adminAddr, "/metrics", 2*time.Second); err != nil {
		section("xlb /metrics", err.Error())
	} else {
		var lines []string
		for _, line := range strings.Split(r.Body, "\n") {
			i := strings.LastIndexByte(line, ' ')
			if line == "" || line[0] == '#' || i < 0 {
				continue
			}
			name, v := line[:i], line[i+1:]
			switch {
			case strings.Contains(name, "drop") && v != "0",
				strings.HasPrefix(name, "xlb_queue_") && !strings.Contains(name, "drop"),
				strings.HasPrefix(name, "xlb_backend_ready") && v != "1",
				strings.HasPrefix(name, "xlb_service_eligible_backends"),
				strings.HasPrefix(name, "xlb_conntrack_evictions_total"):
				lines = append(lines, line)
			}
		}
		section("xlb /metrics (non-zero drops by reason, queues, backends not ready, eligible sets)", strings.Join(lines, "\n"))
	}

	if r, err := testbed.HTTPGet(b.LB.NS, adminAddr, "/status", 2*time.Second); err != nil {
		section("xlb /status", err.Error())
	} else {
		var st struct {
			Runtime struct {
				Queues     []json.RawMessage `json:"queues"`
				XDPProgram json.RawMessage   `json:"xdp_program"`
			} `json:"runtime"`
		}
		if err := json.Unmarshal([]byte(r.Body), &st); err != nil {
			section("xlb /status", err.Error())
		} else {
			var body strings.Builder
			line := func(label string, raw json.RawMessage) {
				var c bytes.Buffer
				if json.Compact(&c, raw) != nil {
					c.Reset()
					c.Write(raw)
				}
				fmt.Fprintf(&body, "%s %s\n", label, c.Bytes())
			}
			line("xdp_program", st.Runtime.XDPProgram)
			for _, q := range st.Runtime.Queues {
				line("queue", q)
			}
			section("xlb /status: XDP program, AF_XDP sockets and rings per queue", body.String())
		}
	}

	// The veth pair in front of xlb: drops of the peer's transmit (the
	// rx ring of a queue with XDP full) and of XDP itself.
	sw := b.Opts.Prefix + "-sw"
	for _, c := range [][]string{
		{b.LB.NS, "ip", "-s", "-s", "link", "show", "dev", b.LB.Iface},
		{sw, "ip", "-s", "-s", "link", "show", "dev", b.Opts.Prefix + "-lbsw"},
	} {
		o, err := testbed.Exec(c[0], c[1:]...)
		if err != nil {
			o = err.Error()
		}
		section(c[0]+": "+strings.Join(c[1:], " "), o)
	}
	if _, err := exec.LookPath("ethtool"); err == nil {
		o, err := testbed.Exec(b.LB.NS, "ethtool", "-S", b.LB.Iface)
		if err != nil {
			o = err.Error()
		}
		section(b.LB.NS+": ethtool -S "+b.LB.Iface+" (non-zero)", nonZeroStats(o))
	}

	// The host's per-CPU input backlog (where a veth without NAPI
	// delivers): a full one drops (second column, hex), machine-wide.
	if raw, err := os.ReadFile("/proc/net/softnet_stat"); err == nil {
		var rows []string
		for i, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
			f := strings.Fields(line)
			if len(f) >= 3 {
				d, _ := strconv.ParseUint(f[1], 16, 64)
				sq, _ := strconv.ParseUint(f[2], 16, 64)
				rows = append(rows, fmt.Sprintf("cpu%d dropped=%d time_squeeze=%d", i, d, sq))
			}
		}
		section("/proc/net/softnet_stat (whole host)", strings.Join(rows, "\n"))
	}

	// VIP traffic the XDP program passed to the balancer's kernel: its
	// blackhole route drops it, counted in InAddrErrors (no forwarding).
	if o, err := testbed.Exec(b.LB.NS, "cat", "/proc/net/snmp"); err != nil {
		section(b.LB.NS+": IP counters", err.Error())
	} else {
		c := netCounters(o)
		section(b.LB.NS+": IP counters (/proc/net/snmp)", fmt.Sprintf("InAddrErrors=%d InNoRoutes=%d InDiscards=%d InHdrErrors=%d",
			c["Ip.InAddrErrors"], c["Ip.InNoRoutes"], c["Ip.InDiscards"], c["Ip.InHdrErrors"]))
	}

	// TCP's view at both ends.
	tcp := tcpCounters(b, "Tcp.ActiveOpens", "Tcp.PassiveOpens", "Tcp.AttemptFails", "Tcp.RetransSegs",
		"Tcp.InErrs", "Tcp.OutRsts", "TcpExt.TCPSynRetrans", "TcpExt.TCPTimeouts",
		"TcpExt.ListenOverflows", "TcpExt.ListenDrops", "TcpExt.TCPAbortOnData", "TcpExt.TCPAbortOnClose")
	section("kernel TCP counters per namespace (/proc/net/snmp, netstat)", tcp)
	return out.String()
}

// tcpCounters is one line per client and backend namespace of b with the
// kernel's counters named by keys ("Tcp.RetransSegs", "TcpExt.TCPTimeouts").
func tcpCounters(b *testbed.Bed, keys ...string) string {
	hosts := append([]testbed.Host(nil), b.Clients...)
	for _, be := range b.Backends {
		hosts = append(hosts, be.Host)
	}
	var tcp strings.Builder
	for _, h := range hosts {
		o, err := testbed.Exec(h.NS, "cat", "/proc/net/snmp", "/proc/net/netstat")
		if err != nil {
			fmt.Fprintf(&tcp, "%s: %v\n", h.Name, err)
			continue
		}
		c := netCounters(o)
		var kv []string
		for _, k := range keys {
			kv = append(kv, fmt.Sprintf("%s=%d", strings.TrimPrefix(k, "TcpExt."), c[k]))
		}
		fmt.Fprintf(&tcp, "%s: %s\n", h.Name, strings.Join(kv, " "))
	}
	return tcp.String()
}

// netCounters reads /proc/net/snmp and /proc/net/netstat, pairs of header
// and value lines, into "Tcp.RetransSegs" -> value.
func netCounters(text string) map[string]int64 {
	m := map[string]int64{}
	lines := strings.Split(text, "\n")
	for i := 0; i+1 < len(lines); i++ {
		h, v := strings.Fields(lines[i]), strings.Fields(lines[i+1])
		if len(h) < 2 || len(h) != len(v) || h[0] != v[0] || !strings.HasSuffix(h[0], ":") {
			continue
		}
		if _, err := strconv.ParseInt(v[1], 10, 64); err != nil {
			continue // this is a header followed by a header
		}
		proto := strings.TrimSuffix(h[0], ":")
		for j := 1; j < len(h); j++ {
			n, _ := strconv.ParseInt(v[j], 10, 64)
			m[proto+"."+h[j]] = n
		}
		i++
	}
	return m
}

// nonZeroStats keeps the "name: value" lines of ethtool -S whose value is
// not 0, sorted.
func nonZeroStats(text string) string {
	var keep []string
	for _, line := range strings.Split(text, "\n") {
		_, v, ok := strings.Cut(line, ":")
		if ok && strings.TrimSpace(v) != "0" && strings.TrimSpace(v) != "" {
			keep = append(keep, strings.TrimSpace(line))
		}
	}
	sort.Strings(keep)
	return strings.Join(keep, "\n")
}

// lossSummary is a one-line account of packets lost on the way: the
// client's SYN retransmits and xlb's non-zero drop counters by reason (per
// queue), and the kernel's AF_XDP ring drops.
func lossSummary(t *testing.T, b *testbed.Bed) string {
	t.Helper()
	var parts []string
	o, err := testbed.Exec(b.Clients[0].NS, "cat", "/proc/net/snmp", "/proc/net/netstat")
	if err != nil {
		t.Fatal(err)
	}
	c := netCounters(o)
	parts = append(parts, fmt.Sprintf("client SYN retransmits %d, segments retransmitted %d", c["TcpExt.TCPSynRetrans"], c["Tcp.RetransSegs"]))
	m := metrics(t, b)
	var drops []string
	for k, v := range m {
		if strings.HasPrefix(k, "xlb_queue_drop_packets_total") && v != 0 {
			drops = append(drops, fmt.Sprintf("%s %v", strings.TrimPrefix(k, "xlb_queue_drop_packets_total"), v))
		}
	}
	sort.Strings(drops)
	parts = append(parts, fmt.Sprintf("xlb drops %v", drops))
	var ring uint64
	for _, q := range getStatusRaw(t, b).Runtime.Queues {
		if q.Kernel != nil {
			ring += q.Kernel.RxDropped + q.Kernel.RxRingFull + q.Kernel.FillRingEmpty
		}
		ring += q.RingDropped + q.TxFull
	}
	parts = append(parts, fmt.Sprintf("AF_XDP ring drops (kernel rx_dropped, rx_ring_full, fill_ring_empty; ring_dropped, tx_ring_full_drops) %d", ring))
	return strings.Join(parts, "; ")
}

// getStatusRaw reads the per-queue ring counters of /status.
func getStatusRaw(t *testing.T, b *testbed.Bed) (s struct {
	Runtime struct {
		Queues []struct {
			RingDropped uint64 `json:"ring_dropped"`
			TxFull      uint64 `json:"tx_ring_full_drops"`
			Kernel      *struct {
				RxDropped     uint64 `json:"rx_dropped"`
				RxRingFull    uint64 `json:"rx_ring_full"`
				FillRingEmpty uint64 `json:"fill_ring_empty"`
			} `json:"kernel"`
		} `json:"queues"`
	} `json:"runtime"`
}) {
	t.Helper()
	body := admin(t, b, "/status")
	if err := json.Unmarshal([]byte(body), &s); err != nil {
		t.Fatalf("/status: %v", err)
	}
	return s
}

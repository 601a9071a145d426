package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"xlb/dataplane/decap"
	"xlb/scripts/testbed"
)

// decapStats is `xlb decap --stats --json` of one backend.
type decapStats struct {
	Ifindex  int          `json:"ifindex"`
	Local    []netip.Addr `json:"local"`
	Counters decap.Stats  `json:"counters"`
}

// attachDecap runs `xlb decap` on backend be's interface (GUE port of the
// config, the balancer's addresses on the backends' subnet, its outer
// sources, allowed, lo's VIPs served, pins in the bpffs at pinDir) and
// detaches it when t ends, checking that --detach says so.
func attachDecap(t *testing.T, be *testbed.Backend, pinDir string) {
	t.Helper()
	out, err := testbed.Exec(be.NS, xlbBin, "decap", "--iface", be.Iface, "--gue-port", fmt.Sprint(guePort), "--pin-dir", pinDir,
		"--allow-from", testbed.LBBackendSide4.String()+","+testbed.LBBackendSide6.String())
	if err != nil {
		t.Fatalf("xlb decap on %s: %v", be.Name, err)
	}
	if !strings.Contains(out, "attached to "+be.Iface) || !strings.Contains(out, be.Addr4.String()) || !strings.Contains(out, be.Addr6.String()) {
		t.Fatalf("xlb decap on %s: %q, want it attached with %s and %s", be.Name, out, be.Addr4, be.Addr6)
	}
	t.Cleanup(func() {
		out, err := testbed.Exec(be.NS, xlbBin, "decap", "--iface", be.Iface, "--detach", "--pin-dir", pinDir)
		if err != nil || !strings.Contains(out, "detached from "+be.Iface) {
			t.Errorf("xlb decap --detach on %s: %q, %v", be.Name, out, err)
		}
	})
}

// readDecapStats reads backend be's decap counters.
func readDecapStats(t *testing.T, be *testbed.Backend, pinDir string) decapStats {
	t.Helper()
	out, err := testbed.Exec(be.NS, xlbBin, "decap", "--iface", be.Iface, "--stats", "--json", "--pin-dir", pinDir)
	if err != nil {
		t.Fatalf("xlb decap --stats on %s: %v", be.Name, err)
	}
	var s decapStats
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		t.Fatalf("xlb decap --stats --json on %s: %v\n%s", be.Name, err, out)
	}
	return s
}

// pinRoot mounts a bpffs of t's own (the `ip netns exec` of testbed.Exec
// mounts a fresh /sys, without the host's /sys/fs/bpf, but keeps this
// one) and unmounts it at the end, after the detaches.
func pinRoot(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := unix.Mount("bpf", dir, "bpf", 0, "mode=0700"); err != nil {
		t.Fatalf("mounting a bpffs on %s: %v", dir, err)
	}
	t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
	return dir
}

// checkDecapsulated attaches `xlb decap` to b1-b3 and carries real kernel
// TCP (new HTTP connections) and UDP (echo exchanges) through every
// decapCase: each request reaches the case's backend through xlb's IPIP or
// GUE, is decapsulated by the backend's XDP program, answered by the
// backend's kernel from the VIP on its lo, and the answer goes straight to
// the client (DSR). The backend's counter for the case's encapsulation and
// outer family grows by at least the number of packets that carried the
// requests; nothing the balancer sent is counted as invalid, not local or
// dropped (its outer sources are the allowed ones, the VIPs on lo served).
func checkDecapsulated(t *testing.T, b *testbed.Bed) {
	const exchanges = 10
	root := pinRoot(t)
	for _, name := range []string{"b1", "b2", "b3"} {
		attachDecap(t, b.Backend(name), root)
	}
	c := b.Clients[0]
	for _, tc := range decapCases {
		t.Run(tc.name, func(t *testing.T) {
			be := b.Backend(tc.be)
			before := readDecapStats(t, be, root)
			dst := netip.AddrPortFrom(tc.vip, tc.port)
			for i := range exchanges {
				r, err := testbed.HTTPGet(c.NS, dst, fmt.Sprintf("/decap/%d", i), 3*time.Second)
				if err != nil {
					t.Fatalf("HTTP %d to %s: %v", i, dst, err)
				}
				if r.Status != 200 || r.Backend != be.Name {
					t.Fatalf("HTTP %d to %s: status %d from %q, want 200 from %s", i, dst, r.Status, r.Backend, be.Name)
				}
				got, err := testbed.UDPEcho(c.NS, dst, fmt.Sprintf("decap %s %d", tc.name, i), 3*time.Second)
				if err != nil {
					t.Fatalf("UDP %d to %s: %v", i, dst, err)
				}
				if got != be.Name {
					t.Fatalf("UDP %d to %s echoed by %s, want %s", i, dst, got, be.Name)
				}
			}
			after := readDecapStats(t, be, root)
			counter := func(s decapStats) uint64 {
				switch {
				case tc.gue && tc.outer6:
					return s.Counters.GUE6
				case tc.gue:
					return s.Counters.GUE4
				case tc.outer6:
					return s.Counters.IPIP6
				}
				return s.Counters.IPIP4
			}
			// Per exchange at least: SYN, the request, the ACK of the
			// answer, and the UDP datagram.
			if d := counter(after) - counter(before); d < 4*exchanges {
				t.Errorf("%s: the backend's counter grew by %d over %d exchanges, want at least %d", tc.name, d, exchanges, 4*exchanges)
			}
			if after.Counters.PassedInvalid != before.Counters.PassedInvalid || after.Counters.PassedNotLocal != before.Counters.PassedNotLocal ||
				after.Counters.Dropped() != before.Counters.Dropped() {
				t.Errorf("%s: passed_invalid %d -> %d, passed_not_local %d -> %d, dropped %d -> %d: frames the balancer sent were not decapsulated",
					tc.name, before.Counters.PassedInvalid, after.Counters.PassedInvalid, before.Counters.PassedNotLocal, after.Counters.PassedNotLocal,
					before.Counters.Dropped(), after.Counters.Dropped())
			}
			t.Logf("%s: %d HTTP and %d UDP exchanges with %s through its decap program (%d frames decapsulated)",
				tc.name, exchanges, exchanges, be.Name, counter(after)-counter(before))
		})
	}
	t.Run("PMTU", func(t *testing.T) { checkPMTU(t, b) })
}

// checkPMTU: real path-MTU discovery through the encapsulation (X1). The
// client's kernel starts with no learned MTU for the VIP and uploads 1 MiB
// over one TCP connection; its full-size segments (1500 bytes) do not fit
// the 1500-byte MTU with the outer headers, so xlb answers them with ICMP
// fragmentation needed / packet too big carrying the room left; the
// client's kernel lowers its path MTU to exactly that (`ip route get`
// shows it), resends smaller segments, and the backend receives every
// byte through its decap program.
func checkPMTU(t *testing.T, b *testbed.Bed) {
	const upload = 1 << 20
	c := b.Clients[0]
	for _, tc := range []struct {
		name string
		dst  netip.AddrPort
		be   string
		room int // 1500 - outer headers
	}{
		{"IPIP/4-in-4", netip.AddrPortFrom(testbed.VIP4, 8080), "b1", 1500 - 20},
		{"GUE/6-in-6", netip.AddrPortFrom(testbed.VIP6, 8081), "b2", 1500 - 40 - 8 - 4},
		{"GUE/4-in-6", netip.AddrPortFrom(testbed.VIP4, 8083), "b3", 1500 - 40 - 8 - 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			family := "-4"
			if tc.dst.Addr().Is6() {
				family = "-6"
			}
			if _, err := testbed.Exec(c.NS, "ip", family, "route", "flush", "cache"); err != nil {
				t.Fatal(err)
			}
			if out, err := testbed.Exec(c.NS, "ip", family, "route", "get", tc.dst.Addr().String()); err != nil || strings.Contains(out, " mtu ") {
				t.Fatalf("before the upload the client already has a path MTU for %s: %q, %v", tc.dst.Addr(), out, err)
			}
			sent := func() float64 {
				var n float64
				for k, v := range metrics(t, b) {
					if strings.HasPrefix(k, "xlb_queue_icmp_too_big_sent_total{") {
						n += v
					}
				}
				return n
			}
			before := sent()
			backend, received, err := httpUpload(c.NS, tc.dst, upload, 20*time.Second)
			if err != nil {
				t.Fatalf("uploading %d bytes to %s: %v", upload, tc.dst, err)
			}
			if backend != tc.be || received != upload {
				t.Fatalf("upload to %s: %s received %d bytes, want %s %d", tc.dst, backend, received, tc.be, upload)
			}
			if d := sent() - before; d < 1 {
				t.Errorf("xlb_queue_icmp_too_big_sent_total grew by %v: no ICMP error was sent", d)
			}
			out, err := testbed.Exec(c.NS, "ip", family, "route", "get", tc.dst.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(out, fmt.Sprintf(" mtu %d", tc.room)) {
				t.Errorf("the client's route to %s after the upload: %q, want mtu %d learned", tc.dst.Addr(), oneLine(out), tc.room)
			}
			t.Logf("%s: %d bytes uploaded to %s; the client learned %q", tc.name, upload, backend, oneLine(out))
		})
	}
}

// httpUpload POSTs n bytes from ns to dst on one connection and returns
// the answering backend and the bytes it says it received.
func httpUpload(ns string, dst netip.AddrPort, n int, timeout time.Duration) (string, int, error) {
	conn, err := testbed.Dial(ns, "tcp", dst, timeout)
	if err != nil {
		return "", 0, err
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(timeout)); err != nil {
		return "", 0, err
	}
	req, err := http.NewRequest(http.MethodPost, "http://"+dst.String()+"/upload", bytes.NewReader(bytes.Repeat([]byte("u"), n)))
	if err != nil {
		return "", 0, err
	}
	if err := req.Write(conn); err != nil {
		return "", 0, err
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), req)
	if err != nil {
		return "", 0, err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return "", 0, err
	}
	if resp.StatusCode != http.StatusOK {
		return "", 0, fmt.Errorf("status %d", resp.StatusCode)
	}
	got, err := strconv.Atoi(resp.Header.Get("X-Received"))
	if err != nil {
		return "", 0, fmt.Errorf("X-Received %q: %v", resp.Header.Get("X-Received"), err)
	}
	return resp.Header.Get("X-Backend"), got, nil
}

// oneLine joins a command's output lines for a message.
func oneLine(out string) string {
	return strings.Join(strings.Fields(out), " ")
}

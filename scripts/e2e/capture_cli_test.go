package e2e

import (
	"bytes"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"

	"xlb/scripts/testbed"
)

// TestCaptureCommand: `xlb capture` against the running xlb copies the
// frames asked for out of its workers (tcpdump on the interface cannot see
// them: the XDP program redirects them): forwarded UDP to a VIP, as
// received and as sent (L2 DSR: the backend's MAC), each with its verdict
// and backend; then dropped frames with their reason. -c N is N distinct
// frames, however many packets that makes (a forwarded frame is two).
// The files read back with gopacket and with tcpdump.
func TestCaptureCommand(t *testing.T) {
	tcpdump, err := exec.LookPath("tcpdump")
	if err != nil {
		t.Skip("tcpdump is not installed (.ci/run installs it)")
	}
	b := upBed(t, testbed.Options{Prefix: "e2ecap"})
	startXLB(t, b, writeConfig(t, b))
	waitStatus(t, b, "healthy backends", allHealthy)
	c := b.Clients[0]
	sock := adminSocket(b.LB.NS)
	echo := netip.AddrPortFrom(testbed.VIP4, testbed.UDPEchoPort)
	noRule := netip.AddrPortFrom(testbed.VIP4, 9)

	// capture runs `xlb capture args -w FILE` while send makes traffic,
	// until the command ends (it stops after its -c frames); its summary
	// must say it wrote frames frames in packets packets.
	capture := func(t *testing.T, frames, packets int, send func(i int), args ...string) []byte {
		t.Helper()
		file := filepath.Join(t.TempDir(), "c.pcapng")
		var stderr bytes.Buffer
		cmd := exec.Command(xlbBin, append([]string{"capture", "--socket", sock, "-w", file}, args...)...)
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		deadline := time.After(30 * time.Second)
		for i := 0; ; i++ {
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("xlb capture %v: %v\n%s", args, err, stderr.String())
				}
				summary := fmt.Sprintf("%d frames written to %s (%d packets", frames, file, packets)
				if !strings.Contains(stderr.String(), summary) || !strings.Contains(stderr.String(), "0 copies lost") {
					t.Errorf("xlb capture: stderr %q, want %q..., 0 copies lost", stderr.String(), summary)
				}
				raw, err := os.ReadFile(file)
				if err != nil {
					t.Fatal(err)
				}
				out, err := exec.Command(tcpdump, "-nn", "-e", "-r", file).CombinedOutput()
				if err != nil {
					t.Fatalf("tcpdump -r: %v\n%s", err, out)
				}
				t.Logf("tcpdump -r:\n%s", out)
				return raw
			case <-deadline:
				_ = cmd.Process.Kill()
				t.Fatalf("xlb capture %v did not end within 30 s: %s", args, stderr.String())
			default:
			}
			send(i)
			time.Sleep(20 * time.Millisecond)
		}
	}
	// packets reads a capture: per interface (0 rx, 1 tx), the frames.
	packets := func(t *testing.T, raw []byte) (rx, tx []gopacket.Packet) {
		t.Helper()
		rd, err := pcapgo.NewNgReader(bytes.NewReader(raw), pcapgo.DefaultNgReaderOptions)
		if err != nil {
			t.Fatal(err)
		}
		for {
			data, ci, err := rd.ReadPacketData()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			p := gopacket.NewPacket(data, layers.LayerTypeEthernet, gopacket.Default)
			if ci.InterfaceIndex == 0 {
				rx = append(rx, p)
			} else {
				tx = append(tx, p)
			}
		}
		return rx, tx
	}

	// payloads are the UDP payloads of frames, in order (the UDP layer's:
	// gopacket decodes port 53's as DNS).
	payloads := func(ps []gopacket.Packet) []string {
		var out []string
		for _, p := range ps {
			if udp, ok := p.Layer(layers.LayerTypeUDP).(*layers.UDP); ok {
				out = append(out, string(udp.Payload))
			} else {
				out = append(out, "")
			}
		}
		return out
	}
	// distinct says whether no two of s are the same.
	distinct := func(s []string) bool {
		seen := map[string]bool{}
		for _, v := range s {
			if v == "" || seen[v] {
				return false
			}
			seen[v] = true
		}
		return true
	}

	// -c counts frames: -c 6 of forwarded traffic is 6 frames, each as
	// received and as sent (12 packets), not 6 packets.
	t.Run("Forwarded", func(t *testing.T) {
		raw := capture(t, 6, 12, func(i int) {
			_, _ = testbed.UDPEcho(c.NS, echo, fmt.Sprintf("cap%d", i), time.Second)
		}, "--vip", testbed.VIP4.String(), "--verdict", "forward", "-c", "6")
		rx, tx := packets(t, raw)
		if len(rx) != 6 || len(tx) != 6 {
			t.Fatalf("%d frames as received, %d as sent; want 6 and 6", len(rx), len(tx))
		}
		// 6 distinct frames, each the same as received and as sent.
		if in, out := payloads(rx), payloads(tx); !distinct(in) || fmt.Sprint(in) != fmt.Sprint(out) {
			t.Errorf("payloads as received %q, as sent %q: want 6 distinct frames, each in both", in, out)
		}
		for i := range rx {
			in, out := rx[i].Layer(layers.LayerTypeUDP), tx[i].Layer(layers.LayerTypeUDP)
			ip := tx[i].Layer(layers.LayerTypeIPv4)
			if in == nil || out == nil || ip == nil || in.(*layers.UDP).DstPort != layers.UDPPort(testbed.UDPEchoPort) ||
				ip.(*layers.IPv4).DstIP.String() != testbed.VIP4.String() {
				t.Fatalf("frame %d: not UDP to the echo VIP as received and as sent:\n%v\n%v", i, rx[i], tx[i])
			}
			inEth, outEth := rx[i].Layer(layers.LayerTypeEthernet).(*layers.Ethernet), tx[i].Layer(layers.LayerTypeEthernet).(*layers.Ethernet)
			if bytes.Equal(inEth.DstMAC, outEth.DstMAC) {
				t.Errorf("frame %d: sent to the MAC it came to (%v): the DSR rewrite is not what was captured as sent", i, outEth.DstMAC)
			}
		}
		if n := bytes.Count(raw, []byte("verdict=forward service=echo backend=10.97.0.1")); n != 12 {
			t.Errorf("%d packet comments name the verdict and an echo backend, want 12", n)
		}
	})

	// A frame only received (dropped) is one frame, one packet.
	t.Run("Dropped", func(t *testing.T) {
		raw := capture(t, 2, 2, func(i int) {
			if conn, err := testbed.Dial(c.NS, "udp", noRule, time.Second); err == nil {
				_, _ = fmt.Fprintf(conn, "nobody%d", i)
				conn.Close()
			}
		}, "--verdict", "drop", "-c", "2")
		rx, tx := packets(t, raw)
		if len(rx) != 2 || len(tx) != 0 {
			t.Fatalf("%d frames as received, %d as sent; want 2 and none", len(rx), len(tx))
		}
		if in := payloads(rx); !distinct(in) {
			t.Errorf("payloads %q: want 2 distinct frames", in)
		}
		if n := bytes.Count(raw, []byte("verdict=drop reason=no-rule")); n != 2 {
			t.Errorf("%d comments say no-rule drop, want 2", n)
		}
	})
}

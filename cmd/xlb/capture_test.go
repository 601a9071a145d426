package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"
	"go.uber.org/zap"

	"xlb/controlplane/admin"
	"xlb/controlplane/cptest"
	"xlb/dataplane"
	"xlb/dataplane/capture"
	"xlb/dataplane/craft"
)

// captureSources captures from a ring the rig's decider fills with one
// batch per capture, as a worker does: forwarded SYNs to web and UDP
// datagrams to a port without a rule (dropped), interleaved.
type captureSources struct {
	*ctlSources
	batch []craft.Packet
}

func (s *captureSources) Capture(ctx context.Context, req admin.CaptureRequest, w io.Writer) (capture.Stats, error) {
	fs := make([]dataplane.Frame, len(s.batch))
	for i := range s.batch {
		b, err := craft.Build(&s.batch[i])
		if err != nil {
			return capture.Stats{}, err
		}
		buf := make([]byte, dataplane.Headroom+len(b)+64)
		copy(buf[dataplane.Headroom:], b)
		fs[i] = dataplane.Frame{Buf: buf, Off: dataplane.Headroom, Len: len(b)}
	}
	ring := capture.NewRing(0, 64, req.Snap, len(fs), req.Filter)
	ring.Before(fs)
	s.rig.D.Process(fs, s.rig.Now)
	ring.After(fs, 1)
	sess := &capture.Session{Rings: []*capture.Ring{ring}, Filter: req.Filter, Count: req.Count, Snap: req.Snap, Flush: req.Flush}
	return sess.Run(ctx, w)
}

// TestCaptureCommand_CountsFrames: `xlb capture -c N` stops after N
// frames, not N packets of the file: a forwarded frame is one frame
// written twice (as received and as sent), a dropped one once; the
// summary says both.
func TestCaptureCommand_CountsFrames(t *testing.T) {
	r := cptest.New(t, ctlConfig)
	src := &captureSources{ctlSources: &ctlSources{rig: r}}
	for i := range 3 {
		src.batch = append(src.batch,
			cptest.TCP("198.51.100.7", "203.0.113.10", uint16(40000+i), 80, "S"), // web: forwarded
			cptest.UDP("198.51.100.7", "203.0.113.10", uint16(41000+i), 99))      // no rule: dropped
	}
	sock := filepath.Join(t.TempDir(), "admin.sock")
	srv, err := admin.New(admin.Options{Listen: "127.0.0.1:0", Socket: sock}, src, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close(t.Context()) })

	for _, tc := range []struct {
		args           []string
		frames, tx     int    // frames (each once as received), of which forwarded (also as sent)
		ports          string // the frames' source ports, in order
		wantSummaryFmt string
	}{
		{[]string{"-c", "3"}, 3, 2, "[40000 41000 40001]", "3 frames written to %s (5 packets"},
		{[]string{"-c", "2", "--verdict", "forward"}, 2, 2, "[40000 40001]", "2 frames written to %s (4 packets"},
		{[]string{"-c", "2", "--verdict", "drop"}, 2, 0, "[41000 41001]", "2 frames written to %s (2 packets"},
	} {
		file := filepath.Join(t.TempDir(), "c.pcapng")
		o := xlb(append([]string{"capture", "--socket", sock, "-w", file}, tc.args...)...)
		o.wantCode(t, 0)
		if want := fmt.Sprintf(tc.wantSummaryFmt, file); !strings.Contains(o.stderr, want) {
			t.Errorf("capture %v: stderr %q, want %q", tc.args, o.stderr, want)
		}
		raw, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		rd, err := pcapgo.NewNgReader(bytes.NewReader(raw), pcapgo.DefaultNgReaderOptions)
		if err != nil {
			t.Fatal(err)
		}
		var ports []int
		tx := 0
		for {
			data, ci, err := rd.ReadPacketData()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			if ci.InterfaceIndex == capture.IfaceTX {
				tx++
				continue
			}
			p := gopacket.NewPacket(data, layers.LayerTypeEthernet, gopacket.Default)
			switch l := p.TransportLayer().(type) {
			case *layers.TCP:
				ports = append(ports, int(l.SrcPort))
			case *layers.UDP:
				ports = append(ports, int(l.SrcPort))
			}
		}
		if len(ports) != tc.frames || tx != tc.tx || fmt.Sprint(ports) != tc.ports {
			t.Errorf("capture %v: %d frames as received (source ports %v), %d as sent; want %d frames %s, %d sent",
				tc.args, len(ports), ports, tx, tc.frames, tc.ports, tc.tx)
		}
	}
}

package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strconv"
	"syscall"

	"xlb/config"
	"xlb/controlplane/admin"
)

// cmdCapture is `xlb capture [--socket PATH | --config FILE] [--vip A]
// [--backend B] [--verdict V,...] [-c N] [--snap N] [--seconds S] -w FILE`:
// the running xlb's workers copy the frames asked for, as received and as
// sent, into a pcapng stream that is written to FILE ("-": stdout) until N
// frames, S seconds or Ctrl-C. -c counts frames, as tcpdump's, not the
// file's packets: a forwarded frame is one frame and two packets (as
// received, as sent), a dropped or passed one a packet; the configuration
// file is --config here.
func cmdCapture(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("capture")
	sock := fs.String("socket", "", "admin socket path (default: [admin] socket of --config FILE, else "+admin.DefaultSocket+")")
	cfgPath := fs.String("config", "", "configuration file (its [admin] socket)")
	vip := fs.String("vip", "", "only frames to this VIP")
	backend := fs.String("backend", "", "only frames forwarded to this backend address")
	verdict := fs.String("verdict", "", "only these verdicts: forward, drop, pass (comma-separated)")
	count := fs.Int("c", 0, "stop after N frames, each counted once though a forwarded one is in the file twice, as received and as sent (0: until --seconds or Ctrl-C)")
	snap := fs.Int("snap", 0, "bytes kept per frame and direction (0: 2048)")
	seconds := fs.Int("seconds", 0, "stop after S seconds (0: until -c or Ctrl-C)")
	file := fs.String("w", "", "pcapng file to write (- for stdout)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *file == "" {
		return fmt.Errorf("xlb capture: -w FILE is required (- for stdout) (%w)", errUsage)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("xlb capture: unexpected argument %q (%w)", fs.Arg(0), errUsage)
	}
	q := url.Values{}
	for k, v := range map[string]string{"vip": *vip, "backend": *backend, "verdict": *verdict} {
		if v != "" {
			q.Set(k, v)
		}
	}
	for k, v := range map[string]int{"count": *count, "snap": *snap, "seconds": *seconds} {
		if v != 0 {
			q.Set(k, strconv.Itoa(v))
		}
	}
	// The running xlb checks the parameters too; checking here gives the
	// error before a file is made.
	if _, _, err := admin.ParseCaptureQuery(q); err != nil {
		return fmt.Errorf("xlb capture: %v (%w)", err, errUsage)
	}
	var cfg *config.Config
	if *cfgPath != "" {
		var err error
		if cfg, err = config.Load(*cfgPath); err != nil {
			return err
		}
	}
	sc := socketClient(*sock, cfg)

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	c := sc.HTTPClient(0) // streams for as long as asked
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://xlb/capture?"+q.Encode(), nil)
	if err != nil {
		return err
	}
	resp, err := c.Do(req)
	if err != nil {
		return fmt.Errorf("xlb capture: %w", sc.DialError(err))
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return fmt.Errorf("xlb capture: %s", body)
	}
	out := stdout
	if *file != "-" {
		f, err := os.Create(*file)
		if err != nil {
			return fmt.Errorf("xlb capture: %w", err)
		}
		defer f.Close()
		out = f
	}
	// Ctrl-C ends the request; what arrived until then is a whole file
	// but for its statistics block.
	n, err := io.Copy(out, resp.Body)
	if err != nil && ctx.Err() == nil {
		return fmt.Errorf("xlb capture: after %d bytes: %w", n, err)
	}
	frames, packets, lost := resp.Trailer.Get(admin.TrailerCaptureFrames), resp.Trailer.Get(admin.TrailerCapturePackets), resp.Trailer.Get(admin.TrailerCaptureLost)
	if frames == "" {
		fmt.Fprintf(stderr, "xlb capture: stopped; %d bytes written to %s\n", n, *file)
		return nil
	}
	if e := resp.Trailer.Get(admin.TrailerCaptureError); e != "" {
		return fmt.Errorf("xlb capture: %s (after %s frames)", e, frames)
	}
	fmt.Fprintf(stderr, "xlb capture: %s frames written to %s (%s packets: each frame as received, and as sent when forwarded), %s copies lost (the workers' rings were full)\n",
		frames, *file, packets, lost)
	return nil
}

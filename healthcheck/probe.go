package healthcheck

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"os"
	"strings"
	"syscall"
	"time"

	"xlb/config"
)

// prober is one check of one backend: one method, as in seesaw, so the
// loop that schedules probes knows nothing about protocols.
type prober interface {
	// probe runs one probe; ctx carries its deadline.
	probe(ctx context.Context) outcome
}

// outcome is one probe's verdict and weight report.
type outcome struct {
	pass   bool
	reason string
	weight uint32
	state  WeightState
}

// newProber builds the prober of t's check.
func (c *Checker) newProber(t Target) (prober, error) {
	if c.opts.Probe != nil {
		return funcProber{fn: c.opts.Probe, t: t}, nil
	}
	ap := netip.AddrPortFrom(t.Addr, uint16(t.Check.Port))
	switch t.Check.Type {
	case config.CheckTCP:
		return &tcpProber{addr: ap.String(), response: t.Check.Response, timeout: t.Check.Timeout}, nil
	case config.CheckHTTP:
		// request_path is a request target ("/healthz?full=1"): parsed,
		// not pasted, so a zoned IPv6 address cannot break the URL.
		u, err := url.ParseRequestURI(t.Check.RequestPath)
		if err != nil || !strings.HasPrefix(t.Check.RequestPath, "/") {
			return nil, fmt.Errorf("request path %q: not an absolute path", t.Check.RequestPath)
		}
		u.Scheme, u.Host = "http", ap.String()
		host := t.Check.Host
		if host == "" {
			// The backend's address, as a Host header writes it.
			host = t.Addr.WithZone("").String()
			if t.Addr.Is6() && !t.Addr.Is4In6() {
				host = "[" + host + "]"
			}
		}
		return &httpProber{client: c.client, url: u.String(), host: host, response: t.Check.Response, timeout: t.Check.Timeout}, nil
	}
	return nil, fmt.Errorf("unknown check type %d", t.Check.Type)
}

// funcProber asks Options.Probe.
type funcProber struct {
	fn func(ctx context.Context, t Target) bool
	t  Target
}

func (p funcProber) probe(ctx context.Context) outcome {
	if p.fn(ctx, p.t) {
		return outcome{pass: true, reason: "passed"}
	}
	return outcome{reason: "failed"}
}

// failure says why a probe got no answer, in a few words: a timeout with its
// duration, a refusal, or the error without the request it repeats.
func failure(ctx context.Context, err error, timeout time.Duration) string {
	var ne net.Error
	switch {
	case errors.Is(ctx.Err(), context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded),
		errors.As(err, &ne) && ne.Timeout():
		return fmt.Sprintf("timed out after %v", timeout)
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, syscall.ECONNRESET):
		return "connection reset"
	case errors.Is(err, syscall.EHOSTUNREACH):
		return "host unreachable"
	case errors.Is(err, syscall.ENETUNREACH):
		return "network unreachable"
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	return clip(err.Error())
}

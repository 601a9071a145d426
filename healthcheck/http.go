package healthcheck

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"
)

// maxHeaderBytes bounds a reply's headers; a health reply is a few lines.
const maxHeaderBytes = 16 << 10

// userAgent names the prober in the backends' access logs.
const userAgent = "xlb-healthcheck"

// newHTTPClient is the client every HTTP probe of a Checker uses: no proxy
// (a probe goes to the backend, whatever the environment says), a new
// connection per request, no redirects, no transparent decompression (the
// response prefix is compared with the bytes sent).
func newHTTPClient() *http.Client {
	return &http.Client{
		Transport: &http.Transport{
			Proxy:                  nil,
			DialContext:            (&net.Dialer{}).DialContext,
			DisableKeepAlives:      true,
			DisableCompression:     true,
			MaxResponseHeaderBytes: maxHeaderBytes,
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// httpProber is an HTTP check of one backend.
type httpProber struct {
	client   *http.Client
	url      string
	host     string
	response string
	timeout  time.Duration
}

func (p *httpProber) probe(ctx context.Context) outcome {
	unavailable := func(reason string) outcome {
		return outcome{reason: reason, state: WeightUnavailable}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.url, nil)
	if err != nil {
		return unavailable(clip(err.Error()))
	}
	req.Host = p.host
	req.Header.Set("User-Agent", userAgent)
	resp, err := p.client.Do(req)
	if err != nil {
		return unavailable(failure(ctx, err, p.timeout))
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		reason := fmt.Sprintf("HTTP %s", resp.Status)
		if resp.StatusCode >= 300 && resp.StatusCode < 400 {
			reason += " (redirects are not followed)"
		}
		return unavailable(reason)
	}
	o := outcome{pass: true, reason: "HTTP 200"}
	var why string
	o.weight, o.state, why = parseWeight(resp.Header)
	if why != "" {
		o.reason += "; " + why
	}
	if p.response != "" {
		// Only as many bytes as the prefix: a large or endless body costs
		// nothing more.
		buf := make([]byte, len(p.response))
		n, err := io.ReadFull(io.LimitReader(resp.Body, int64(len(buf))), buf)
		switch {
		case bytes.Equal(buf[:n], []byte(p.response)):
		case err != nil && err != io.ErrUnexpectedEOF && err != io.EOF:
			// The reply never finished: no answer, as far as weights go.
			return unavailable("reading the body: " + failure(ctx, err, p.timeout))
		default:
			o.pass = false
			o.reason = fmt.Sprintf("HTTP 200, but the body starts with %q, not %q", clip(string(buf[:n])), clip(p.response))
		}
	}
	return o
}

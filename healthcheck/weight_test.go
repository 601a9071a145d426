package healthcheck

import (
	"bufio"
	"context"
	"net"
	"net/http"
	"net/netip"
	"testing"
)

// TestW1_ParseWeight: a decimal integer 0..1000 is VALID, no header is
// MISSING_WEIGHT, anything else present is INVALID_WEIGHT (W1, W1a).
func TestW1_ParseWeight(t *testing.T) {
	for _, tc := range []struct {
		name   string
		values []string // nil: no header
		w      uint32
		state  WeightState
	}{
		{"absent", nil, 0, WeightMissing},
		{"zero", []string{"0"}, 0, WeightValid},
		{"one", []string{"1"}, 1, WeightValid},
		{"max", []string{"1000"}, 1000, WeightValid},
		{"leading zeros", []string{"007"}, 7, WeightValid},
		{"over max", []string{"1001"}, 0, WeightInvalid},
		{"negative", []string{"-1"}, 0, WeightInvalid},
		{"plus sign", []string{"+7"}, 0, WeightInvalid},
		{"letters", []string{"abc"}, 0, WeightInvalid},
		{"fraction", []string{"7.0"}, 0, WeightInvalid},
		{"hex", []string{"0x10"}, 0, WeightInvalid},
		{"empty", []string{""}, 0, WeightInvalid},
		{"inner blank", []string{"1 2"}, 0, WeightInvalid},
		{"list", []string{"1,2"}, 0, WeightInvalid},
		{"overflow", []string{"99999999999999999999"}, 0, WeightInvalid},
		{"twice", []string{"1", "2"}, 0, WeightInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := http.Header{}
			for _, v := range tc.values {
				h.Add(WeightHeader, v)
			}
			w, s, why := parseWeight(h)
			if w != tc.w || s != tc.state {
				t.Errorf("%q: %d %v (%s), want %d %v", tc.values, w, s, why, tc.w, tc.state)
			}
			if (s == WeightValid) != (why == "") {
				t.Errorf("%q: reason %q for state %v", tc.values, why, s)
			}
		})
	}
}

// TestW1_WhitespaceOnTheWire: a weight sent as "  7 \t" is 7 — HTTP header
// parsing strips the whitespace around a field value (RFC 9110 §5.5), so it
// is not part of the value — and the header name is case-insensitive.
func TestW1_WhitespaceOnTheWire(t *testing.T) {
	for _, line := range []string{"X-Load-Balancing-Endpoint-Weight:   7 \t", "x-load-balancing-endpoint-weight:7"} {
		ap := rawServer(t, "HTTP/1.1 200 OK\r\n"+line+"\r\nContent-Length: 0\r\n\r\n")
		o := probe1(t, httpTarget("k", ap))
		if !o.pass || o.weight != 7 || o.state != WeightValid {
			t.Errorf("%q: %+v, want a pass with VALID weight 7", line, o)
		}
	}
}

// rawServer answers every connection with reply, byte for byte, after
// reading the request head.
func rawServer(t *testing.T, reply string) netip.AddrPort {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				for {
					l, err := br.ReadString('\n')
					if err != nil || l == "\r\n" {
						break
					}
				}
				_, _ = c.Write([]byte(reply))
			}()
		}
	}()
	return netip.MustParseAddrPort(ln.Addr().String())
}

// probe1 runs one probe of tg directly.
func probe1(t *testing.T, tg Target) outcome {
	t.Helper()
	c := New(nil, Options{})
	p, err := c.newProber(tg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), tg.Check.Timeout)
	defer cancel()
	return p.probe(ctx)
}

// TestW1a_ReportKeepsLastValidWeight: UNAVAILABLE keeps the last valid
// weight (0 before any), MISSING and INVALID report 0, and a report is
// "changed" when its state or weight differs from the previous one.
func TestW1a_ReportKeepsLastValidWeight(t *testing.T) {
	var h health
	steps := []struct {
		w       uint32
		s       WeightState
		want    uint32
		changed bool
	}{
		{0, WeightUnavailable, 0, true}, // the first report always counts
		{0, WeightUnavailable, 0, false},
		{5, WeightValid, 5, true},
		{0, WeightUnavailable, 5, true},
		{0, WeightUnavailable, 5, false},
		{5, WeightValid, 5, true},
		{5, WeightValid, 5, false},
		{8, WeightValid, 8, true},
		{0, WeightMissing, 0, true},
		{0, WeightUnavailable, 8, true},
		{0, WeightInvalid, 0, true},
	}
	for i, s := range steps {
		h.record(false, 1, 1)
		w, changed := h.report(s.w, s.s)
		if w != s.want || changed != s.changed {
			t.Errorf("step %d (%d %v): weight %d changed %v, want %d %v", i, s.w, s.s, w, changed, s.want, s.changed)
		}
	}
}

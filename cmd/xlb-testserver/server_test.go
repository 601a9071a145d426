package main

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
)

// startServer listens on loopback ephemeral ports and serves until the
// test ends.
func startServer(t *testing.T, cfg serveConfig) *server {
	t.Helper()
	s, err := listen(cfg, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return s
}

// loopbacks are the addresses the tests listen on; ::1 only where the
// kernel has IPv6.
func loopbacks(t *testing.T) []netip.AddrPort {
	t.Helper()
	aps := []netip.AddrPort{netip.MustParseAddrPort("127.0.0.1:0")}
	if ln, err := net.Listen("tcp6", "[::1]:0"); err == nil {
		ln.Close()
		aps = append(aps, netip.MustParseAddrPort("[::1]:0"))
	} else {
		t.Logf("IPv6 loopback not available, IPv4 only: %v", err)
	}
	return aps
}

func get(t *testing.T, ap netip.AddrPort, path string) (*http.Response, string) {
	t.Helper()
	c := &http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get("http://" + ap.String() + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(body)
}

func TestHTTPNamesItself(t *testing.T) {
	lb := loopbacks(t)
	s := startServer(t, serveConfig{name: "b7", tcp: lb, weight: 42})
	for _, ap := range s.tcpAddrs() {
		resp, body := get(t, ap, "/any/path")
		if resp.StatusCode != 200 || body != "backend b7\n" || resp.Header.Get("X-Backend") != "b7" {
			t.Errorf("%s /any/path: %d %q X-Backend %q", ap, resp.StatusCode, body, resp.Header.Get("X-Backend"))
		}
		if w := resp.Header.Get(headerWeight); w != "" {
			t.Errorf("%s: weight header %q outside /healthz", ap, w)
		}
		resp, body = get(t, ap, "/healthz")
		if resp.StatusCode != 200 || body != "ok\n" || resp.Header.Get(headerWeight) != "42" {
			t.Errorf("%s /healthz: %d %q weight %q", ap, resp.StatusCode, body, resp.Header.Get(headerWeight))
		}
	}
}

// TestHTTPPostCounts: a POST's body is read whole and its length sent
// back in X-Received, with the usual answer.
func TestHTTPPostCounts(t *testing.T) {
	s := startServer(t, serveConfig{name: "b2", tcp: loopbacks(t)[:1], weight: -1})
	ap := s.tcpAddrs()[0]
	body := bytes.Repeat([]byte("x"), 3<<20)
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Post("http://"+ap.String()+"/upload", "application/octet-stream", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	got, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || string(got) != "backend b2\n" || resp.Header.Get("X-Received") != strconv.Itoa(len(body)) {
		t.Errorf("POST of %d bytes: %d %q X-Received %q", len(body), resp.StatusCode, got, resp.Header.Get("X-Received"))
	}
}

func TestHealthz(t *testing.T) {
	s := startServer(t, serveConfig{name: "b1", tcp: loopbacks(t)[:1], weight: -1})
	ap := s.tcpAddrs()[0]
	resp, _ := get(t, ap, "/healthz")
	if _, ok := resp.Header[headerWeight]; ok || resp.StatusCode != 200 {
		t.Errorf("without --weight: status %d, header %v", resp.StatusCode, resp.Header)
	}
	s.healthy.Store(false)
	if resp, body := get(t, ap, "/healthz"); resp.StatusCode != 503 || body != "unhealthy\n" {
		t.Errorf("unhealthy: %d %q", resp.StatusCode, body)
	}
	if resp, body := get(t, ap, "/"); resp.StatusCode != 200 || body != "backend b1\n" {
		t.Errorf("unhealthy still serves /: %d %q", resp.StatusCode, body)
	}
	s.healthy.Store(true)
	if resp, _ := get(t, ap, "/healthz"); resp.StatusCode != 200 {
		t.Errorf("healthy again: %d", resp.StatusCode)
	}
}

// TestHealthzWeightFile: with --weight-file, every /healthz sends the
// file's current content as the weight header, verbatim (so a test can
// report an invalid weight too), and none while the file is missing or
// empty; an unhealthy server sends 503 without it.
func TestHealthzWeightFile(t *testing.T) {
	file := filepath.Join(t.TempDir(), "b1.weight")
	s := startServer(t, serveConfig{name: "b1", tcp: loopbacks(t)[:1], weight: -1, weightFile: file})
	ap := s.tcpAddrs()[0]
	for _, tc := range []struct {
		content *string // nil: no file
		header  string  // "": none
	}{
		{nil, ""},
		{ptr("4\n"), "4"},
		{ptr("0"), "0"},
		{ptr("abc"), "abc"},
		{ptr("1001\r\n"), "1001"},
		{ptr(""), ""},
		{ptr("\n"), ""},
		{nil, ""},
		{ptr("7"), "7"},
	} {
		if tc.content == nil {
			if err := os.Remove(file); err != nil && !os.IsNotExist(err) {
				t.Fatal(err)
			}
		} else if err := os.WriteFile(file, []byte(*tc.content), 0o644); err != nil {
			t.Fatal(err)
		}
		desc := "missing"
		if tc.content != nil {
			desc = strconv.Quote(*tc.content)
		}
		resp, _ := get(t, ap, "/healthz")
		vals, sent := resp.Header[headerWeight]
		if resp.StatusCode != 200 || sent != (tc.header != "") || sent && (len(vals) != 1 || vals[0] != tc.header) {
			t.Errorf("file %s: status %d, header %q (sent %v); want 200, %q", desc, resp.StatusCode, vals, sent, tc.header)
		}
	}
	s.healthy.Store(false)
	if resp, _ := get(t, ap, "/healthz"); resp.StatusCode != 503 || resp.Header.Get(headerWeight) != "" {
		t.Errorf("unhealthy: status %d, weight %q; want 503 without one", resp.StatusCode, resp.Header.Get(headerWeight))
	}
}

func ptr(s string) *string { return &s }

// TestUDPEchoFromDestination: a server bound to the wildcard address
// answers a datagram sent to 127.0.0.2 from 127.0.0.2, as a backend must
// answer from the VIP; the client's connected socket hears nothing else.
func TestUDPEchoFromDestination(t *testing.T) {
	var wild []netip.AddrPort
	for _, ap := range loopbacks(t) {
		if ap.Addr().Is4() {
			wild = append(wild, netip.MustParseAddrPort("0.0.0.0:0"))
		} else {
			wild = append(wild, netip.MustParseAddrPort("[::]:0"))
		}
	}
	s := startServer(t, serveConfig{name: "b3", udp: wild})
	for _, ap := range s.udpAddrs() {
		dst := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.2"), ap.Port())
		if ap.Addr().Is6() {
			dst = netip.AddrPortFrom(netip.IPv6Loopback(), ap.Port())
		}
		for _, payload := range []string{"hello", "", "\x00\xffbinary: yes"} {
			name, err := probeUDPPayload(dst, payload)
			if err != nil || name != "b3" {
				t.Errorf("%s %q: %q, %v", dst, payload, name, err)
			}
		}
	}
}

func probeUDPPayload(dst netip.AddrPort, payload string) (string, error) {
	conn, err := net.Dial("udp", dst.String())
	if err != nil {
		return "", err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := conn.Write([]byte(payload)); err != nil {
		return "", err
	}
	buf := make([]byte, 2048)
	n, err := conn.Read(buf)
	if err != nil {
		return "", err
	}
	name, rest, _ := bytes.Cut(buf[:n], []byte(": "))
	if string(rest) != payload {
		return "", io.ErrUnexpectedEOF
	}
	return string(name), nil
}

func TestProbeCounts(t *testing.T) {
	lb := loopbacks(t)
	s := startServer(t, serveConfig{name: "b2", tcp: lb, udp: lb})
	for i, ap := range s.tcpAddrs() {
		var out bytes.Buffer
		args := []string{"probe", "--tcp", ap.String(), "--udp", s.udpAddrs()[i].String(), "-n", "25", "--parallel", "4"}
		if code := run(args, &out, io.Discard); code != 0 {
			t.Fatalf("probe exit %d:\n%s", code, out.String())
		}
		want := "tcp b2 25\ntcp errors 0\nudp b2 25\nudp errors 0\n"
		if out.String() != want {
			t.Errorf("probe %s:\n%s\nwant:\n%s", ap, out.String(), want)
		}
	}
}

func TestProbeCountsErrors(t *testing.T) {
	// A port nobody listens on: connections are refused, exit 1.
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	var out bytes.Buffer
	code := run([]string{"probe", "--tcp", addr, "-n", "3", "--timeout", "500ms"}, &out, io.Discard)
	if code != 1 || !strings.HasPrefix(out.String(), "tcp errors 3\ntcp first error: ") {
		t.Errorf("exit %d, output %q", code, out.String())
	}
}

func TestParseServe(t *testing.T) {
	cfg, err := parseServe([]string{"--name", "b1", "--listen-tcp", "0.0.0.0:80, [::]:80", "--listen-udp", "", "--weight", "3"})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.name != "b1" || len(cfg.tcp) != 2 || cfg.tcp[1].String() != "[::]:80" || len(cfg.udp) != 0 || cfg.weight != 3 {
		t.Errorf("parsed %+v", cfg)
	}
	if network("tcp", cfg.tcp[0]) != "tcp4" || network("udp", cfg.tcp[1]) != "udp6" {
		t.Error("network: want the family named, so [::] binds IPv6 only")
	}
	if cfg, _ := parseServe([]string{"--name", "x", "--listen-tcp", "[::ffff:10.0.0.1]:80"}); len(cfg.tcp) != 1 || !cfg.tcp[0].Addr().Is4() {
		t.Errorf("a mapped IPv4 address is IPv4: %+v", cfg.tcp)
	}
	for _, args := range [][]string{
		{},
		{"--name", ""},
		{"--name", "b 1"},
		{"--name", "b:1"},
		{"--name", "b1", "--listen-tcp", "10.0.0.1"},
		{"--name", "b1", "--listen-tcp", "host:80"},
		{"--name", "b1", "--listen-udp", "[fe80::1%eth0]:53"},
		{"--name", "b1", "--listen-tcp", "", "--listen-udp", ""},
		{"--name", "b1", "--weight", "x"},
		{"--name", "b1", "--weight", "1", "--weight-file", "/tmp/w"},
		{"--name", "b1", "extra"},
	} {
		if _, err := parseServe(args); err == nil {
			t.Errorf("%q: accepted", args)
		}
	}
}

func TestParseProbe(t *testing.T) {
	for _, args := range [][]string{
		{},
		{"--tcp", "10.0.0.1"},
		{"--tcp", "10.0.0.1:0"},
		{"--udp", "name:53"},
		{"--tcp", "10.0.0.1:80", "-n", "0"},
		{"--tcp", "10.0.0.1:80", "--parallel", "0"},
		{"--tcp", "10.0.0.1:80", "--timeout", "0s"},
	} {
		if _, err := parseProbe(args); err == nil {
			t.Errorf("%q: accepted", args)
		}
	}
}

func TestRunExitCodes(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		says string
	}{
		{[]string{"help"}, 0, "usage:"},
		{[]string{"-h"}, 0, "usage:"},
		{[]string{"dance"}, 2, "unknown command"},
		{[]string{"--name", ""}, 2, "--name"},
		{[]string{"probe"}, 2, "give --tcp"},
		{[]string{"offload-off"}, 2, "name at least one interface"},
		{[]string{"offload-off", "no-such-if0"}, 1, "no-such-if0"},
		{[]string{"--name", "b1", "--listen-tcp", "192.0.2.1:1", "--listen-udp", ""}, 1, "listening on tcp 192.0.2.1:1"},
	} {
		var out bytes.Buffer
		if code := run(tc.args, &out, &out); code != tc.code || !strings.Contains(out.String(), tc.says) {
			t.Errorf("%q: exit %d, output %q; want %d saying %q", tc.args, code, out.String(), tc.code, tc.says)
		}
	}
}

// TestListenFailsWhole: when one address cannot be bound, the error names
// it and the ones already bound are closed again.
func TestListenFailsWhole(t *testing.T) {
	busy, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	free, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	first := free.Addr().(*net.TCPAddr).AddrPort()
	free.Close()
	busyAP := busy.Addr().(*net.TCPAddr).AddrPort()
	_, err = listen(serveConfig{name: "x", tcp: []netip.AddrPort{first, busyAP}}, zap.NewNop())
	if err == nil || !strings.Contains(err.Error(), busyAP.String()) {
		t.Fatalf("listen on a busy port: %v", err)
	}
	again, err := net.Listen("tcp4", first.String())
	if err != nil {
		t.Fatalf("%s still bound after the failed listen: %v", first, err)
	}
	again.Close()
}

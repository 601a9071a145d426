package admin_test

import (
	"errors"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"xlb/controlplane/admin"
	"xlb/internal/nettest"
)

// TestSocketClientChecksListener: a socket another user listens on is
// refused (ErrUntrustedPeer, the error naming the socket and the uid)
// unless that uid is among the client's Trusted, the user xlb runs as.
func TestSocketClientChecksListener(t *testing.T) {
	nettest.RequireRoot(t)
	sock := filepath.Join(nettest.SharedDir(t), "admin.sock")
	ln := nettest.ListenUnixAs(t, sock, nettest.Nobody)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("reloaded\n")) })}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close() })

	_, err := admin.SocketClient{Path: sock}.Call(http.MethodPost, "/reload")
	if !errors.Is(err, admin.ErrUntrustedPeer) || !strings.Contains(err.Error(), sock) || !strings.Contains(err.Error(), "uid 65534") {
		t.Errorf("untrusted listener: err %v, want ErrUntrustedPeer naming %s and uid 65534", err, sock)
	}
	body, err := admin.SocketClient{Path: sock, Trusted: []uint32{nettest.Nobody}}.Call(http.MethodPost, "/reload")
	if err != nil || string(body) != "reloaded\n" {
		t.Errorf("trusted listener: %q, %v", body, err)
	}
}

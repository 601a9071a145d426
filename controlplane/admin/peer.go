package admin

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
)

// peerChecked serves a socket request only to root or the user xlb runs
// as: the socket file's mode 0600 already keeps others out, and this holds
// even if the file's mode or owner is changed.
func peerChecked(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		p, _ := req.Context().Value(peerKey{}).(peer)
		if !p.known || !peerAllowed(p.uid) {
			http.Error(w, fmt.Sprintf("the admin socket serves root and uid %d only (peer uid %d)", os.Geteuid(), p.uid), http.StatusForbidden)
			return
		}
		h.ServeHTTP(w, req)
	})
}

// peerAllowed: root, or the user xlb runs as.
func peerAllowed(uid uint32) bool {
	return uid == 0 || int(uid) == os.Geteuid()
}

type peerKey struct{}

// peer is what withPeer learned of a connection.
type peer struct {
	uid   uint32
	known bool
}

// withPeer is the socket server's ConnContext: it reads the peer's uid
// once per connection.
func withPeer(ctx context.Context, c net.Conn) context.Context {
	if lc, ok := c.(*limitedConn); ok {
		c = lc.Conn
	}
	uid, ok := peerUID(c)
	return context.WithValue(ctx, peerKey{}, peer{uid: uid, known: ok})
}

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
// even if the file's mode or owner is changed. A refusal is logged, with
// the peer (audit).
func peerChecked(h http.Handler, log *auditLog) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		p := peerOf(req)
		if !p.known || !peerAllowed(p.uid) {
			msg := fmt.Sprintf("the admin socket serves root and uid %d only (peer uid %d)", os.Geteuid(), p.uid)
			log.refused(req, p, http.StatusForbidden, msg)
			http.Error(w, msg, http.StatusForbidden)
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

// peer is what withPeer learned of a connection: the credentials of the
// process that connected, as they were when it connected.
type peer struct {
	uid, gid uint32
	pid      int32
	known    bool
}

// peerOf is the peer of req's connection (unknown off the socket).
func peerOf(req *http.Request) peer {
	p, _ := req.Context().Value(peerKey{}).(peer)
	return p
}

// withPeer is the socket server's ConnContext: it reads the peer's
// credentials once per connection.
func withPeer(ctx context.Context, c net.Conn) context.Context {
	if lc, ok := c.(*limitedConn); ok {
		c = lc.Conn
	}
	return context.WithValue(ctx, peerKey{}, peerCred(c))
}

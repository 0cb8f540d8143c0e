package kernel

import (
	"github.com/lmwarden/lmwarden/l7/datapath"
	"github.com/lmwarden/lmwarden/maps"
)

// QueuedHead implements datapath.QueuedRequest: a first head the shim
// only peeked is still in the socket, ahead of its body; a socket in the
// SOCKHASH has its receive queue taken over by the verdict.
func (k *SkbPath) QueuedHead(c *datapath.Conn) (int, bool) {
	cookie, err := maps.Cookie(c.TCPConn)
	if err != nil || k.st.SocketInMap(cookie) {
		return 0, true
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.peeked[cookie].size, false
}

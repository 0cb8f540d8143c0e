package kernel

import (
	"time"

	"github.com/lmwarden/lmwarden/l7/datapath"
	"github.com/lmwarden/lmwarden/l7/http1"
	"github.com/lmwarden/lmwarden/maps"
)

// WaitHead implements datapath.HeadWaiter: a client that left the SOCKHASH after
// its response (finishTail) gets its next head peeked, as a first one.
func (k *SkbPath) WaitHead(c *datapath.Conn) (bool, error) {
	cookie, err := maps.Cookie(c.TCPConn)
	if err != nil || k.st.SocketInMap(cookie) {
		return false, nil
	}
	return true, waitReadable(c.TCPConn)
}

// peekedHead remembers that a connection's first head is still in its
// socket (peeked), until the connection joins the SOCKHASH.
type peekedHead struct {
	size int
	at   time.Time
}

// ReadFirstHead implements datapath.HeadReader: it peeks the head.
func (k *SkbPath) ReadFirstHead(c *datapath.Conn) (*http1.Head, []byte, error) {
	cookie, err := maps.Cookie(c.TCPConn)
	if err != nil {
		return nil, nil, err
	}
	if k.st.SocketInMap(cookie) {
		// A keep-alive client still in the SOCKHASH: the verdict passes
		// its next head; read it.
		return http1.ReadHead(c.TCPConn, c.Pending)
	}
	pr, err := newPeekReader(c.TCPConn)
	if err != nil {
		return nil, nil, err
	}
	h, _, err := http1.ReadHead(pr, nil)
	if err != nil {
		return nil, nil, err
	}
	k.mu.Lock()
	k.peeked[cookie] = peekedHead{size: h.Size, at: time.Now()}
	k.mu.Unlock()
	return h, nil, nil
}

// takePeeked returns (and forgets) the peeked head size of cookie.
func (k *SkbPath) takePeeked(cookie uint64) (int, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	p, ok := k.peeked[cookie]
	delete(k.peeked, cookie)
	return p.size, ok
}

// forgetStalePeeks drops records of connections that never reached a
// body (refused, or closed before placement).
func (k *SkbPath) forgetStalePeeks() {
	k.mu.Lock()
	defer k.mu.Unlock()
	for c, p := range k.peeked {
		if time.Since(p.at) > time.Minute {
			delete(k.peeked, c)
		}
	}
}

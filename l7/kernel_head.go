package l7

import (
	"time"

	"github.com/lmwarden/lmwarden/maps"
)

// HeadReader is implemented by a Datapath that reads a connection's first
// request head itself. The kernel datapath peeks it (MSG_PEEK) instead of
// reading it: a socket that joins a sockmap with a segment half read has
// that whole segment verdicted again, so the head and the body bytes that
// came with it would be sent twice; peeked, every byte of the stream meets
// the verdict exactly once, and the kernel drops the head (which the shim
// forwards, rewritten) and carries the body that follows it.
type HeadReader interface {
	// ReadFirstHead reads the first head of c; rest is what c.Pending
	// must become (the kernel datapath consumes nothing: nil).
	ReadFirstHead(c *Conn) (h *Head, rest []byte, err error)
}

// readHead reads the next request head of c, through the datapath's
// HeadReader for the first one if it has one.
func (s *Shim) readHead(c *Conn, first bool) (*Head, []byte, error) {
	if hr, ok := s.dp.(HeadReader); ok && len(c.Pending) == 0 {
		return hr.ReadFirstHead(c)
	}
	return ReadHead(c.TCPConn, c.Pending)
}

// headWaiter is implemented by a Datapath that waits for a keep-alive
// connection's next head without reading it.
type headWaiter interface {
	// waitHead waits until c has a byte to read; handled is false when
	// the datapath leaves that to the shim (c.fill).
	waitHead(c *Conn) (handled bool, err error)
}

// waitNextHead waits for the first byte of a keep-alive connection's next
// head (the kernel datapath peeks it: see HeadReader).
func (s *Shim) waitNextHead(c *Conn) error {
	if w, ok := s.dp.(headWaiter); ok {
		if handled, err := w.waitHead(c); handled {
			return err
		}
	}
	return c.fill()
}

// waitHead implements headWaiter: a client that left the SOCKHASH after
// its response (finishTail) gets its next head peeked, as a first one.
func (k *KernelPath) waitHead(c *Conn) (bool, error) {
	cookie, err := maps.Cookie(c.TCPConn)
	if err != nil || k.st.SocketInMap(cookie) {
		return false, nil
	}
	return true, maps.WaitReadable(c.TCPConn)
}

// peekedHead remembers that a connection's first head is still in its
// socket (peeked), until the connection joins the SOCKHASH.
type peekedHead struct {
	size int
	at   time.Time
}

// ReadFirstHead implements HeadReader: it peeks the head.
func (k *KernelPath) ReadFirstHead(c *Conn) (*Head, []byte, error) {
	cookie, err := maps.Cookie(c.TCPConn)
	if err != nil {
		return nil, nil, err
	}
	if k.st.SocketInMap(cookie) {
		// A keep-alive client still in the SOCKHASH: the verdict passes
		// its next head; read it.
		return ReadHead(c.TCPConn, c.Pending)
	}
	pr, err := maps.NewPeekReader(c.TCPConn)
	if err != nil {
		return nil, nil, err
	}
	h, _, err := ReadHead(pr, nil)
	if err != nil {
		return nil, nil, err
	}
	k.mu.Lock()
	k.peeked[cookie] = peekedHead{size: h.Size, at: time.Now()}
	k.mu.Unlock()
	return h, nil, nil
}

// takePeeked returns (and forgets) the peeked head size of cookie.
func (k *KernelPath) takePeeked(cookie uint64) (int, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	p, ok := k.peeked[cookie]
	delete(k.peeked, cookie)
	return p.size, ok
}

// forgetStalePeeks drops records of connections that never reached a
// body (refused, or closed before placement).
func (k *KernelPath) forgetStalePeeks() {
	k.mu.Lock()
	defer k.mu.Unlock()
	for c, p := range k.peeked {
		if time.Since(p.at) > time.Minute {
			delete(k.peeked, c)
		}
	}
}

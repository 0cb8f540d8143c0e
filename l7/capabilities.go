package l7

import (
	"github.com/lmwarden/lmwarden/l7/datapath"
	"github.com/lmwarden/lmwarden/l7/http1"
)

// readHead reads the next request head of c, through the datapath's
// HeadReader for the first one if it has one.
func (s *Shim) readHead(c *datapath.Conn, first bool) (*http1.Head, []byte, error) {
	if hr := s.caps.HeadReader; hr != nil && len(c.Pending) == 0 {
		return hr.ReadFirstHead(c)
	}
	return http1.ReadHead(c.TCPConn, c.Pending)
}

// waitNextHead waits for the first byte of a keep-alive connection's next
// head (the sk_skb datapath peeks it: see HeadReader).
func (s *Shim) waitNextHead(c *datapath.Conn) error {
	if w := s.caps.HeadWaiter; w != nil {
		if handled, err := w.WaitHead(c); handled {
			return err
		}
	}
	return c.Fill()
}

package testnet

import (
	"context"
	"net"
	"testing"
	"time"
)

// Listen listens on addr for the whole test, without MPTCP: a sockmap
// refuses MPTCP sockets, and Go's listeners use MPTCP by default.
func Listen(tb testing.TB, addr string) *net.TCPListener {
	tb.Helper()
	var lc net.ListenConfig
	lc.SetMultipathTCP(false)
	ln, err := lc.Listen(context.Background(), "tcp", addr)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { ln.Close() })
	return ln.(*net.TCPListener)
}

// Dial dials addr as a plain client does (no MPTCP) and closes the
// connection when the test ends.
func Dial(tb testing.TB, addr string) *net.TCPConn {
	tb.Helper()
	d := net.Dialer{Timeout: 5 * time.Second}
	d.SetMultipathTCP(false)
	c, err := d.Dial("tcp", addr)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Close() })
	return c.(*net.TCPConn)
}

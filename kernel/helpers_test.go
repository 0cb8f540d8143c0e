package kernel

import (
	"context"
	"net"
	"testing"
	"time"
)

// mustListen listens on addr without MPTCP (a sockmap refuses MPTCP).
func mustListen(tb testing.TB, addr string) *net.TCPListener {
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

// mustDialPlain dials addr as a client does (not registered, no MPTCP).
func mustDialPlain(tb testing.TB, addr string) *net.TCPConn {
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

// acceptedBy reports which of the listeners accepted c (-1: none).
func acceptedBy(tb testing.TB, c *net.TCPConn, lns ...*net.TCPListener) int {
	tb.Helper()
	local := c.LocalAddr().String()
	for i, ln := range lns {
		ln.SetDeadline(time.Now().Add(500 * time.Millisecond))
		a, err := ln.Accept()
		if err != nil {
			continue
		}
		a.Close()
		if a.RemoteAddr().String() == local {
			return i
		}
	}
	return -1
}

package kernel

import (
	"net"
	"testing"
	"time"
)

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

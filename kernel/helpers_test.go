package kernel

import (
	"errors"
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

// skipUnpaired skips a test of the msg datapath, saying why, on a kernel
// that does not pair the warden's connections (msg's self-test refuses it
// there: ProbePairing); another failure of the probe fails the test.
func skipUnpaired(tb testing.TB, p *Path) {
	tb.Helper()
	if err := p.ProbePairing(); errors.Is(err, ErrUnpaired) {
		tb.Skipf("msg on this kernel: %v; its self-test refuses it (docs/kernel.md, \"Kernels tested\")", err)
	} else if err != nil {
		tb.Fatal(err)
	}
}

// Package testnet holds network helpers for tests: an address that
// refuses connections, and listeners and dials without MPTCP (which a
// sockmap refuses).
package testnet

import (
	"fmt"
	"testing"

	"golang.org/x/sys/unix"
)

// RefusingAddr returns a loopback address where a connect is refused, for
// the whole test. Its port is bound but never listened on: the kernel
// answers a SYN with RST, and no other process (a parallel test, another
// package's server) can take the port in the meantime, which the usual
// "listen on :0, close, reuse the port" trick cannot promise.
func RefusingAddr(tb testing.TB) string {
	tb.Helper()
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		tb.Fatalf("refusing address: socket: %v", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		unix.Close(fd)
		tb.Fatalf("refusing address: bind: %v", err)
	}
	sa, err := unix.Getsockname(fd)
	if err != nil {
		unix.Close(fd)
		tb.Fatalf("refusing address: getsockname: %v", err)
	}
	tb.Cleanup(func() { unix.Close(fd) })
	return fmt.Sprintf("127.0.0.1:%d", sa.(*unix.SockaddrInet4).Port)
}

package testnet

import (
	"errors"
	"net"
	"syscall"
	"testing"
)

func TestRefusingAddrRefusesAndKeepsThePort(t *testing.T) {
	addr := RefusingAddr(t)
	for range 3 {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
			t.Fatalf("dial %s succeeded, want connection refused", addr)
		}
		if !errors.Is(err, syscall.ECONNREFUSED) {
			t.Fatalf("dial %s: %v, want connection refused", addr, err)
		}
	}
	if ln, err := net.Listen("tcp", addr); err == nil {
		ln.Close()
		t.Fatalf("another listener took %s", addr)
	}
}

package kernel

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/lmwarden/lmwarden/internal/testnet"
	"github.com/lmwarden/lmwarden/kernel/kerneltest"
	"github.com/lmwarden/lmwarden/maps/mapstest"
)

// TestOwnConnectionsAreNeverSteeredIntoTheShim puts a frontend on the
// replica's own {address, port} (the fail-open layout): a client's
// connection reaches the shim, the warden's own registered connection the
// replica, and closing it removes its registration.
func TestOwnConnectionsAreNeverSteeredIntoTheShim(t *testing.T) {
	if !mapstest.InNetNS(t) {
		return
	}
	st := kerneltest.State(t)
	replica := testnet.Listen(t, "127.0.0.1:0")
	shim := testnet.Listen(t, "127.0.0.1:0")
	front := replica.Addr().(*net.TCPAddr).AddrPort()
	if err := st.AddFrontend(front, shim, false); err != nil {
		t.Fatal(err)
	}
	d := NewOwnDialer(st, 3*time.Second, false)
	for range 3 {
		if got := acceptedBy(t, testnet.Dial(t, front.String()), replica, shim); got != 1 {
			t.Fatalf("a client's connection went to listener %d, want the shim (1)", got)
		}
		c, release, err := d.DialTCP(context.Background(), front.String())
		if err != nil {
			t.Fatal(err)
		}
		if got := acceptedBy(t, c, replica, shim); got != 0 {
			t.Fatalf("the warden's own connection went to listener %d, want the replica (0)", got)
		}
		c.Close()
		release()
	}
	if n, err := st.OwnConns(); err != nil || n != 0 {
		t.Fatalf("%d connections still registered after closing (%v)", n, err)
	}
	ds, err := st.DispatchStats()
	if err != nil {
		t.Fatal(err)
	}
	if ds.Own != 3 || ds.Assigned != 3 || ds.Lookups < 6 {
		t.Fatalf("dispatch counters %+v: want 3 own connections left alone, 3 steered", ds)
	}
}

// TestOwnDialerKeepsTheKernelsSourceAddress dials a replica on another
// loopback address: the bound source is the one the kernel would pick.
func TestOwnDialerKeepsTheKernelsSourceAddress(t *testing.T) {
	if !mapstest.InNetNS(t) {
		return
	}
	st := kerneltest.State(t)
	replica := testnet.Listen(t, "127.0.0.3:0")
	d := NewOwnDialer(st, 3*time.Second, false)
	c, release, err := d.DialTCP(context.Background(), replica.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	defer c.Close()
	plain := testnet.Dial(t, replica.Addr().String())
	if a, b := c.LocalAddr().(*net.TCPAddr).AddrPort().Addr(), plain.LocalAddr().(*net.TCPAddr).AddrPort().Addr(); a != b {
		t.Fatalf("source %s, the kernel's choice is %s", a, b)
	}
}

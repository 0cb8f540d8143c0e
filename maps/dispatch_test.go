package maps

import (
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/lmwarden/lmwarden/internal/testnet"
)

// acceptedBy dials addr and reports which of the listeners accepted it.
func acceptedBy(tb testing.TB, addr string, lns ...*net.TCPListener) int {
	tb.Helper()
	c := testnet.Dial(tb, addr)
	local := c.LocalAddr().String()
	for i, ln := range lns {
		ln.SetDeadline(time.Now().Add(200 * time.Millisecond))
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

func TestDispatchReachesShimListener(t *testing.T) {
	if !inNetNS(t) {
		return
	}
	s := mustState(t)
	shim := testnet.Listen(t, "127.0.0.1:0")
	front := netip.MustParseAddrPort("10.77.0.1:8000")
	if err := s.AddFrontend(front, shim, true); err != nil {
		t.Fatal(err)
	}
	if got := acceptedBy(t, front.String(), shim); got != 0 {
		t.Fatalf("connection to the frontend not accepted by the shim (got %d)", got)
	}
	if err := s.RemoveFrontend(front); err != nil {
		t.Fatal(err)
	}
	if hasAddr(t, front.Addr()) {
		t.Error("frontend address left on lo after RemoveFrontend")
	}
}

func hasAddr(tb testing.TB, a netip.Addr) bool {
	addrs, err := netlink.AddrList(nil, netlink.FAMILY_ALL)
	if err != nil {
		tb.Fatal(err)
	}
	for _, x := range addrs {
		if ip, ok := netip.AddrFromSlice(x.IP); ok && ip.Unmap() == a {
			return true
		}
	}
	return false
}

func TestDispatchFailsOpenWhenShimCloses(t *testing.T) {
	if !inNetNS(t) {
		return
	}
	s := mustState(t)
	vllm := testnet.Listen(t, "127.0.0.1:8000") // the port's own listener
	shim := testnet.Listen(t, "127.0.0.1:0")
	front := netip.MustParseAddrPort("127.0.0.1:8000")
	if err := s.AddFrontend(front, shim, false); err != nil {
		t.Fatal(err)
	}
	if got := acceptedBy(t, front.String(), vllm, shim); got != 1 {
		t.Fatalf("with the shim up, accepted by %d, want the shim (1)", got)
	}
	shim.Close() // the warden dies: its listener leaves the SOCKMAP
	if got := acceptedBy(t, front.String(), vllm); got != 0 {
		t.Fatalf("after the shim closed, accepted by %d, want vLLM's own listener (0)", got)
	}
}

func TestUnloadRemovesOwnedAddressAndPins(t *testing.T) {
	if !inNetNS(t) {
		return
	}
	s := mustState(t)
	shim := testnet.Listen(t, "127.0.0.1:0")
	front := netip.MustParseAddrPort("10.77.0.2:9000")
	if err := s.AddFrontend(front, shim, true); err != nil {
		t.Fatal(err)
	}
	if !hasAddr(t, front.Addr()) {
		t.Fatal("frontend address not added to lo")
	}
	dir := s.Dir()
	s.Close()
	if err := Unload(Options{Dir: dir}); err != nil {
		t.Fatal(err)
	}
	if hasAddr(t, front.Addr()) {
		t.Error("unload left the frontend address on lo")
	}
	if err := ReadSessions(dir, func(uint64, Session) bool { return true }); err == nil {
		t.Error("pinned state still readable after unload")
	}
}

package kernel

import (
	"io"
	"net"
	"testing"
	"time"

	"github.com/lmwarden/lmwarden/kernel/kerneltest"
	"github.com/lmwarden/lmwarden/maps"
	"github.com/lmwarden/lmwarden/maps/mapstest"
)

// mustTCPPair returns both ends of a loopback TCP connection.
func mustTCPPair(tb testing.TB) (client, server *net.TCPConn) {
	tb.Helper()
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		tb.Fatal(err)
	}
	defer ln.Close()
	client, err = net.DialTCP("tcp", nil, ln.Addr().(*net.TCPAddr))
	if err != nil {
		tb.Fatal(err)
	}
	server, err = ln.AcceptTCP()
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { client.Close(); server.Close() })
	for _, c := range []*net.TCPConn{client, server} {
		c.SetDeadline(time.Now().Add(10 * time.Second))
	}
	return client, server
}

// A socket whose first bytes the shim read itself (part of one segment:
// a request head with the start of its body), that then carried the rest
// of the segment through the kernel, reads normally again once it left
// the SOCKHASH: the verdict trims exactly the read part, so the socket's
// read position stays right (a trim of unread bytes, as of peeked ones,
// would leave it behind, and every later read would fail with EAGAIN).
func TestSocketReadsPlainAfterDetachWhenItsHeadWasRead(t *testing.T) {
	if !mapstest.InNetNS(t) {
		return
	}
	s := kerneltest.State(t)
	cl, sv := mustTCPPair(t)
	up, upPeer := mustTCPPair(t)
	sc, _ := maps.Cookie(sv)
	uc, _ := maps.Cookie(up)
	if err := s.Arm(uc, maps.SockCtl{Mode: maps.ModePass}); err != nil {
		t.Fatal(err)
	}
	if err := s.AddSocket(up, uc, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Write([]byte("HEAD\r\n\r\nbody-bytes")); err != nil {
		t.Fatal(err)
	}
	head := make([]byte, 8)
	if _, err := io.ReadFull(sv, head); err != nil {
		t.Fatal(err)
	}
	if err := s.Arm(sc, maps.SockCtl{Peer: uc, ArmAt: 8, BodyEnd: 18, Gen: 1, Mode: maps.ModeRequest}); err != nil {
		t.Fatal(err)
	}
	if err := s.AddSocket(sv, sc, 8); err != nil {
		t.Fatal(err)
	}
	if err := verdictQueued(sv); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 10)
	if _, err := io.ReadFull(upPeer, got); err != nil || string(got) != "body-bytes" {
		t.Fatalf("carried %q, %v; want the body only", got, err)
	}
	if lost, err := s.Detach(sc, 18); err != nil || lost {
		t.Fatalf("Detach: lost %v, %v", lost, err)
	}
	if _, err := cl.Write([]byte("next")); err != nil {
		t.Fatal(err)
	}
	if err := waitReadable(sv); err != nil {
		t.Fatalf("after Detach: %v", err)
	}
	next := make([]byte, 4)
	if _, err := io.ReadFull(sv, next); err != nil || string(next) != "next" {
		t.Fatalf("after Detach read %q, %v", next, err)
	}
}

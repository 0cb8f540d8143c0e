package l7

import (
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/lmwarden/lmwarden/internal/testutil"
	"github.com/lmwarden/lmwarden/l7/datapath"
)

// limitConn is the shim's side of a new loopback connection, and the
// client's side (closed with the test).
func limitConn(t *testing.T, ln net.Listener) (*datapath.Conn, net.Conn) {
	t.Helper()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(); s.Close() })
	return datapath.NewConn(s.(*net.TCPConn)), c
}

// waiting admits a connection from addr that waits for its body.
func waiting(t *testing.T, l *ConnLimits, ln net.Listener, addr string) *limitEntry {
	t.Helper()
	c, _ := limitConn(t, ln)
	e, _ := l.admit(c, netip.MustParseAddr(addr))
	if e == nil {
		t.Fatalf("%s refused", addr)
	}
	l.setPhase(e, phaseBody)
	return e
}

func TestTotalBoundLetsABystanderPastAFloodOfBodiesThatDoNotCome(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	now := time.Unix(1000, 0)
	l := NewConnLimits(6, 100)
	l.clock = func() time.Time { return now }
	var a []*limitEntry
	for range 3 {
		a = append(a, waiting(t, l, ln, "10.0.0.1"))
		waiting(t, l, ln, "10.0.0.2")
	}
	// The flood's own newcomer: no client heavier than its own.
	c, _ := limitConn(t, ln)
	if e, b := l.admit(c, netip.MustParseAddr("10.0.0.1")); e != nil || b != limitTotal {
		t.Fatalf("a flooder's newcomer admitted (bound %d)", b)
	}
	// A bystander: the longest waiting request of a heavier client goes.
	c, _ = limitConn(t, ln)
	if e, _ := l.admit(c, netip.MustParseAddr("10.0.0.3")); e == nil {
		t.Fatal("the bystander refused")
	}
	if l.setPhase(a[0], phaseBusy) {
		t.Error("the shed request was told to go on")
	}
	_, err = a[0].c.Read(make([]byte, 1)) // its wait ends at once
	if !isTimeout(err) {
		t.Errorf("the shed request's wait: %v, want its deadline passed", err)
	}
	st := l.Stats()
	if st.Refused["total"] != 1 || st.Shed["total"] != 1 || st.Open != 6 {
		t.Errorf("refused %d, shed %d, open %d; want 1, 1, 6", st.Refused["total"], st.Shed["total"], st.Open)
	}
}

func TestTotalBoundLetsABystanderPastWaitingRequestsFromManyAddresses(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	now := time.Unix(1000, 0)
	l := NewConnLimits(3, 100)
	l.clock = func() time.Time { return now }
	first := waiting(t, l, ln, "10.0.0.1")
	waiting(t, l, ln, "10.0.0.2")
	waiting(t, l, ln, "10.0.0.3")
	c, _ := limitConn(t, ln)
	if e, _ := l.admit(c, netip.MustParseAddr("10.0.0.4")); e != nil {
		t.Fatal("admitted before any request waited past the grace")
	}
	now = now.Add(2 * bodyWaitGrace)
	c, _ = limitConn(t, ln)
	if e, _ := l.admit(c, netip.MustParseAddr("10.0.0.5")); e == nil {
		t.Fatal("refused with requests waiting past the grace")
	}
	if l.setPhase(first, phaseBusy) {
		t.Error("the longest waiting request was not the one shed")
	}
}

func TestIdleConnectionWhoseHeadIsArrivingIsNotShed(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	l := NewConnLimits(1, 100)
	c, client := limitConn(t, ln)
	e, _ := l.admit(c, netip.MustParseAddr("10.0.0.1"))
	l.setPhase(e, phaseIdle)
	client.Write([]byte("POST /v1/messages HTTP/1.1\r\n"))
	testutil.Eventually(t, 5*time.Second, "the head's first bytes in the socket", func() bool { return hasInput(c) })
	c2, _ := limitConn(t, ln)
	if e2, _ := l.admit(c2, netip.MustParseAddr("10.0.0.2")); e2 != nil {
		t.Fatal("a connection whose head was arriving was closed for a newcomer")
	}
	if !l.setPhase(e, phaseBusy) {
		t.Error("the connection whose head was arriving was shed")
	}
}

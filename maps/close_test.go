package maps

import (
	"bufio"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

// mustRawUpstream runs fn on every connection after reading its request
// head (the request in these tests has no body).
func mustRawUpstream(tb testing.TB, fn func(c *net.TCPConn)) string {
	tb.Helper()
	ln := mustListen(tb, "127.0.0.1:0")
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				if _, err := readHead(bufio.NewReader(c)); err != nil {
					return
				}
				fn(c.(*net.TCPConn))
			}()
		}
	}()
	return ln.Addr().String()
}

// waitMapEmpty fails unless every socket left the SOCKHASH.
func waitMapEmpty(tb testing.TB, s *State) {
	tb.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		cookies, err := s.SocketCookies()
		if err != nil {
			tb.Fatal(err)
		}
		if len(cookies) == 0 {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("%d sockets stuck in the SOCKHASH", len(cookies))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

const sseHead = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"

func get(c *net.TCPConn) {
	io.WriteString(c, "GET /x HTTP/1.1\r\nHost: w\r\nX-Claude-Code-Session-Id: s\r\n\r\n")
}

func TestUpstreamResetMidResponseEndsClientAndFreesMap(t *testing.T) {
	if !inNetNS(t) {
		return
	}
	s := mustState(t)
	up := mustRawUpstream(t, func(c *net.TCPConn) {
		io.WriteString(c, sseHead+"6\r\nhello\n\r\n")
		time.Sleep(50 * time.Millisecond)
		c.SetLinger(0) // RST
	})
	front, _ := mustShim(t, s, []string{up})
	c := mustDial(t, front)
	get(c)
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	got, err := io.ReadAll(c)
	if !strings.Contains(string(got), "hello") {
		t.Fatalf("first event not delivered: %q %v", got, err)
	}
	if strings.Contains(string(got), "0\r\n\r\n") {
		t.Fatal("a reset stream looked complete")
	}
	waitMapEmpty(t, s)
}

func TestClientResetMidResponseFreesMap(t *testing.T) {
	if !inNetNS(t) {
		return
	}
	s := mustState(t)
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) })
	up := mustRawUpstream(t, func(c *net.TCPConn) {
		io.WriteString(c, sseHead)
		for {
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
			if _, err := io.WriteString(c, "6\r\nhello\n\r\n"); err != nil {
				return
			}
		}
	})
	front, _ := mustShim(t, s, []string{up})
	c := mustDial(t, front)
	get(c)
	buf := make([]byte, 256)
	if _, err := io.ReadAtLeast(c, buf, 100); err != nil {
		t.Fatal(err)
	}
	c.SetLinger(0)
	c.Close() // RST from the client
	waitMapEmpty(t, s)
}

func TestClientFINMidResponseEndsPairAndFreesMap(t *testing.T) {
	if !inNetNS(t) {
		return
	}
	s := mustState(t)
	up := mustRawUpstream(t, func(c *net.TCPConn) {
		io.WriteString(c, sseHead)
		for range 200 {
			time.Sleep(2 * time.Millisecond)
			if _, err := io.WriteString(c, "6\r\nhello\n\r\n"); err != nil {
				return
			}
		}
		io.WriteString(c, "0\r\n\r\n")
	})
	front, _ := mustShim(t, s, []string{up})
	c := mustDial(t, front)
	get(c)
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	first := make([]byte, len(sseHead))
	if _, err := io.ReadFull(c, first); err != nil {
		t.Fatal(err)
	}
	c.CloseWrite() // the FIN is not carried: the shim must see it and end both sides
	io.ReadAll(c)  // returns once the shim closed the client side
	waitMapEmpty(t, s)
}

func TestUpstreamCloseEndsCloseDelimitedResponse(t *testing.T) {
	if !inNetNS(t) {
		return
	}
	s := mustState(t)
	body := strings.Repeat("z", 300<<10)
	up := mustRawUpstream(t, func(c *net.TCPConn) {
		io.WriteString(c, "HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n")
		time.Sleep(5 * time.Millisecond)
		io.WriteString(c, body)
		c.CloseWrite() // FIN: the end of this body; not carried by the redirect
	})
	front, _ := mustShim(t, s, []string{up})
	c := mustDial(t, front)
	get(c)
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	got, err := io.ReadAll(c)
	if err != nil || !strings.HasSuffix(string(got), body) {
		t.Fatalf("close-delimited body: %d bytes, err %v", len(got), err)
	}
	waitMapEmpty(t, s)
}

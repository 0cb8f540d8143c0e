package l7

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// countingChecksumUpstream is checksumUpstream (the SHA-256 of each
// request body, then an SSE stream of events, one every pace, as a
// replica's tokens) that also counts the TCP connections it accepted.
func countingChecksumUpstream(tb testing.TB, events int, pace time.Duration) (addr string, conns *atomic.Int64) {
	tb.Helper()
	ln, err := Listen("127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	conns = &atomic.Int64{}
	srv := &http.Server{
		ConnState: func(_ net.Conn, s http.ConnState) {
			if s == http.StateNew {
				conns.Add(1)
			}
		},
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			h := sha256.New()
			n, _ := io.Copy(h, r.Body)
			w.Header().Set("Content-Type", "text/event-stream")
			f := w.(http.Flusher)
			fmt.Fprintf(w, "data: {\"sha256\":%q,\"bytes\":%d}\n\n", hex.EncodeToString(h.Sum(nil)), n)
			f.Flush()
			for i := range events {
				time.Sleep(pace)
				fmt.Fprintf(w, "data: {\"type\":\"content_block_delta\",\"index\":%d,\"delta\":{\"text\":\"token\"}}\n\n", i)
				f.Flush()
			}
			io.WriteString(w, "data: {\"type\":\"message_stop\"}\n\n")
		}),
	}
	go srv.Serve(ln)
	tb.Cleanup(func() { srv.Close() })
	return ln.Addr().String(), conns
}

// checkedRequest sends a ~50 KB body (different per i) on c and checks
// that the upstream got it intact and that the whole stream came back.
func checkedRequest(t *testing.T, c *client, session string, i int) {
	t.Helper()
	body := `{"model":"m","stream":true,"messages":[{"role":"user","content":"` +
		strings.Repeat(fmt.Sprintf("client %d, a long agent history. ", i), 1500) + `"}]}`
	sum := sha256.Sum256([]byte(body))
	c.send(t, "POST /v1/messages HTTP/1.1\r\nHost: warden\r\nContent-Type: application/json\r\n"+
		"X-Claude-Code-Session-Id: "+session+"\r\n"+fmt.Sprintf("Content-Length: %d\r\n\r\n", len(body))+body)
	resp, got := c.response(t)
	want := fmt.Sprintf("data: {\"sha256\":%q,\"bytes\":%d}\n\n", hex.EncodeToString(sum[:]), len(body))
	if resp.StatusCode != 200 || !strings.HasPrefix(got, want) || !strings.HasSuffix(got, "message_stop\"}\n\n") {
		t.Fatalf("request %d: status %d, body %.300q, want it to start with %q", i, resp.StatusCode, got, want)
	}
}

func TestKernelPathPoolsUpstreamAcrossNewClients(t *testing.T) {
	if !inNetNS(t) {
		return
	}
	k := mustKernelPath(t)
	up, conns := countingChecksumUpstream(t, 64, time.Millisecond)
	m := mustModel(t, modelConfig("http://"+up))
	s, addr := mustShim(t, m, Options{Datapath: k})
	const clients = 20
	for i := range clients {
		c := mustDial(t, addr)
		checkedRequest(t, c, "pooled", i)
		c.Close()
		// The next client must find the connection back in the pool.
		waitIdle(t, s, up, 1)
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("the upstream accepted %d connections for %d clients one after another, want 1 (pooled)", n, clients)
	}
	kern, user := kernelShare(k)
	share := float64(user) / float64(kern+user)
	t.Logf("kernel %d bytes, userspace %d bytes (%.2f%%); counts %+v", kern, user, 100*share, k.Counts())
	if share >= 0.05 {
		t.Errorf("userspace carried %.1f%% of the bytes, want under 5%%", 100*share)
	}
	waitInFlight(t, m)
}

func TestKernelPathPooledUpstreamServesKeepAliveClientsInTurn(t *testing.T) {
	if !inNetNS(t) {
		return
	}
	// Two keep-alive clients take turns on one pooled upstream connection:
	// the upstream's peer changes at every request and back.
	k := mustKernelPath(t)
	up, conns := countingChecksumUpstream(t, 64, time.Millisecond)
	m := mustModel(t, modelConfig("http://"+up))
	s, addr := mustShim(t, m, Options{Datapath: k})
	a, b := mustDial(t, addr), mustDial(t, addr)
	for i := range 10 {
		c := a
		if i%2 == 1 {
			c = b
		}
		checkedRequest(t, c, "turns", i)
		waitIdle(t, s, up, 1)
	}
	if n := conns.Load(); n != 1 {
		t.Errorf("the upstream accepted %d connections, want 1 (pooled)", n)
	}
	kern, user := kernelShare(k)
	if share := float64(user) / float64(kern+user); share >= 0.05 {
		t.Errorf("userspace carried %.1f%% of the bytes, want under 5%%", 100*share)
	}
	waitInFlight(t, m)
}

func TestKernelPathDropsPooledUpstreamThatClosed(t *testing.T) {
	if !inNetNS(t) {
		return
	}
	// The replica closes the idle connection after each response (as
	// uvicorn does after its keep-alive timeout): the pooled socket, still
	// in the SOCKHASH, must be found dead and a new one dialled.
	k := mustKernelPath(t)
	up := rawUpstream(t, func(c net.Conn) {
		h, rest, err := ReadHead(c, nil)
		if err != nil {
			return
		}
		body := make([]byte, h.ContentLength)
		n := copy(body, rest)
		io.ReadFull(c, body[n:])
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		time.Sleep(10 * time.Millisecond)
	})
	m := mustModel(t, modelConfig(up))
	s, addr := mustShim(t, m, Options{Datapath: k})
	upAddr := strings.TrimPrefix(up, "http://")
	for i := range 3 {
		c := mustDial(t, addr)
		body := strings.Repeat("b", 20000)
		c.send(t, fmt.Sprintf("POST /v1/messages HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s", len(body), body))
		resp, got := c.response(t)
		if resp.StatusCode != 200 || got != "ok" {
			t.Fatalf("request %d: status %d body %q", i, resp.StatusCode, got)
		}
		c.Close()
		waitIdle(t, s, upAddr, 1)
		time.Sleep(30 * time.Millisecond) // the replica has closed its end
	}
	waitInFlight(t, m)
}

// waitIdle waits until the shim's pool holds n idle connections to addr.
func waitIdle(t *testing.T, s *Shim, addr string, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for s.pool.Idle(addr) < n {
		if time.Now().After(deadline) {
			t.Fatalf("pool holds %d idle connections to %s, want %d", s.pool.Idle(addr), addr, n)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestKernelPathFastStreamCrossesIntactInOrder(t *testing.T) {
	if !inNetNS(t) {
		return
	}
	// An upstream that writes its events back to back races the shim's
	// arm of the response: bytes that arrive meanwhile are forwarded by
	// the shim, which then arms again; every event must arrive exactly
	// once and in order, whoever carried it.
	k := mustKernelPath(t)
	up := rawUpstream(t, func(c net.Conn) {
		var pending []byte
		for {
			h, rest, err := ReadHead(c, pending)
			if err != nil {
				return
			}
			body := make([]byte, h.ContentLength)
			n := copy(body, rest)
			pending = rest[n:]
			if _, err := io.ReadFull(c, body[n:]); err != nil {
				return
			}
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
			for i := range 400 {
				ev := fmt.Sprintf("data: {\"i\":%d}\n\n", i)
				fmt.Fprintf(c, "%x\r\n%s\r\n", len(ev), ev)
			}
			io.WriteString(c, "0\r\n\r\n")
		}
	})
	m := mustModel(t, modelConfig(up))
	_, addr := mustShim(t, m, Options{Datapath: k})
	var want strings.Builder
	for i := range 400 {
		fmt.Fprintf(&want, "data: {\"i\":%d}\n\n", i)
	}
	for r := range 30 {
		c := mustDial(t, addr)
		body := strings.Repeat("q", 30000+r)
		c.send(t, fmt.Sprintf("POST /v1/messages HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s", len(body), body))
		resp, got := c.response(t)
		if resp.StatusCode != 200 || got != want.String() {
			t.Fatalf("request %d: status %d, %d bytes of %d, first difference at %d", r, resp.StatusCode, len(got), want.Len(), firstDiff(got, want.String()))
		}
		c.Close()
	}
	t.Logf("counts %+v, re-arms %d", k.Counts(), k.Rearms())
	waitInFlight(t, m)
}

func firstDiff(a, b string) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

func TestKernelPathHalfClosedClientBodyReachesUpstreamIntact(t *testing.T) {
	if !inNetNS(t) {
		return
	}
	// A client that sends its request and half-closes cannot join the
	// SOCKHASH (it is no longer ESTABLISHED on the shim's side), so its
	// body is copied in userspace; the head the shim only peeked must not
	// be sent as that body.
	k := mustKernelPath(t)
	got := make(chan string, 1)
	up := rawUpstream(t, func(c net.Conn) {
		h, rest, err := ReadHead(c, nil)
		if err != nil {
			return
		}
		body := make([]byte, h.ContentLength)
		n := copy(body, rest)
		io.ReadFull(c, body[n:])
		got <- string(body)
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
	})
	m := mustModel(t, modelConfig(up))
	_, addr := mustShim(t, m, Options{Datapath: k})
	c := mustDial(t, addr)
	body := strings.Repeat("half-closed client body. ", 40)
	c.send(t, fmt.Sprintf("POST /v1/messages HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s", len(body), body))
	if err := c.Conn.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	select {
	case b := <-got:
		if b != body {
			t.Fatalf("upstream got body %.80q..., want %.80q...", b, body)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no request reached the upstream")
	}
	waitInFlight(t, m)
}

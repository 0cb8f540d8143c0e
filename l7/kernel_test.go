package l7_test

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

	"github.com/lmwarden/lmwarden/internal/testutil"
	"github.com/lmwarden/lmwarden/kernel"
	"github.com/lmwarden/lmwarden/l7"
	"github.com/lmwarden/lmwarden/l7/http1"
	"github.com/lmwarden/lmwarden/maps"
	"github.com/lmwarden/lmwarden/sim"
)

// checksumUpstream answers every request with the SHA-256 of its body,
// then an SSE stream of events, one every pace (as a replica's tokens);
// it counts the TCP connections it accepted. Its whole answer to a body
// is checksumStream's.
func checksumUpstream(tb testing.TB, events int, pace time.Duration) (addr string, conns *atomic.Int64) {
	tb.Helper()
	ln, err := l7.Listen("127.0.0.1:0")
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
			for i, ev := range checksumEvents(h.Sum(nil), n, events) {
				if i > 0 {
					time.Sleep(pace)
				}
				io.WriteString(w, ev)
				f.Flush()
			}
		}),
	}
	go srv.Serve(ln)
	tb.Cleanup(func() { srv.Close() })
	return ln.Addr().String(), conns
}

// checksumEvents is what checksumUpstream streams for a body of n bytes
// with SHA-256 sum: a first event naming them, events, a last one.
func checksumEvents(sum []byte, n int64, events int) []string {
	out := []string{fmt.Sprintf("data: {\"sha256\":%q,\"bytes\":%d}\n\n", hex.EncodeToString(sum), n)}
	for i := range events {
		out = append(out, fmt.Sprintf("data: {\"type\":\"content_block_delta\",\"index\":%d,\"delta\":{\"text\":\"token\"}}\n\n", i))
	}
	return append(out, "data: {\"type\":\"message_stop\"}\n\n")
}

// checkedRequest sends a ~50 KB body (different per i) on c and checks,
// by SHA-256, that the upstream got it intact and that the client got the
// upstream's whole stream.
func checkedRequest(t *testing.T, c *l7.Client, session string, i, events int) {
	t.Helper()
	body := `{"model":"m","stream":true,"messages":[{"role":"user","content":"` +
		strings.Repeat(fmt.Sprintf("client %d, a long agent history. ", i), 1500) + `"}]}`
	sum := sha256.Sum256([]byte(body))
	c.Send(t, "POST /v1/messages HTTP/1.1\r\nHost: warden\r\nContent-Type: application/json\r\n"+
		"X-Claude-Code-Session-Id: "+session+"\r\n"+fmt.Sprintf("Content-Length: %d\r\n\r\n", len(body))+body)
	resp, got := c.Response(t)
	want := strings.Join(checksumEvents(sum[:], int64(len(body)), events), "")
	if resp.StatusCode != 200 || got != want {
		gs, ws := sha256.Sum256([]byte(got)), sha256.Sum256([]byte(want))
		t.Fatalf("request %d: status %d, %d bytes with SHA-256 %x, want %d bytes with %x; starts %.200q",
			i, resp.StatusCode, len(got), gs[:8], len(want), ws[:8], got)
	}
}

// checkShare checks where a kernel datapath moved the bytes. sk_msg
// carries every response byte in the kernel but each response's last,
// which it passes to the shim (CTL_TAIL_PASS: the shim relays it, and so
// knows the response ended before the client does); the request bodies
// cross userspace. sk_skb carries the response too, but passes the
// segment holding each response's end to the shim (here about 340 bytes
// of each 5 KB response: its last event and the chunked end), and its
// request bodies cross userspace as sk_msg's do.
func checkShare(t *testing.T, p *kernel.Path) {
	t.Helper()
	counts := kernelCounts(p)
	kern, user := kernel.Share(counts)
	t.Logf("%s: kernel %d bytes, userspace %d bytes; counts %+v", p, kern, user, counts)
	if p.State.Mode() == maps.ModeMsg {
		for k, c := range counts {
			if !allCarried(c) {
				t.Errorf("replica %v: %d response bytes crossed userspace, %d in the kernel, %d of %d responses ended there; want every one in the kernel but its last byte",
					k, c.PassedBytes+c.UserDown, c.KernelBytes, c.Responses, c.Requests)
			}
		}
		return
	}
	var down uint64
	for _, c := range counts {
		down += c.PassedBytes + c.UserDown
	}
	if share := float64(down) / float64(kern+down); share >= 0.1 {
		t.Errorf("userspace carried %.1f%% of the response bytes, want under 10%%", 100*share)
	}
}

// allCarried: sk_msg carried every response whole in the kernel, but its
// last byte, which the shim relayed.
func allCarried(c kernel.Counts) bool {
	return c.KernelBytes > 0 && c.Responses == c.Requests && c.PassedBytes == c.Responses && c.UserDown == c.Responses
}

func TestKernelCarriesBodyAndStreamIntact(t *testing.T) {
	forEachKernel(t, func(t *testing.T, p *kernel.Path) {
		up, _ := checksumUpstream(t, 256, time.Millisecond)
		m := l7.MustModel(t, l7.ModelConfig("http://"+up))
		_, addr := l7.MustShim(t, m, kernelOptions(p))
		checkedRequest(t, l7.MustDial(t, addr), "s", 0, 256)
		l7.WaitInFlight(t, m) // the exchanges' own counts are done
		checkShare(t, p)
	})
}

func TestKernelKeepAliveRoutesEachRequestOnItsOwnHead(t *testing.T) {
	forEachKernel(t, func(t *testing.T, p *kernel.Path) {
		sv := l7.MustSim(t, 2, sim.ShapePorts)
		m := l7.MustModel(t, l7.ModelConfig(sv.URLs()...))
		_, addr := l7.MustShim(t, m, kernelOptions(p))
		c := l7.MustDial(t, addr)
		for i, session := range []string{"session-a", "session-b", "session-a"} {
			c.Send(t, l7.MessagesRequest(session, []string{"hello from " + session + strings.Repeat(" pad", 5000)}, ""))
			resp, body := c.Response(t)
			if resp.StatusCode != 200 || !strings.Contains(body, "message_stop") {
				t.Fatalf("request %d: status %d body %.200q", i, resp.StatusCode, body)
			}
		}
		done := l7.RequestsDone(sv, 2)
		if !(done[0] == 2 && done[1] == 1) && !(done[0] == 1 && done[1] == 2) {
			t.Fatalf("requests per replica %v: two sessions on one connection must be placed apart and each stay put", done)
		}
		l7.WaitInFlight(t, m)
	})
}

func TestKernelClientAbortLeavesNoSocketInMap(t *testing.T) {
	forEachKernel(t, func(t *testing.T, p *kernel.Path) {
		sv := l7.MustSim(t, 1, sim.ShapePorts)
		m := l7.MustModel(t, l7.ModelConfig(sv.URLs()...))
		_, addr := l7.MustShim(t, m, kernelOptions(p))
		c := l7.MustDial(t, addr)
		c.Send(t, l7.LongStreamRequest("b", []string{"tell a long story"}, "", 4000))
		resp, err := c.ReadResponse()
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("status %v err %v", resp, err)
		}
		if _, err := resp.Body.Read(make([]byte, 64)); err != nil {
			t.Fatal(err)
		}
		c.Close()
		l7.WaitInFlight(t, m)
		testutil.Eventually(t, 10*time.Second, "the client's socket to leave the maps", func() bool {
			return clientSockets(t, p) == 0
		})
	})
}

// clientSockets counts the client sockets in the datapath's SOCKHASH
// (sk_skb: every socket of an exchange in flight).
func clientSockets(tb testing.TB, p *kernel.Path) int {
	var n int
	var err error
	if p.State.Mode() == maps.ModeMsg {
		n, err = p.State.ClientSockets()
	} else {
		var cookies []uint64
		cookies, err = p.State.SocketCookies()
		n = len(cookies)
	}
	if err != nil {
		tb.Fatal(err)
	}
	return n
}

func TestKernelCarriesKeepAliveRequestBodies(t *testing.T) {
	forEachKernel(t, func(t *testing.T, p *kernel.Path) {
		up, _ := checksumUpstream(t, 64, time.Millisecond)
		m := l7.MustModel(t, l7.ModelConfig("http://"+up))
		_, addr := l7.MustShim(t, m, kernelOptions(p))
		c := l7.MustDial(t, addr)
		for i := range 8 {
			checkedRequest(t, c, "keepalive", i, 64)
		}
		l7.WaitInFlight(t, m) // the exchanges' own counts are done
		checkShare(t, p)
	})
}

func TestKernelPoolsUpstreamAcrossNewClients(t *testing.T) {
	forEachKernel(t, func(t *testing.T, p *kernel.Path) {
		up, conns := checksumUpstream(t, 64, time.Millisecond)
		m := l7.MustModel(t, l7.ModelConfig("http://"+up))
		s, addr := l7.MustShim(t, m, kernelOptions(p))
		for i := range 20 {
			c := l7.MustDial(t, addr)
			checkedRequest(t, c, "pooled", i, 64)
			c.Close()
			// The next client must find the connection back in the pool.
			testutil.Eventually(t, 5*time.Second, "the upstream connection back in the pool", func() bool {
				return l7.PoolIdle(s, up) == 1
			})
		}
		if n := conns.Load(); n != 1 {
			t.Errorf("the upstream accepted %d connections for 20 clients one after another, want 1 (pooled)", n)
		}
		l7.WaitInFlight(t, m) // the exchanges' own counts are done
		checkShare(t, p)
	})
}

func TestKernelPooledUpstreamServesKeepAliveClientsInTurn(t *testing.T) {
	forEachKernel(t, func(t *testing.T, p *kernel.Path) {
		// Two keep-alive clients take turns on one pooled upstream
		// connection: its peer changes at every request and back.
		up, conns := checksumUpstream(t, 64, time.Millisecond)
		m := l7.MustModel(t, l7.ModelConfig("http://"+up))
		s, addr := l7.MustShim(t, m, kernelOptions(p))
		a, b := l7.MustDial(t, addr), l7.MustDial(t, addr)
		for i := range 10 {
			c := a
			if i%2 == 1 {
				c = b
			}
			checkedRequest(t, c, "turns", i, 64)
			testutil.Eventually(t, 5*time.Second, "the upstream connection back in the pool", func() bool {
				return l7.PoolIdle(s, up) == 1
			})
		}
		if n := conns.Load(); n != 1 {
			t.Errorf("the upstream accepted %d connections, want 1 (pooled)", n)
		}
		l7.WaitInFlight(t, m) // the exchanges' own counts are done
		checkShare(t, p)
	})
}

func TestKernelDropsPooledUpstreamThatClosed(t *testing.T) {
	forEachKernel(t, func(t *testing.T, p *kernel.Path) {
		// The replica closes the idle connection after each response (as
		// uvicorn does after its keep-alive timeout): the pooled socket
		// must be found dead and a new one dialled.
		closed := make(chan struct{}, 8)
		ln, err := l7.Listen("127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				go func() {
					if _, ok := readRequest(c); ok {
						io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
					}
					c.Close()
					closed <- struct{}{}
				}()
			}
		}()
		up := ln.Addr().String()
		m := l7.MustModel(t, l7.ModelConfig("http://"+up))
		_, addr := l7.MustShim(t, m, kernelOptions(p))
		for i := range 3 {
			c := l7.MustDial(t, addr)
			body := strings.Repeat("b", 20000)
			c.Send(t, fmt.Sprintf("POST /v1/messages HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s", len(body), body))
			resp, got := c.Response(t)
			if resp.StatusCode != 200 || got != "ok" {
				t.Fatalf("request %d: status %d body %q", i, resp.StatusCode, got)
			}
			c.Close()
			select {
			case <-closed: // the replica has closed its end (pooled or not)
			case <-time.After(10 * time.Second):
				t.Fatal("the replica did not close its connection")
			}
		}
		l7.WaitInFlight(t, m)
	})
}

func TestKernelFastStreamCrossesIntactInOrder(t *testing.T) {
	forEachKernel(t, func(t *testing.T, p *kernel.Path) {
		// An upstream that writes its events back to back, as fast as
		// it can: sk_skb races the shim's arm (bytes that arrive
		// meanwhile are forwarded by the shim, which arms again); every
		// event must arrive exactly once and in order, whoever carried it.
		up := l7.RawUpstream(t, func(c net.Conn) {
			var pending []byte
			for {
				h, rest, err := http1.ReadHead(c, pending)
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
		m := l7.MustModel(t, l7.ModelConfig(up))
		_, addr := l7.MustShim(t, m, kernelOptions(p))
		var want strings.Builder
		for i := range 400 {
			fmt.Fprintf(&want, "data: {\"i\":%d}\n\n", i)
		}
		ws := sha256.Sum256([]byte(want.String()))
		for r := range 30 {
			c := l7.MustDial(t, addr)
			body := strings.Repeat("q", 30000+r)
			c.Send(t, fmt.Sprintf("POST /v1/messages HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s", len(body), body))
			resp, got := c.Response(t)
			if gs := sha256.Sum256([]byte(got)); resp.StatusCode != 200 || gs != ws {
				t.Fatalf("request %d: status %d, %d bytes of %d, SHA-256 %x, want %x", r, resp.StatusCode, len(got), want.Len(), gs[:8], ws[:8])
			}
			c.Close()
		}
		t.Logf("counts %+v", kernelCounts(p))
		l7.WaitInFlight(t, m)
	})
}

func TestKernelHalfClosedClientBodyReachesUpstreamIntact(t *testing.T) {
	forEachKernel(t, func(t *testing.T, p *kernel.Path) {
		// A client that sends its request and half-closes: its body must
		// reach the upstream exactly (sk_skb: it cannot join the
		// SOCKHASH any more, and the head it only peeked must not be
		// sent as the body).
		got := make(chan string, 1)
		up := l7.RawUpstream(t, func(c net.Conn) {
			body, ok := readRequest(c)
			if !ok {
				return
			}
			got <- body
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		})
		m := l7.MustModel(t, l7.ModelConfig(up))
		_, addr := l7.MustShim(t, m, kernelOptions(p))
		c := l7.MustDial(t, addr)
		body := strings.Repeat("half-closed client body. ", 40)
		c.Send(t, fmt.Sprintf("POST /v1/messages HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s", len(body), body))
		if err := c.Conn.(*net.TCPConn).CloseWrite(); err != nil {
			t.Fatal(err)
		}
		select {
		case b := <-got:
			if b != body {
				t.Fatalf("upstream got body %.80q..., want %.80q...", b, body)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("no request reached the upstream")
		}
		resp, answer := c.Response(t)
		for resp.StatusCode == 100 { // the probe of a client that half-closed
			resp, answer = c.Response(t)
		}
		if resp.StatusCode != 200 || answer != "ok" {
			t.Fatalf("status %d body %q", resp.StatusCode, answer)
		}
		l7.WaitInFlight(t, m)
	})
}

// TestKernelCarriesConnectionKeepAliveHeadsOnly: over sk_msg, a response
// head with "Connection: keep-alive" (vLLM's server and lmwarden sim send
// it) is carried by the kernel as it is, since the only clients armed are
// HTTP/1.1 ones that keep their connection; any other Connection value,
// a repeated one, or a Keep-Alive field is the shim's to rewrite. Every
// answer reaches the client whole either way.
func TestKernelCarriesConnectionKeepAliveHeadsOnly(t *testing.T) {
	forEachKernel(t, func(t *testing.T, p *kernel.Path) {
		if p.State.Mode() != maps.ModeMsg {
			return // sk_skb never carries a response head
		}
		heads := []struct {
			fields  string
			carried bool
		}{
			{"Connection: keep-alive\r\n", true},
			{"connection:  Keep-Alive \r\n", true},
			{"Connection: close\r\n", false},
			{"Connection: keep-alive, Upgrade\r\n", false},
			{"Connection: keep-alive\r\nConnection: keep-alive\r\n", false},
			{"Connection: keep-alive\r\nKeep-Alive: timeout=5\r\n", false},
		}
		for _, h := range heads {
			t.Run(strings.TrimSpace(h.fields), func(t *testing.T) {
				up := l7.RawUpstream(t, func(c net.Conn) {
					for {
						if _, _, err := http1.ReadHead(c, nil); err != nil {
							return
						}
						io.WriteString(c, "HTTP/1.1 200 OK\r\n"+h.fields+"Content-Length: 5\r\n\r\nhello")
					}
				})
				m := l7.MustModel(t, l7.ModelConfig(up))
				_, addr := l7.MustShim(t, m, kernelOptions(p))
				before := kernelCounts(p)
				c := l7.MustDial(t, addr)
				for range 2 { // keep-alive: the client connection stays in step
					c.Send(t, "GET /x HTTP/1.1\r\nHost: x\r\n\r\n")
					if resp, body := c.Response(t); resp.StatusCode != 200 || body != "hello" {
						t.Fatalf("status %d body %q", resp.StatusCode, body)
					}
				}
				l7.WaitInFlight(t, m)
				var kern uint64
				for k, c := range kernelCounts(p) {
					kern += c.KernelBytes - before[k].KernelBytes
				}
				if carried := kern > 0; carried != h.carried {
					t.Fatalf("carried by the kernel: %v (%d bytes), want %v", carried, kern, h.carried)
				}
			})
		}
	})
}

// TestKernelClientHalfClosingAfterItsBodyStillGetsTheAnswer: a client
// that shuts down its sending side once its whole request has reached the
// replica (`nc -N`, socat) must still get the replica's answer. Over
// sk_skb its FIN reaches the verdict as a segment of no bytes at the
// body's end; carried to the upstream socket, the psock worker's send of
// nothing broke that socket (EPIPE) and the shim answered 502. The
// replica answers only after the FIN has had time to reach the verdict,
// so the case is met every time, not by chance.
func TestKernelClientHalfClosingAfterItsBodyStillGetsTheAnswer(t *testing.T) {
	forEachKernel(t, func(t *testing.T, p *kernel.Path) {
		for _, tc := range []struct {
			name string
			body string
		}{
			{"no body", ""},
			{"small body", strings.Repeat("b", 300)},
			{"body after the head", strings.Repeat("half-closed client body. ", 4000)},
		} {
			t.Run(tc.name, func(t *testing.T) {
				got := make(chan string, 1)
				answer := make(chan struct{})
				up := l7.RawUpstream(t, func(c net.Conn) {
					body, ok := readRequest(c)
					if !ok {
						return
					}
					got <- body
					<-answer
					io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nanswer")
				})
				m := l7.MustModel(t, l7.ModelConfig(up))
				_, addr := l7.MustShim(t, m, kernelOptions(p))
				for i := range 3 {
					c := l7.MustDial(t, addr)
					head := fmt.Sprintf("POST /v1/messages HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n", len(tc.body))
					c.Send(t, head)
					time.Sleep(20 * time.Millisecond) // the shim has the head, both sockets joined
					c.Send(t, tc.body)
					select {
					case b := <-got:
						if b != tc.body {
							t.Fatalf("exchange %d: upstream got %d bytes, want %d", i, len(b), len(tc.body))
						}
					case <-time.After(10 * time.Second):
						t.Fatalf("exchange %d: no request reached the upstream", i)
					}
					if err := c.Conn.(*net.TCPConn).CloseWrite(); err != nil {
						t.Fatal(err)
					}
					time.Sleep(50 * time.Millisecond) // the FIN meets the verdict before the answer
					answer <- struct{}{}
					resp, body := c.Response(t)
					for resp.StatusCode == 100 { // the probe of a client that half-closed
						resp, body = c.Response(t)
					}
					if resp.StatusCode != 200 || body != "answer" {
						t.Fatalf("exchange %d: status %d body %q, want the replica's 200 \"answer\"", i, resp.StatusCode, body)
					}
					c.Close()
				}
				l7.WaitInFlight(t, m)
			})
		}
	})
}

// readRequest reads one request from c as a replica does before it
// answers: the head, then its Content-Length body. ok is false when no
// head could be read; a body cut short comes back short, for the caller's
// comparison to show.
func readRequest(c net.Conn) (body string, ok bool) {
	h, rest, err := http1.ReadHead(c, nil)
	if err != nil {
		return "", false
	}
	buf := make([]byte, h.ContentLength)
	n := copy(buf, rest)
	m, _ := io.ReadFull(c, buf[n:])
	return string(buf[:n+m]), true
}

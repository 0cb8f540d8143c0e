package l7

import (
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/lmwarden/lmwarden/internal/testutil"
	"github.com/lmwarden/lmwarden/l7/http1"
	"github.com/lmwarden/lmwarden/sim"
)

func TestMalformedHeadGets400AndClose(t *testing.T) {
	sv := mustSim(t, 1, sim.ShapePorts)
	m := mustModel(t, modelConfig(sv.URLs()...))
	_, addr := mustShim(t, m, Options{})
	for _, in := range []string{
		"GARBAGE\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n",
	} {
		c := mustDial(t, addr)
		c.send(t, in)
		resp, _ := c.response(t)
		if resp.StatusCode != 400 || !resp.Close {
			t.Errorf("%q: status %d close %v, want 400 and close", in, resp.StatusCode, resp.Close)
		}
		if !c.closed() {
			t.Errorf("%q: connection left open", in)
		}
	}
}

func TestOversizedHeadGets431(t *testing.T) {
	sv := mustSim(t, 1, sim.ShapePorts)
	m := mustModel(t, modelConfig(sv.URLs()...))
	_, addr := mustShim(t, m, Options{})
	for _, in := range []string{
		"GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + strings.Repeat("a", http1.MaxHeadBytes) + "\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: x\r\n" + strings.Repeat("X-A: b\r\n", http1.MaxHeaderLines+1) + "\r\n",
	} {
		c := mustDial(t, addr)
		c.send(t, in)
		resp, _ := c.response(t)
		if resp.StatusCode != 431 {
			t.Errorf("status %d, want 431", resp.StatusCode)
		}
		if !c.closed() {
			t.Error("connection left open")
		}
	}
}

func TestSlowHeadGets408(t *testing.T) {
	sv := mustSim(t, 1, sim.ShapePorts)
	m := mustModel(t, modelConfig(sv.URLs()...))
	_, addr := mustShim(t, m, Options{HeadTimeout: 200 * time.Millisecond})
	c := mustDial(t, addr)
	c.send(t, "GET /v1/models HTTP/1.1\r\nHost: x\r\n") // and never the blank line
	resp, _ := c.response(t)
	if resp.StatusCode != 408 {
		t.Fatalf("status %d, want 408", resp.StatusCode)
	}
	if !c.closed() {
		t.Error("connection left open")
	}
}

func TestMalformedChunkedBodyGets400(t *testing.T) {
	sv := mustSim(t, 1, sim.ShapePorts)
	m := mustModel(t, modelConfig(sv.URLs()...))
	_, addr := mustShim(t, m, Options{})
	c := mustDial(t, addr)
	c.send(t, "POST /v1/messages HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n")
	resp, _ := c.response(t)
	if resp.StatusCode != 400 {
		t.Fatalf("status %d, want 400", resp.StatusCode)
	}
	if !c.closed() {
		t.Error("connection left open")
	}
}

func TestChunkedRequestBodyIsRelayed(t *testing.T) {
	sv := mustSim(t, 1, sim.ShapePorts)
	m := mustModel(t, modelConfig(sv.URLs()...))
	_, addr := mustShim(t, m, Options{})
	body := `{"model":"qwen3-4b","max_tokens":4,"messages":[{"role":"user","content":"hi there"}]}`
	c := mustDial(t, addr)
	c.send(t, "POST /v1/messages HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
	c.send(t, fmt.Sprintf("%x\r\n%s\r\n", 10, body[:10]))
	c.send(t, fmt.Sprintf("%x;ext=1\r\n%s\r\n0\r\nX-Trailer: v\r\n\r\n", len(body)-10, body[10:]))
	resp, got := c.response(t)
	if resp.StatusCode != 200 || !strings.Contains(got, `"usage"`) {
		t.Fatalf("status %d body %q", resp.StatusCode, got)
	}
}

func TestKeepAliveRoutesEachRequestOnItsOwnHead(t *testing.T) {
	sv := mustSim(t, 2, sim.ShapePorts)
	m := mustModel(t, modelConfig(sv.URLs()...))
	_, addr := mustShim(t, m, Options{})
	c := mustDial(t, addr)
	for i, session := range []string{"session-a", "session-b", "session-a", "session-b"} {
		c.send(t, messagesRequest(session, []string{"hello from " + session}, ""))
		resp, body := c.response(t)
		if resp.StatusCode != 200 || !strings.Contains(body, "message_stop") {
			t.Fatalf("request %d: status %d body %q", i, resp.StatusCode, body)
		}
	}
	done := requestsDone(sv, 2)
	if done[0] != 2 || done[1] != 2 {
		t.Fatalf("requests per replica %v, want [2 2]: two sessions on one connection must be placed apart and each stay put", done)
	}
	st := m.Status()
	if st.StickyShare != 1 {
		t.Fatalf("sticky share %v, want 1", st.StickyShare)
	}
}

func TestOneEndpointShapeWritesRankHeader(t *testing.T) {
	sv := mustSim(t, 3, sim.ShapeRanks)
	mc := modelConfig()
	mc.Replicas, mc.Endpoint, mc.Ranks = nil, sv.URLs()[0], 3
	m := mustModel(t, mc)
	_, addr := mustShim(t, m, Options{})
	c := mustDial(t, addr)
	for i := range 6 {
		// A bogus client rank must never reach vLLM (the sim would 400 it).
		extra := ""
		if i == 0 {
			extra = "X-data-parallel-rank: 7\r\n"
		}
		c.send(t, messagesRequest(fmt.Sprintf("s%d", i%3), []string{"turn"}, extra))
		if resp, body := c.response(t); resp.StatusCode != 200 {
			t.Fatalf("status %d body %q", resp.StatusCode, body)
		}
	}
	st := m.Status()
	done := engineFirstTokens(t, sv.URLs()[0], 3) // from /metrics, per engine label
	for i, r := range st.Replicas {
		var placed uint64
		for _, n := range r.Requests {
			placed += n
		}
		if placed != done[i] || done[i] != 2 {
			t.Errorf("rank %d: warden placed %d, engine served %d (want 2 each)", i, placed, done[i])
		}
	}
}

func TestConnectFailureRetriesOnNextReplica(t *testing.T) {
	sv := mustSim(t, 1, sim.ShapePorts)
	m := mustModel(t, modelConfig(deadURL(t), sv.URLs()[0]))
	s, addr := mustShim(t, m, Options{})
	c := mustDial(t, addr)
	// Pinned by the client to the dead replica: the connect fails before
	// any byte went upstream, so the request moves to the live one.
	c.send(t, messagesRequest("s", []string{"hi"}, "X-Warden-Replica: 0\r\n"))
	if resp, body := c.response(t); resp.StatusCode != 200 {
		t.Fatalf("status %d body %q", resp.StatusCode, body)
	}
	if got := s.Stats().Retries; got != 1 {
		t.Fatalf("retries %d, want 1", got)
	}
	if st := m.Status(); st.Replicas[0].RetriedAway != 1 {
		t.Fatalf("retried away from replica 0: %d, want 1", st.Replicas[0].RetriedAway)
	}
}

func TestConnectFailureOnEveryReplicaGets502(t *testing.T) {
	m := mustModel(t, modelConfig(deadURL(t), deadURL(t)))
	_, addr := mustShim(t, m, Options{})
	c := mustDial(t, addr)
	c.send(t, messagesRequest("s", []string{"hi"}, ""))
	if resp, _ := c.response(t); resp.StatusCode != 502 {
		t.Fatalf("status %d, want 502", resp.StatusCode)
	}
}

func TestReplicaClosingAfterHeadGets502WithoutRetry(t *testing.T) {
	up := rawUpstream(t, func(c net.Conn) {
		readRequestHead(c) // took the request, then dies
	})
	sv := mustSim(t, 1, sim.ShapePorts)
	m := mustModel(t, modelConfig(up, sv.URLs()[0]))
	s, addr := mustShim(t, m, Options{})
	c := mustDial(t, addr)
	c.send(t, messagesRequest("s", []string{"hi"}, "X-Warden-Replica: 0\r\n"))
	if resp, _ := c.response(t); resp.StatusCode != 502 {
		t.Fatalf("status %d, want 502", resp.StatusCode)
	}
	if s.Stats().Retries != 0 || requestsDone(sv, 1)[0] != 0 {
		t.Fatal("a request whose bytes went upstream was retried")
	}
}

func TestReplicaDyingMidStreamEndsTheClientResponse(t *testing.T) {
	up := rawUpstream(t, func(c net.Conn) {
		readRequestHead(c)
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
		io.WriteString(c, "e\r\nevent: ping\n\n\r\n") // then the process dies
	})
	m := mustModel(t, modelConfig(up))
	_, addr := mustShim(t, m, Options{})
	c := mustDial(t, addr)
	c.send(t, messagesRequest("s", []string{"hi"}, ""))
	resp, err := readResponse(c)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("status %v err %v", resp, err)
	}
	if _, err := io.ReadAll(resp.Body); err == nil {
		t.Fatal("truncated stream read as complete")
	}
	waitInFlight(t, m)
}

func TestSilentReplicaTimesOutInsteadOfHanging(t *testing.T) {
	stall := make(chan struct{})
	t.Cleanup(func() { close(stall) })
	headOnly := rawUpstream(t, func(c net.Conn) {
		readRequestHead(c)
		<-stall // accepts the request and never answers
	})
	midStream := rawUpstream(t, func(c net.Conn) {
		readRequestHead(c)
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\npartial")
		<-stall
	})
	m := mustModel(t, modelConfig(headOnly, midStream))
	_, addr := mustShim(t, m, Options{ResponseTimeout: 300 * time.Millisecond})

	c := mustDial(t, addr)
	c.send(t, messagesRequest("a", []string{"hi"}, "X-Warden-Replica: 0\r\n"))
	if resp, _ := c.response(t); resp.StatusCode != 504 {
		t.Fatalf("silent replica: status %d, want 504", resp.StatusCode)
	}

	c = mustDial(t, addr)
	c.send(t, messagesRequest("b", []string{"hi"}, "X-Warden-Replica: 1\r\n"))
	resp, err := readResponse(c)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("status %v err %v", resp, err)
	}
	if _, err := io.ReadAll(resp.Body); err == nil {
		t.Fatal("stalled body read as complete")
	}
	waitInFlight(t, m)
}

func TestAllReplicasUnhealthyGets503WithRetryAfter(t *testing.T) {
	sv := mustSim(t, 2, sim.ShapePorts)
	m := mustModel(t, modelConfig(sv.URLs()...))
	m.SetHealthy(0, false)
	m.SetHealthy(1, false)
	_, addr := mustShim(t, m, Options{})
	c := mustDial(t, addr)
	c.send(t, messagesRequest("s", []string{"hi"}, ""))
	resp, _ := c.response(t)
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("status %d Retry-After %q, want 503 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
}

func TestSixTurnsOfOneSessionLandOnOneReplica(t *testing.T) {
	sv := mustSim(t, 4, sim.ShapePorts)
	m := mustModel(t, modelConfig(sv.URLs()...))
	_, addr := mustShim(t, m, Options{})
	turns := []string{strings.Repeat("a long first prompt ", 200)}
	for turn := range 6 {
		c := mustDial(t, addr) // like `claude -p`: a new connection a turn
		c.send(t, messagesRequest("6f1c9a2e-session", turns, ""))
		resp, body := c.response(t)
		if resp.StatusCode != 200 {
			t.Fatalf("turn %d: status %d", turn, resp.StatusCode)
		}
		turns = append(turns, "assistant said "+fmt.Sprint(len(body)), fmt.Sprintf("next question %d", turn))
		c.Close()
	}
	waitInFlight(t, m)
	done := requestsDone(sv, 4)
	var on int
	for _, n := range done {
		if n != 0 {
			on++
			if n != 6 {
				t.Fatalf("requests per replica %v, want all 6 on one", done)
			}
		}
	}
	if on != 1 {
		t.Fatalf("requests per replica %v, want all 6 on one", done)
	}
}

func TestClientAbortReleasesInFlight(t *testing.T) {
	// Abort while the replica has not answered yet.
	stall := make(chan struct{})
	t.Cleanup(func() { close(stall) })
	silent := rawUpstream(t, func(c net.Conn) {
		readRequestHead(c)
		<-stall
	})
	sv := mustSim(t, 1, sim.ShapePorts)
	m := mustModel(t, modelConfig(silent, sv.URLs()[0]))
	_, addr := mustShim(t, m, Options{})
	c := mustDial(t, addr)
	c.send(t, messagesRequest("a", []string{"hi"}, "X-Warden-Replica: 0\r\n"))
	testutil.Eventually(t, 10*time.Second, "the request in flight", func() bool { return m.Status().InFlight == 1 })
	c.Close()
	waitInFlight(t, m)

	// Abort in the middle of a long stream from the simulator.
	c = mustDial(t, addr)
	c.send(t, longStreamRequest("b", []string{"tell a long story"}, "X-Warden-Replica: 1\r\n", 4000))
	resp, err := readResponse(c)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("status %v err %v", resp, err)
	}
	buf := make([]byte, 64)
	if _, err := io.ReadAtLeast(resp.Body, buf, 1); err != nil {
		t.Fatal(err)
	}
	c.Close()
	waitInFlight(t, m)
}

func TestExpectContinueIsAnsweredByTheShim(t *testing.T) {
	sv := mustSim(t, 1, sim.ShapePorts)
	m := mustModel(t, modelConfig(sv.URLs()...))
	_, addr := mustShim(t, m, Options{})
	req := messagesRequest("s", []string{"hi"}, "Expect: 100-continue\r\n")
	i := strings.Index(req, "\r\n\r\n") + 4
	c := mustDial(t, addr)
	c.send(t, req[:i])
	line, err := c.r.ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "HTTP/1.1 100 ") {
		t.Fatalf("interim %q %v, want 100 Continue", line, err)
	}
	if blank, _ := c.r.ReadString('\n'); blank != "\r\n" {
		t.Fatalf("interim head not terminated: %q", blank)
	}
	c.send(t, req[i:])
	if resp, body := c.response(t); resp.StatusCode != 200 {
		t.Fatalf("status %d body %q", resp.StatusCode, body)
	}
}

func TestPooledConnectionClosedByReplicaDoesNotFailTheNextRequest(t *testing.T) {
	// The replica drops each keep-alive connection right after its
	// answer, as when it closes idle ones: whether the shim pooled the
	// connection before it saw the close or not, the next request works.
	closed := make(chan struct{}, 4)
	up := rawUpstream(t, func(c net.Conn) {
		readRequestHead(c)
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		c.Close()
		closed <- struct{}{}
	})
	m := mustModel(t, modelConfig(up))
	_, addr := mustShim(t, m, Options{})
	for i := range 3 {
		c := mustDial(t, addr)
		c.send(t, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
		resp, body := c.response(t)
		if resp.StatusCode != 200 || body != "ok" {
			t.Fatalf("request %d: status %d body %q", i, resp.StatusCode, body)
		}
		select {
		case <-closed: // the replica has closed its end
		case <-time.After(10 * time.Second):
			t.Fatal("the replica did not close its end")
		}
	}
}

func TestGracefulCloseLetsInFlightRequestFinish(t *testing.T) {
	release := make(chan struct{})
	up := rawUpstream(t, func(c net.Conn) {
		readRequestHead(c)
		<-release
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\ndone")
	})
	m := mustModel(t, modelConfig(up))
	s, addr := mustShim(t, m, Options{})
	idle := mustDial(t, addr)
	c := mustDial(t, addr)
	c.send(t, "GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")
	testutil.Eventually(t, 10*time.Second, "the request in flight", func() bool { return m.Status().InFlight == 1 })
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	if !idle.closed() {
		t.Error("idle connection kept open during shutdown")
	}
	close(release)
	resp, body := c.response(t)
	if resp.StatusCode != 200 || body != "done" || !resp.Close {
		t.Fatalf("status %d body %q close %v", resp.StatusCode, body, resp.Close)
	}
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	if _, err := net.Dial("tcp", addr); err == nil {
		t.Error("still accepting after Close")
	}
}

func TestPooledConnectionClosedUnansweredIsReplayedOnce(t *testing.T) {
	// The replica answers the first request on a connection and closes the
	// connection on the second without a byte, as a server closing an idle
	// keep-alive connection does when a request crosses the close.
	up := rawUpstream(t, func(c net.Conn) {
		h, rest, err := http1.ReadHead(c, nil)
		if err != nil {
			return
		}
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nfirst")
		_ = h
		http1.ReadHead(c, rest) // the next request: dropped unanswered
	})
	m := mustModel(t, modelConfig(up))
	s, addr := mustShim(t, m, Options{})
	c := mustDial(t, addr)
	for i := range 2 {
		c.send(t, messagesRequest("s", []string{"hi"}, ""))
		resp, body := c.response(t)
		if resp.StatusCode != 200 || body != "first" {
			t.Fatalf("request %d: status %d body %q", i, resp.StatusCode, body)
		}
	}
	if got := s.Stats().Replays; got != 1 {
		t.Fatalf("replays %d, want 1", got)
	}
}

func TestPipelinedRequestsAreAnsweredInOrder(t *testing.T) {
	sv := mustSim(t, 2, sim.ShapePorts)
	m := mustModel(t, modelConfig(sv.URLs()...))
	_, addr := mustShim(t, m, Options{})
	c := mustDial(t, addr)
	// Two requests in one write: the second arrives with the first's body
	// and must be neither lost nor sent upstream as part of it.
	c.send(t, messagesRequest("p1", []string{"first"}, "")+messagesRequest("p2", []string{"second"}, ""))
	for i := range 2 {
		resp, body := c.response(t)
		if resp.StatusCode != 200 || !strings.Contains(body, "message_stop") {
			t.Fatalf("response %d: status %d body %q", i, resp.StatusCode, body)
		}
	}
	if done := requestsDone(sv, 2); done[0]+done[1] != 2 {
		t.Fatalf("requests per replica %v, want 2 in all", done)
	}
}

func TestHTTP10ClientGetsAnAnswerAndClose(t *testing.T) {
	sv := mustSim(t, 1, sim.ShapePorts)
	m := mustModel(t, modelConfig(sv.URLs()...))
	_, addr := mustShim(t, m, Options{})
	c := mustDial(t, addr)
	c.send(t, "GET /v1/models HTTP/1.0\r\n\r\n") // no Host: the shim adds one upstream
	resp, body := c.response(t)
	if resp.StatusCode != 200 || !strings.Contains(body, "qwen3-4b") {
		t.Fatalf("status %d body %q", resp.StatusCode, body)
	}
	if !c.closed() {
		t.Error("HTTP/1.0 connection without keep-alive left open")
	}
}

func TestHTTP10ClientGetsAStreamedResponseWithoutChunks(t *testing.T) {
	sv := mustSim(t, 1, sim.ShapePorts)
	m := mustModel(t, modelConfig(sv.URLs()...))
	_, addr := mustShim(t, m, Options{})
	c := mustDial(t, addr)
	req := strings.Replace(messagesRequest("s", []string{"hi"}, ""), "HTTP/1.1", "HTTP/1.0", 1)
	c.send(t, req)
	resp, body := c.response(t)
	if resp.StatusCode != 200 || len(resp.TransferEncoding) != 0 || !resp.Close {
		t.Fatalf("status %d transfer-encoding %v close %v", resp.StatusCode, resp.TransferEncoding, resp.Close)
	}
	if !strings.HasPrefix(body, "event: message_start") || !strings.Contains(body, "event: message_stop") {
		t.Fatalf("body is not the plain event stream: %q", body)
	}
}

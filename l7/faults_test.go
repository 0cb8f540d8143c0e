package l7

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lmwarden/lmwarden/internal/testutil"
)

// Faults of the replica side and of the client side, and what the client
// gets: the API's own error event on a stream that was cut, 408 for a
// body that never comes, 502 for a replica that stopped answering. The
// kernel suite runs every test here over both kernel datapaths too.

// sseUpstream is a replica that reads a request, answers it with a
// streamed head and one whole event, then does what then does (returns:
// closes).
func sseUpstream(t *testing.T, then func(c net.Conn)) string {
	return rawUpstream(t, func(c net.Conn) {
		h, pending, err := readRequestHead(c)
		if err != nil {
			return
		}
		// The whole body, as a replica reads it before it answers (a
		// close with bytes unread would reset the connection).
		if _, err := io.CopyN(io.Discard, io.MultiReader(bytes.NewReader(pending), c), h.ContentLength); err != nil {
			return
		}
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
		ev := "event: ping\ndata: {\"type\": \"ping\"}\n\n"
		io.WriteString(c, fmt.Sprintf("%x\r\n%s\r\n", len(ev), ev))
		then(c)
	})
}

// streamRequest is a streamed request of the API at path.
func streamRequest(path, session string) string {
	body := `{"model":"m","max_tokens":8,"stream":true,"messages":[{"role":"user","content":"hi"}]}`
	return fmt.Sprintf("POST %s HTTP/1.1\r\nHost: warden\r\nContent-Type: application/json\r\nX-Session-Id: %s\r\nContent-Length: %d\r\n\r\n%s", path, session, len(body), body)
}

// errorEventOf finds the API's error event in a streamed body: its JSON.
func errorEventOf(t *testing.T, body, path string) map[string]any {
	t.Helper()
	want := "data: {\"error\""
	if path == "/v1/messages" {
		want = "event: error\ndata: "
	}
	i := strings.Index(body, want)
	if i < 0 {
		t.Fatalf("no error event (%q) in %q", want, body)
	}
	line := body[strings.Index(body[i:], "data: ")+i+len("data: "):]
	line = line[:strings.IndexByte(line, '\n')]
	var v map[string]any
	if err := json.Unmarshal([]byte(line), &v); err != nil {
		t.Fatalf("error event %q: %v", line, err)
	}
	return v
}

func TestCutStreamEndsWithTheAPIsErrorEvent(t *testing.T) {
	paced := func(c net.Conn) {
		// Events a token apart (as a replica streams: the kernel carries
		// them), then the replica dies.
		for i := range 5 {
			time.Sleep(20 * time.Millisecond)
			ev := fmt.Sprintf("event: content_block_delta\ndata: {\"i\": %d}\n\n", i)
			io.WriteString(c, fmt.Sprintf("%x\r\n%s\r\n", len(ev), ev))
		}
	}
	// A replica that dies resets the connection (it sends RST, not FIN):
	// the event it wrote before must still reach the client, then the
	// error event.
	reset := func(c net.Conn) { c.(*net.TCPConn).SetLinger(0) }
	for _, tc := range []struct {
		name, path string
		then       func(net.Conn)
	}{
		{"messages", "/v1/messages", func(net.Conn) {}},
		{"chat", "/v1/chat/completions", func(net.Conn) {}},
		{"messages reset", "/v1/messages", reset},
		{"chat reset", "/v1/chat/completions", reset},
		{"messages paced", "/v1/messages", paced},
		{"chat paced", "/v1/chat/completions", paced},
	} {
		path := tc.path
		t.Run(tc.name, func(t *testing.T) {
			up := sseUpstream(t, tc.then) // then dies
			m := mustModel(t, modelConfig(up))
			_, addr := mustShim(t, m, Options{})
			c := mustDial(t, addr)
			c.send(t, streamRequest(path, "s"))
			resp, body := c.response(t) // a well-formed chunked body: it ends
			if resp.StatusCode != 200 {
				t.Fatalf("status %d: %q", resp.StatusCode, body)
			}
			v := errorEventOf(t, body, path)
			if path == "/v1/messages" && v["type"] != "error" {
				t.Errorf("Anthropic error event %v: want type error", v)
			}
			if e, _ := v["error"].(map[string]any); e == nil || !strings.Contains(fmt.Sprint(e["message"]), "replica 0") {
				t.Errorf("error event %v does not name the replica", v)
			}
			if !strings.Contains(body, "event: ping") {
				t.Errorf("the event before the cut is missing: %q", body)
			}
			if !c.closed() {
				t.Error("the connection stayed open after a cut stream")
			}
			waitInFlight(t, m)
		})
	}
}

func TestStreamStalledOnAnUnhealthyReplicaEndsWithAnError(t *testing.T) {
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	var closedUp atomic.Bool
	up := sseUpstream(t, func(c net.Conn) {
		// Stopped (SIGSTOP): the socket stays open and silent.
		go func() { io.Copy(io.Discard, c); closedUp.Store(true) }()
		<-release
	})
	m := mustModel(t, modelConfig(up))
	_, addr := mustShim(t, m, Options{StallGrace: 200 * time.Millisecond})
	c := mustDial(t, addr)
	c.send(t, streamRequest("/v1/messages", "s"))
	resp, err := readResponse(c)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("%v %v", resp, err)
	}
	// Healthy: the stream waits (a replica may pause between tokens).
	time.Sleep(700 * time.Millisecond)
	if m.Status().InFlight != 1 {
		t.Fatal("the stream ended while its replica was healthy")
	}
	start := time.Now()
	m.SetHealthy(0, false)
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("the stream ended broken: %v (%q)", err, b)
	}
	took := time.Since(start)
	v := errorEventOf(t, string(b), "/v1/messages")
	if e, _ := v["error"].(map[string]any); e == nil || !strings.Contains(fmt.Sprint(e["message"]), "unhealthy") {
		t.Errorf("error event %v does not say the replica is unhealthy", v)
	}
	if took > 5*time.Second {
		t.Errorf("ended %v after the replica was marked unhealthy", took)
	}
	testutil.Eventually(t, 5*time.Second, "the replica's connection closed", closedUp.Load)
	waitInFlight(t, m)
}

func TestRequestStalledBeforeItsAnswerOnAnUnhealthyReplicaGets502(t *testing.T) {
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	reached := make(chan struct{}, 1)
	up := rawUpstream(t, func(c net.Conn) {
		readRequestHead(c)
		select {
		case reached <- struct{}{}:
		default:
		}
		<-release
	})
	m := mustModel(t, modelConfig(up))
	_, addr := mustShim(t, m, Options{StallGrace: 200 * time.Millisecond})
	c := mustDial(t, addr)
	c.send(t, streamRequest("/v1/chat/completions", "s"))
	// On the replica before it is marked unhealthy (else it would be
	// refused a placement, not stalled).
	select {
	case <-reached:
	case <-time.After(10 * time.Second):
		t.Fatal("the request never reached the replica")
	}
	m.SetHealthy(0, false)
	resp, body := c.response(t)
	if resp.StatusCode != 502 || !strings.Contains(body, `"error"`) || !strings.Contains(body, "stopped answering") {
		t.Errorf("%d %q: want 502 with an OpenAI error saying the replica stopped answering", resp.StatusCode, body)
	}
	waitInFlight(t, m)
}

// A body that does not come is waited for in the client's socket: the
// replica never hears of it. Past what the shim waits for there (a body
// larger than bodyWaitBytes) the request goes to the replica, whose
// request ends when the body misses its deadline.
func TestBodyThatNeverArrivesGets408AndTheReplicasRequestEnds(t *testing.T) {
	var upSeen, upClosed atomic.Int32
	up := rawUpstream(t, func(c net.Conn) {
		upSeen.Add(1)
		readRequestHead(c)
		io.Copy(io.Discard, c) // until the shim gives up
		upClosed.Add(1)
	})
	m := mustModel(t, modelConfig(up))
	_, addr := mustShim(t, m, Options{BodyDeadline: 300 * time.Millisecond})
	for _, tc := range []struct{ name, send string }{
		{"part of it", "POST /v1/messages HTTP/1.1\r\nHost: w\r\nContent-Length: 100\r\n\r\n0123456789"},
		{"none of 10^12", "POST /v1/messages HTTP/1.1\r\nHost: w\r\nContent-Length: 1000000000000\r\n\r\n"},
		{"trickled", "POST /v1/messages HTTP/1.1\r\nHost: w\r\nContent-Length: 100\r\n\r\n"},
		{"part of a large one", "POST /v1/messages HTTP/1.1\r\nHost: w\r\nContent-Length: 1000000\r\n\r\n" + strings.Repeat("x", bodyWaitBytes+1000)},
	} {
		c := mustDial(t, addr)
		c.send(t, tc.send)
		stop := make(chan struct{})
		if tc.name == "trickled" {
			go func() {
				for {
					select {
					case <-stop:
						return
					case <-time.After(50 * time.Millisecond):
						c.Write([]byte("x"))
					}
				}
			}()
		}
		start := time.Now()
		resp, body := c.response(t)
		close(stop)
		if resp.StatusCode != 408 || time.Since(start) > 5*time.Second {
			t.Errorf("%s: %d %q after %v, want 408 soon after the 300 ms deadline", tc.name, resp.StatusCode, body, time.Since(start))
		}
	}
	testutil.Eventually(t, 5*time.Second, "the large one's replica request aborted", func() bool { return upClosed.Load() == 1 })
	if n := upSeen.Load(); n != 1 {
		t.Errorf("the replica saw %d requests whose body did not come, want only the large one", n)
	}
	waitInFlight(t, m)
}

func TestPinFromAnUntrustedClientIsIgnored(t *testing.T) {
	sv := mustSim(t, 4, "ports")
	mc := modelConfig(sv.URLs()...)
	mc.PinSources = []string{"10.0.0.0/8"}
	m := mustModel(t, mc)
	_, addr := mustShim(t, m, Options{})
	for i := range 8 {
		c := mustDial(t, addr)
		c.send(t, messagesRequest(fmt.Sprintf("s%d", i), []string{"hi"}, "X-Warden-Replica: 3\r\n"))
		if resp, _ := c.response(t); resp.StatusCode != 200 {
			t.Fatal(resp.Status)
		}
	}
	st := m.Status()
	if st.Replicas[3].ClientPinned != 0 || st.UntrustedPins != 8 {
		t.Errorf("client pinned %d, untrusted %d; want 0 and 8", st.Replicas[3].ClientPinned, st.UntrustedPins)
	}
	waitInFlight(t, m)
}

// TestDrainAnswersARequestThatArrivesAsItBegins: a keep-alive client that
// sends its next request as the shim starts closing gets an answer with
// Connection: close, not a reset; one that sends nothing is closed
// cleanly when the drain's grace ends.
func TestDrainAnswersARequestThatArrivesAsItBegins(t *testing.T) {
	sv := mustSim(t, 1, "ports")
	m := mustModel(t, modelConfig(sv.URLs()...))
	// The grace is the time the test has to send its request after it
	// saw the drain begin: 2 s, so that a loaded machine's scheduling
	// does not make the request late (at 500 ms it flaked under load).
	const grace = 2 * time.Second
	s, addr := mustShim(t, m, Options{DrainGrace: grace})
	busy, idle := mustDial(t, addr), mustDial(t, addr)
	for _, c := range []*client{busy, idle} {
		c.send(t, messagesRequest("d", []string{"hi"}, ""))
		if resp, _ := c.response(t); resp.StatusCode != 200 || resp.Close {
			t.Fatalf("%v close=%v", resp.Status, resp.Close)
		}
	}
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	testutil.Eventually(t, 10*time.Second, "the drain to begin", s.closing.Load)
	busy.send(t, messagesRequest("d", []string{"hi", "ho", "again"}, ""))
	resp, _ := busy.response(t)
	if resp.StatusCode != 200 || !resp.Close {
		t.Errorf("the request sent as the drain began: %s close=%v, want 200 with Connection: close", resp.Status, resp.Close)
	}
	start := time.Now()
	_ = idle.SetReadDeadline(time.Now().Add(grace + 5*time.Second))
	_, err := idle.r.ReadByte()
	if err != io.EOF || time.Since(start) > grace+2*time.Second {
		t.Errorf("the idle connection: %v after %v, want a clean EOF within the grace", err, time.Since(start))
	}
	if err := <-closed; err != nil {
		t.Errorf("Close: %v", err)
	}
}

func TestConnectionBoundsShedTheIdleFirst(t *testing.T) {
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	stall := rawUpstream(t, func(c net.Conn) {
		readRequestHead(c)
		<-release
	})
	m := mustModel(t, modelConfig(stall))
	lim := NewConnLimits(100, 3)
	_, addr := mustShim(t, m, Options{Limits: lim})
	first := mustDial(t, addr) // idle: no head sent
	testutil.Eventually(t, 5*time.Second, "the first connection admitted", func() bool { return lim.Stats().Open == 1 })
	second, third := mustDial(t, addr), mustDial(t, addr)
	// Two busy with requests the replica never answers.
	second.send(t, messagesRequest("a", []string{"hi"}, ""))
	third.send(t, messagesRequest("b", []string{"hi"}, ""))
	testutil.Eventually(t, 5*time.Second, "two requests in flight", func() bool { return m.Status().InFlight == 2 })
	fourth := mustDial(t, addr) // over the bound: the idle one goes
	if !first.closed() {
		t.Error("the idle connection was not shed for the new one")
	}
	_ = fourth
	testutil.Eventually(t, 5*time.Second, "the fourth admitted", func() bool { return lim.Stats().Open == 3 })
	fifth := mustDial(t, addr) // the fourth is idle now: it goes
	if !fourth.closed() {
		t.Error("the next idle connection was not shed")
	}
	fourthShed := lim.Stats().Shed["client"]
	// With all three busy, a new one is refused.
	fifth.send(t, messagesRequest("c", []string{"hi"}, ""))
	testutil.Eventually(t, 5*time.Second, "three in flight", func() bool { return m.Status().InFlight == 3 })
	sixth := mustDial(t, addr)
	resp, _ := sixth.response(t)
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" {
		t.Errorf("over the bound with none idle: %s, want 503 with Retry-After", resp.Status)
	}
	st := lim.Stats()
	if fourthShed != 2 || st.Refused["client"] != 1 {
		t.Errorf("shed %d refused %d, want 2 and 1", fourthShed, st.Refused["client"])
	}
}

func TestPoolClosesIdleConnectionsOnATimer(t *testing.T) {
	var closedN atomic.Int32
	ln, err := Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { io.Copy(io.Discard, c); closedN.Add(1); c.Close() }()
		}
	}()
	u := NewUpstreams(time.Second, 200*time.Millisecond, 8)
	defer u.Close()
	for range 3 {
		c, err := u.Dial(t.Context(), ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		u.Put(ln.Addr().String(), c)
	}
	testutil.Eventually(t, 5*time.Second, "the idle connections closed by the timer", func() bool {
		return u.Idle(ln.Addr().String()) == 0 && closedN.Load() == 3
	})
}

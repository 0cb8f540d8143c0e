package l7

import (
	"bytes"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/lmwarden/lmwarden/internal/testutil"
	"github.com/lmwarden/lmwarden/sim"
)

// answeredCase is one way the warden answers a request itself: the
// replicas it has, the shim's options, what the client sends (and does
// meanwhile), and the status the client gets.
type answeredCase struct {
	name    string
	status  int
	opts    Options
	urls    func(t *testing.T) []string
	request func(t *testing.T, c *client)
	// during runs after the request is sent, before its answer is read.
	during func(t *testing.T, sh *Shim)
}

// silentUpstream is a replica that reads a request head and then never
// answers (until the test ends).
func silentUpstream(t *testing.T) string {
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) })
	return rawUpstream(t, func(c net.Conn) {
		if _, _, err := readRequestHead(c); err != nil {
			return
		}
		go io.Copy(io.Discard, c)
		<-stop
	})
}

// closingUpstream reads a request whole and closes without answering.
func closingUpstream(t *testing.T) string {
	return rawUpstream(t, func(c net.Conn) {
		h, pending, err := readRequestHead(c)
		if err != nil {
			return
		}
		_, _ = io.CopyN(io.Discard, io.MultiReader(bytes.NewReader(pending), c), h.ContentLength)
	})
}

func answeredCases(t *testing.T) []answeredCase {
	simURLs := func(t *testing.T) []string { return mustSim(t, 1, sim.ShapePorts).URLs() }
	send := func(s string) func(*testing.T, *client) { return func(t *testing.T, c *client) { c.send(t, s) } }
	turn := messagesRequest("s", []string{"hello"}, "")
	return []answeredCase{
		{name: "502 replica refuses connections", status: 502, request: send(turn),
			urls: func(t *testing.T) []string { return []string{deadURL(t)} }},
		{name: "502 replica closes unanswered", status: 502, request: send(turn),
			urls: func(t *testing.T) []string { return []string{closingUpstream(t)} }},
		{name: "504 replica never answers", status: 504, request: send(turn),
			opts: Options{ResponseTimeout: 300 * time.Millisecond},
			urls: func(t *testing.T) []string { return []string{silentUpstream(t)} }},
		{name: "502 replica marked unhealthy while silent", status: 502, request: send(turn),
			opts: Options{StallGrace: 100 * time.Millisecond},
			urls: func(t *testing.T) []string { return []string{silentUpstream(t)} },
			during: func(t *testing.T, sh *Shim) {
				testutil.Eventually(t, 10*time.Second, "the request in flight", func() bool { return inflight(sh) == 1 })
				sh.placer.(interface{ SetHealthy(int, bool) }).SetHealthy(0, false)
			}},
		{name: "503 no healthy replica", status: 503, request: send(turn), urls: simURLs},
		{name: "408 body never comes", status: 408, urls: simURLs,
			opts: Options{BodyDeadline: 300 * time.Millisecond},
			request: func(t *testing.T, c *client) {
				c.send(t, "POST /v1/messages HTTP/1.1\r\nHost: w\r\nX-Session-Id: s\r\nContent-Length: 100\r\n\r\n{\"model\"")
			}},
		{name: "408 large body stops midway", status: 408, urls: simURLs,
			opts: Options{BodyDeadline: 500 * time.Millisecond},
			request: func(t *testing.T, c *client) {
				c.send(t, "POST /v1/messages HTTP/1.1\r\nHost: w\r\nX-Session-Id: s\r\nContent-Length: 2000000\r\n\r\n")
				c.send(t, strings.Repeat("x", 600<<10))
			}},
		{name: "400 broken chunked body", status: 400, urls: simURLs,
			request: send("POST /v1/messages HTTP/1.1\r\nHost: w\r\nX-Session-Id: s\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n")},
		{name: "400 bad head", status: 400, urls: simURLs, request: send("GET / HTTP/1.1\r\nHost x\r\n\r\n")},
		{name: "431 head too large", status: 431, urls: simURLs,
			request: send("GET / HTTP/1.1\r\nHost: w\r\nX-Big: " + strings.Repeat("a", 70<<10) + "\r\n\r\n")},
		{name: "408 head never ends", status: 408, urls: simURLs,
			opts:    Options{HeadTimeout: 300 * time.Millisecond},
			request: send("GET / HTTP/1.1\r\nHost: w\r\n")},
		{name: "502 to an HTTP/1.0 client", status: 502,
			request: send(strings.Replace(turn, "HTTP/1.1", "HTTP/1.0", 1)),
			urls:    func(t *testing.T) []string { return []string{closingUpstream(t)} }},
		{name: "502 after 100 Continue", status: 502,
			request: func(t *testing.T, c *client) {
				c.send(t, strings.Replace(turn, "Host: warden\r\n", "Host: warden\r\nExpect: 100-continue\r\n", 1))
			},
			urls: func(t *testing.T) []string { return []string{closingUpstream(t)} }},
		{name: "502 to a client that half-closed", status: 502,
			request: func(t *testing.T, c *client) {
				c.send(t, turn)
				c.Conn.(*net.TCPConn).CloseWrite()
			},
			urls: func(t *testing.T) []string { return []string{closingUpstream(t)} }},
		{name: "500 of the replica's own", status: 500, request: send(turn),
			urls: func(t *testing.T) []string {
				return []string{rawUpstream(t, func(c net.Conn) {
					h, pending, err := readRequestHead(c)
					if err != nil {
						return
					}
					_, _ = io.CopyN(io.Discard, io.MultiReader(bytes.NewReader(pending), c), h.ContentLength)
					io.WriteString(c, "HTTP/1.1 500 Internal Server Error\r\nContent-Length: 4\r\n\r\noops")
				})}
			}},
		{name: "200 whose stream stalled on an unhealthy replica", status: 200,
			opts:    Options{StallGrace: 100 * time.Millisecond},
			request: send(streamRequest("/v1/messages", "s")),
			urls: func(t *testing.T) []string {
				stop := make(chan struct{})
				t.Cleanup(func() { close(stop) })
				return []string{sseUpstream(t, func(c net.Conn) { go io.Copy(io.Discard, c); <-stop })}
			},
			during: func(t *testing.T, sh *Shim) {
				testutil.Eventually(t, 10*time.Second, "the request in flight", func() bool { return inflight(sh) == 1 })
				time.Sleep(200 * time.Millisecond) // the head and the first event reach the client
				sh.placer.(interface{ SetHealthy(int, bool) }).SetHealthy(0, false)
			}},
		{name: "200 whose stream the replica cut", status: 200,
			request: send(streamRequest("/v1/messages", "s")),
			urls: func(t *testing.T) []string {
				return []string{sseUpstream(t, func(c net.Conn) { c.(*net.TCPConn).SetLinger(0) })}
			}},
	}
}

// inflight is how many exchanges the shim has placed and not ended.
func inflight(s *Shim) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.inflight)
}

// TestAccessLogStatusIsTheWardensOwnAnswer: for each answer the warden
// writes itself, the access line's status is the one the client read,
// not 499 (that is for a client that left; these stay until their line
// is written).
func TestAccessLogStatusIsTheWardensOwnAnswer(t *testing.T) {
	for _, tc := range answeredCases(t) {
		t.Run(tc.name, func(t *testing.T) {
			m := mustModel(t, modelConfig(tc.urls(t)...))
			if tc.status == 503 {
				m.SetHealthy(0, false)
			}
			var buf testutil.Buffer
			opts := tc.opts
			opts.AccessLog = slog.New(slog.NewJSONHandler(&buf, nil))
			sh, addr := mustShim(t, m, opts)
			c := mustDial(t, addr)
			defer c.Close()
			tc.request(t, c)
			if tc.during != nil {
				tc.during(t, sh)
			}
			resp, _, err := c.responseTo("POST")
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			if body := string(b); resp.StatusCode != tc.status {
				t.Fatalf("client got %s (%q), want %d", resp.Status, body, tc.status)
			}
			var lines []map[string]any
			var text string
			testutil.Eventually(t, 10*time.Second, "the access line", func() bool {
				lines, text = logLines(t, &buf)
				return len(lines) >= 1
			})
			time.Sleep(50 * time.Millisecond) // a second line would be a defect too
			if lines, text = logLines(t, &buf); len(lines) != 1 {
				t.Fatalf("%d access lines, want 1:\n%s", len(lines), text)
			}
			if got := lines[0]["status"]; got != float64(tc.status) {
				t.Errorf("access log status %v, client got %d:\n%s", got, tc.status, text)
			}
		})
	}
}

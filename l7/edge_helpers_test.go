package l7

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lmwarden/lmwarden/agent/placement"
	"github.com/lmwarden/lmwarden/internal/testutil"
	"github.com/lmwarden/lmwarden/l7/http1"
)

// scripted is a keep-alive HTTP/1.1 "replica" that answers each request
// with what answer returns for its head (a whole raw response). A response
// that says "Connection: close", or has no framing, ends the connection.
// Request bodies are read by Content-Length or chunks and handed to answer.
type scripted struct {
	url      string
	accepted atomic.Int64 // connections accepted
	requests atomic.Int64 // request heads read
}

func mustScripted(tb testing.TB, answer func(h *http1.Head, body []byte) string) *scripted {
	tb.Helper()
	s := &scripted{}
	s.url = rawUpstream(tb, func(c net.Conn) {
		s.accepted.Add(1)
		br := bufio.NewReader(c)
		for {
			h, rest, err := http1.ReadHead(br, nil)
			if err != nil {
				return
			}
			s.requests.Add(1)
			// ReadHead read from br: whatever it read past the head is
			// rest; the body continues in br.
			r := io.MultiReader(strings.NewReader(string(rest)), br)
			var body []byte
			switch h.Framing {
			case http1.FramingLength:
				body = make([]byte, h.ContentLength)
				if _, err := io.ReadFull(r, body); err != nil {
					return
				}
			case http1.FramingChunked:
				if body, err = readChunkedBody(bufio.NewReader(r)); err != nil {
					return
				}
			}
			if len(rest) > len(body) && h.Framing != http1.FramingChunked {
				return // pipelining to a replica: not expected from the shim
			}
			resp := answer(h, body)
			if _, err := io.WriteString(c, resp); err != nil {
				return
			}
			if strings.Contains(strings.ToLower(resp), "connection: close") {
				return
			}
		}
	})
	return s
}

// readChunkedBody reads a chunked body with Go's own decoder (an
// independent parser, so the shim is checked against another one).
func readChunkedBody(r *bufio.Reader) ([]byte, error) {
	return io.ReadAll(httputil.NewChunkedReader(r))
}

// lengthResponse is a 200 with a Content-Length body.
func lengthResponse(body string, extra ...string) string {
	return fmt.Sprintf("HTTP/1.1 200 OK\r\n%sContent-Length: %d\r\n\r\n%s", strings.Join(extra, ""), len(body), body)
}

// rawRequest renders a request with a Host header and optional body.
func rawRequest(method, target, extra, body string) string {
	if body != "" {
		extra += fmt.Sprintf("Content-Length: %d\r\n", len(body))
	}
	return method + " " + target + " HTTP/1.1\r\nHost: warden\r\n" + extra + "\r\n" + body
}

// waitFor polls cond until it holds (the end of an exchange after an abort
// is asynchronous to the test) and fails after a generous bound.
func waitFor(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	testutil.Eventually(tb, 10*time.Second, what, cond)
}

// placedOn lists, per replica, how many requests the model placed there.
func placedOn(m *placement.Model) []uint64 {
	st := m.Status()
	out := make([]uint64, len(st.Replicas))
	for i, r := range st.Replicas {
		for _, n := range r.Requests {
			out[i] += n
		}
	}
	return out
}

// responseTo reads the head of the response to a request of method (a
// response to HEAD has no body whatever its Content-Length says), after
// the interim 1xx responses, whose statuses it returns too.
func (c *client) responseTo(method string) (resp *http.Response, interim []int, err error) {
	for {
		resp, err = http.ReadResponse(c.r, &http.Request{Method: method})
		if err != nil || resp.StatusCode >= 200 {
			return resp, interim, err
		}
		interim = append(interim, resp.StatusCode)
	}
}

// openConns is how many client connections the shim still serves.
func openConns(s *Shim) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}

// stillServed names, by their index in clients, the client connections the
// shim still serves (for a failure message).
func stillServed(s *Shim, clients []*client) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for c := range s.conns {
		for i, cl := range clients {
			if cl.LocalAddr().String() == c.RemoteAddr().String() {
				out = append(out, fmt.Sprint(i))
			}
		}
	}
	return "clients " + strings.Join(out, ", ")
}

// openSockets counts this process's open sockets (client, shim and
// replica sides alike, since all three live in the test process). Other
// descriptors are left out: Go keeps a pool of pipes for splice(2).
func openSockets(tb testing.TB) int {
	tb.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		tb.Fatal(err)
	}
	n := 0
	for _, e := range ents {
		if l, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil && strings.HasPrefix(l, "socket:") {
			n++
		}
	}
	return n
}

// resetClose closes c with a reset instead of a FIN (SO_LINGER 0), as a
// killed process or a crashed NAT does.
func resetClose(c *client) {
	if tc, ok := c.Conn.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	c.Close()
}

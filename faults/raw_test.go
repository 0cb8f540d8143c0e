package faults

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"
)

// rawConn is a client connection written byte by byte, for the requests
// no well-behaved client library would send.
type rawConn struct {
	net.Conn
	br *bufio.Reader
}

// dialFrom connects to the frontend from a local address of its own (any
// 127.0.0.0/8 address is local), so that tests can be several clients.
func dialFrom(tb testing.TB, src string) *rawConn {
	tb.Helper()
	d := net.Dialer{Timeout: 5 * time.Second}
	if src != "" {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(src)}
	}
	c, err := d.Dial("tcp", frontend)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Close() })
	return &rawConn{Conn: c, br: bufio.NewReader(c)}
}

// send writes s.
func (c *rawConn) send(tb testing.TB, s string) {
	tb.Helper()
	if _, err := io.WriteString(c, s); err != nil {
		tb.Fatal(err)
	}
}

// response reads one response (nil and the error if none came within
// timeout).
func (c *rawConn) response(timeout time.Duration) (*http.Response, []byte, error) {
	_ = c.SetReadDeadline(time.Now().Add(timeout))
	resp, err := http.ReadResponse(c.br, nil)
	if err != nil {
		return nil, nil, err
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, b, err
}

// closedByPeer reports, without waiting, an idle connection the server
// has closed (its FIN is there to read).
func (c *rawConn) closedByPeer() bool {
	_ = c.SetReadDeadline(time.Now().Add(time.Millisecond))
	_, err := c.br.Peek(1)
	_ = c.SetReadDeadline(time.Time{})
	return err != nil && !isTimeout(err)
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// postHead is the head of a POST /v1/messages with the given extra header
// lines and Content-Length.
func postHead(length int64, extra ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "POST /v1/messages HTTP/1.1\r\nHost: warden\r\nContent-Type: application/json\r\nContent-Length: %d\r\n", length)
	for _, h := range extra {
		b.WriteString(h + "\r\n")
	}
	b.WriteString("\r\n")
	return b.String()
}

// chunkedHead is the head of a POST /v1/messages with a chunked body.
func chunkedHead(extra ...string) string {
	var b strings.Builder
	b.WriteString("POST /v1/messages HTTP/1.1\r\nHost: warden\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n")
	for _, h := range extra {
		b.WriteString(h + "\r\n")
	}
	b.WriteString("\r\n")
	return b.String()
}

// turn sends one whole non-streamed request on c and reads its answer.
func (c *rawConn) turn(tb testing.TB, session string, extra ...string) (*http.Response, error) {
	tb.Helper()
	b := []byte(fmt.Sprintf(`{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"hi from %s"}]}`, session))
	extra = append(extra, "X-Claude-Code-Session-Id: "+session)
	if _, err := io.WriteString(c, postHead(int64(len(b)), extra...)+string(b)); err != nil {
		return nil, err
	}
	resp, _, err := c.response(30 * time.Second)
	return resp, err
}

// classify names a client-side error the way a user would report it.
func classify(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, syscall.EPIPE):
		return "broken pipe"
	case errors.Is(err, syscall.ECONNRESET):
		return "reset"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "refused"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "closed before an answer"
	}
	if isTimeout(err) {
		return "timeout"
	}
	return err.Error()
}

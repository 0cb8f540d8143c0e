package http1

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
	"time"
)

func TestReadHeadParsesRequestAndKeepsHeaderOrderAndCase(t *testing.T) {
	in := "POST /v1/messages?beta=true HTTP/1.1\r\nHost: x\r\nX-Claude-Code-Session-Id: abc\r\ncontent-LENGTH: 5\r\nX-B: 1\r\n\r\nhello"
	h, rest, err := ReadHead(strings.NewReader(in), nil)
	if err != nil {
		t.Fatal(err)
	}
	if h.Method != "POST" || h.Target != "/v1/messages?beta=true" || h.Version != "HTTP/1.1" {
		t.Fatalf("request line: %+v", h)
	}
	want := []Header{{"Host", "x"}, {"X-Claude-Code-Session-Id", "abc"}, {"content-LENGTH", "5"}, {"X-B", "1"}}
	if len(h.Headers) != len(want) {
		t.Fatalf("headers %v", h.Headers)
	}
	for i := range want {
		if h.Headers[i] != want[i] {
			t.Fatalf("header %d: %v, want %v", i, h.Headers[i], want[i])
		}
	}
	if h.Framing != FramingLength || h.ContentLength != 5 || !h.KeepAlive {
		t.Fatalf("framing %v len %d keepalive %v", h.Framing, h.ContentLength, h.KeepAlive)
	}
	if string(rest) != "hello" || h.Size != len(in)-5 {
		t.Fatalf("rest %q size %d", rest, h.Size)
	}
}

func TestReadHeadReturnsOverReadBytesExplicitly(t *testing.T) {
	// Two pipelined requests in one read: the second must come back as rest.
	in := "GET /a HTTP/1.1\r\nHost: x\r\n\r\nGET /b HTTP/1.1\r\nHost: x\r\n\r\n"
	h, rest, err := ReadHead(strings.NewReader(in), nil)
	if err != nil || h.Target != "/a" {
		t.Fatal(h, err)
	}
	h2, rest2, err := ReadHead(strings.NewReader(""), rest)
	if err != nil || h2.Target != "/b" || len(rest2) != 0 {
		t.Fatal(h2, rest2, err)
	}
}

func TestReadHeadKeepAliveSemantics(t *testing.T) {
	cases := []struct {
		version, conn string
		want          bool
	}{
		{"HTTP/1.1", "", true},
		{"HTTP/1.1", "Connection: close\r\n", false},
		{"HTTP/1.1", "Connection: keep-alive, Close\r\n", false},
		{"HTTP/1.0", "", false},
		{"HTTP/1.0", "Connection: keep-alive\r\n", true},
	}
	for _, c := range cases {
		h, _, err := ReadHead(strings.NewReader("GET / "+c.version+"\r\nHost: x\r\n"+c.conn+"\r\n"), nil)
		if err != nil {
			t.Fatal(err)
		}
		if h.KeepAlive != c.want {
			t.Errorf("%s %q: keep-alive %v, want %v", c.version, c.conn, h.KeepAlive, c.want)
		}
	}
}

func TestReadHeadRejectsSmugglingAndMalformedHeads(t *testing.T) {
	const host = "Host: x\r\n"
	cases := map[string]struct {
		in   string
		want error
	}{
		"cl and te":             {"POST / HTTP/1.1\r\n" + host + "Content-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n", ErrBadFraming},
		"differing cl":          {"POST / HTTP/1.1\r\n" + host + "Content-Length: 3\r\nContent-Length: 4\r\n\r\n", ErrBadFraming},
		"cl list differing":     {"POST / HTTP/1.1\r\n" + host + "Content-Length: 3, 4\r\n\r\n", ErrBadFraming},
		"negative cl":           {"POST / HTTP/1.1\r\n" + host + "Content-Length: -1\r\n\r\n", ErrBadFraming},
		"plus cl":               {"POST / HTTP/1.1\r\n" + host + "Content-Length: +1\r\n\r\n", ErrBadFraming},
		"te gzip":               {"POST / HTTP/1.1\r\n" + host + "Transfer-Encoding: gzip, chunked\r\n\r\n", ErrBadFraming},
		"te twice":              {"POST / HTTP/1.1\r\n" + host + "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n", ErrBadFraming},
		"te in 1.0":             {"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", ErrBadFraming},
		"space before colon":    {"GET / HTTP/1.1\r\n" + host + "Content-Length : 3\r\n\r\n", ErrMalformedHead},
		"obs fold":              {"GET / HTTP/1.1\r\n" + host + "X-A: 1\r\n continued\r\n\r\n", ErrMalformedHead},
		"bare lf":               {"GET / HTTP/1.1\n" + host + "\r\n\r\n", ErrMalformedHead},
		"no host":               {"GET / HTTP/1.1\r\n\r\n", ErrMalformedHead},
		"two hosts":             {"GET / HTTP/1.1\r\n" + host + host + "\r\n", ErrMalformedHead},
		"http/2":                {"GET / HTTP/2.0\r\n" + host + "\r\n", ErrHTTPVersion},
		"http/2 preface":        {"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", ErrHTTPVersion},
		"http/0.9":              {"GET /\r\n\r\n", ErrMalformedHead},
		"version junk":          {"GET / HTTP/1.1x\r\n" + host + "\r\n", ErrMalformedHead},
		"no colon":              {"GET / HTTP/1.1\r\n" + host + "X-A\r\n\r\n", ErrMalformedHead},
		"bare lf only":          {"GET / HTTP/1.1\nHost: x\n\n", ErrMalformedHead},
		"bare lf, no end yet":   {"GET / HTTP/1.1\nHost: x\n", ErrMalformedHead},
		"bad method":            {"G(T / HTTP/1.1\r\n" + host + "\r\n", ErrMalformedHead},
		"nul in value":          {"GET / HTTP/1.1\r\n" + host + "X-A: a\x00b\r\n\r\n", ErrMalformedHead},
		"expect other":          {"GET / HTTP/1.1\r\n" + host + "Expect: 200-ok\r\n\r\n", ErrMalformedHead},
		"eof mid head":          {"GET / HTTP/1.1\r\nHo", ErrMalformedHead},
		"too many header lines": {"GET / HTTP/1.1\r\n" + host + strings.Repeat("X-A: 1\r\n", MaxHeaderLines) + "\r\n", ErrHeadTooLarge},
		"too many bytes":        {"GET / HTTP/1.1\r\n" + host + "X-A: " + strings.Repeat("a", MaxHeadBytes) + "\r\n\r\n", ErrHeadTooLarge},
		"endless head":          {"GET / HTTP/1.1\r\nX-A: " + strings.Repeat("a", 2*MaxHeadBytes), ErrHeadTooLarge},
	}
	for name, c := range cases {
		_, _, err := ReadHead(iotest.HalfReader(strings.NewReader(c.in)), nil)
		if !errors.Is(err, c.want) {
			t.Errorf("%s: err %v, want %v", name, err, c.want)
		}
	}
}

func TestReadHeadAcceptsEqualDuplicateContentLengthAndChunked(t *testing.T) {
	h, _, err := ReadHead(strings.NewReader("POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 7, 7\r\ncontent-length: 7\r\n\r\n"), nil)
	if err != nil || h.Framing != FramingLength || h.ContentLength != 7 {
		t.Fatal(h, err)
	}
	h, _, err = ReadHead(strings.NewReader("POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: Chunked\r\nExpect: 100-continue\r\n\r\n"), nil)
	if err != nil || h.Framing != FramingChunked || !h.ExpectContinue {
		t.Fatal(h, err)
	}
}

func TestReadHeadServesLaterHTTP1MinorsAs11AndIgnoresExpectFrom10(t *testing.T) {
	h, _, err := ReadHead(strings.NewReader("GET / HTTP/1.2\r\nHost: x\r\n\r\n"), nil)
	if err != nil || h.Version != "HTTP/1.1" {
		t.Fatal(h, err)
	}
	h, _, err = ReadHead(strings.NewReader("POST / HTTP/1.0\r\nExpect: 100-continue\r\nContent-Length: 1\r\n\r\nx"), nil)
	if err != nil || h.ExpectContinue {
		t.Fatalf("HTTP/1.0 expectation honoured: %+v %v", h, err)
	}
}

func TestReadHeadCleanEOFBeforeFirstByte(t *testing.T) {
	if _, _, err := ReadHead(strings.NewReader(""), nil); err != io.EOF {
		t.Fatalf("err %v, want io.EOF", err)
	}
	// A stray CRLF after a previous body is not a request.
	if _, _, err := ReadHead(strings.NewReader("\r\n"), nil); err != io.EOF {
		t.Fatalf("err %v, want io.EOF", err)
	}
}

func TestHeadErrorStatusMapsErrors(t *testing.T) {
	for err, want := range map[error]int{
		ErrMalformedHead: 400, ErrBadFraming: 400, ErrHeadTooLarge: 431, ErrHeadTimeout: 408, ErrHTTPVersion: 505, io.EOF: 0,
	} {
		if got := HeadErrorStatus(err); got != want {
			t.Errorf("%v: %d, want %d", err, got, want)
		}
	}
}

// FuzzReadHead feeds arbitrary bytes, split into reads of a fuzzed size.
// Properties: no panic; a parsed head respects the limits; the head plus
// rest is exactly the input prefix that was consumed (no byte hidden or
// invented); and the parsed head, rendered again, parses to the same thing.
func FuzzReadHead(f *testing.F) {
	seeds := []string{
		"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
		"POST /v1/messages?beta=true HTTP/1.1\r\nHost: a\r\nX-Claude-Code-Session-Id: s\r\nContent-Length: 2\r\n\r\n{}",
		"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n0\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n",
		"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
		"\r\n\r\nGET / HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 1, 1\r\n\r\nx",
	}
	for _, s := range seeds {
		f.Add(uint8(7), []byte(s))
	}
	f.Fuzz(func(t *testing.T, chunk uint8, in []byte) {
		r := &chunkReader{b: in, n: int(chunk%64) + 1}
		h, rest, err := ReadHead(r, nil)
		if err != nil {
			if HeadErrorStatus(err) == 0 && err != io.EOF {
				t.Fatalf("unmapped error %v", err)
			}
			return
		}
		if h.Size > MaxHeadBytes || len(h.Headers) > MaxHeaderLines {
			t.Fatalf("limits exceeded: size %d headers %d", h.Size, len(h.Headers))
		}
		consumed := len(in) - len(r.b)
		if h.Size+len(rest) != consumed || !bytes.Equal(rest, in[h.Size:consumed]) {
			t.Fatalf("head %d + rest %d != consumed %d", h.Size, len(rest), consumed)
		}
		if h.Framing == FramingChunked && h.ContentLength != 0 {
			t.Fatalf("chunked with a content length")
		}
		again, _, err := ReadHead(bytes.NewReader(renderHead(h)), nil)
		if err != nil {
			t.Fatalf("rendered head does not parse: %v\n%q", err, renderHead(h))
		}
		if again.Framing != h.Framing || again.ContentLength != h.ContentLength || again.KeepAlive != h.KeepAlive || len(again.Headers) != len(h.Headers) {
			t.Fatalf("round trip differs: %+v vs %+v", again, h)
		}
	})
}

func renderHead(h *Head) []byte {
	var b bytes.Buffer
	b.WriteString(h.Method + " " + h.Target + " " + h.Version + "\r\n")
	for _, f := range h.Headers {
		b.WriteString(f.Name + ": " + f.Value + "\r\n")
	}
	b.WriteString("\r\n")
	return b.Bytes()
}

// chunkReader returns at most n bytes a read.
type chunkReader struct {
	b []byte
	n int
}

func (c *chunkReader) Read(p []byte) (int, error) {
	if len(c.b) == 0 {
		return 0, io.EOF
	}
	k := min(len(p), c.n, len(c.b))
	copy(p, c.b[:k])
	c.b = c.b[k:]
	return k, nil
}

// A request line no HTTP/1.x head starts with is refused as soon as it is
// whole: the reader below would block forever after it.
func TestRequestLineIsJudgedWhenItEnds(t *testing.T) {
	for _, line := range []string{"GET /\r\n", "\r\nGET /\r\n", "hello\r\n", "GET / HTTP/2.0\r\n"} {
		r, w := io.Pipe()
		go w.Write([]byte(line))
		done := make(chan error, 1)
		go func() { _, _, err := ReadHead(r, nil); done <- err }()
		select {
		case err := <-done:
			if HeadErrorStatus(err) == 0 {
				t.Errorf("%q: %v, want a refusal", line, err)
			}
		case <-time.After(10 * time.Second):
			t.Errorf("%q: ReadHead waits for more", line)
		}
		r.Close()
	}
}

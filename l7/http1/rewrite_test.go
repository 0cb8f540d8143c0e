package http1

import (
	"strings"
	"testing"
)

func mustHead(tb testing.TB, s string) *Head {
	tb.Helper()
	h, _, err := ReadHead(strings.NewReader(s), nil)
	if err != nil {
		tb.Fatal(err)
	}
	return h
}

func TestUpstreamHeadKeepsOrderAndCaseAndDropsHopByHop(t *testing.T) {
	h := mustHead(t, "POST /v1/messages?beta=true HTTP/1.1\r\n"+
		"Host: warden:8000\r\nx-api-key: k\r\nConnection: keep-alive, X-Hop\r\nX-Hop: 1\r\n"+
		"Keep-Alive: timeout=5\r\nExpect: 100-continue\r\nX-Warden-Replica: 2\r\n"+
		"X-data-parallel-rank: 9\r\nContent-Length: 2\r\nX-Claude-Code-Session-Id: s\r\n\r\n")
	got := string(UpstreamHead(h, 3, "127.0.0.1:8100"))
	want := "POST /v1/messages?beta=true HTTP/1.1\r\n" +
		"Host: warden:8000\r\nx-api-key: k\r\nContent-Length: 2\r\nX-Claude-Code-Session-Id: s\r\n" +
		"X-data-parallel-rank: 3\r\n\r\n"
	if got != want {
		t.Fatalf("got\n%q\nwant\n%q", got, want)
	}
}

func TestUpstreamHeadWithoutRankDropsTheClientRankAndAddsHostFor10(t *testing.T) {
	h := mustHead(t, "GET /health HTTP/1.0\r\nX-data-parallel-rank: 1\r\n\r\n")
	got := string(UpstreamHead(h, -1, "127.0.0.1:8100"))
	want := "GET /health HTTP/1.1\r\nHost: 127.0.0.1:8100\r\n\r\n"
	if got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
}

func TestUpstreamHeadCarriesOneContentLength(t *testing.T) {
	h := mustHead(t, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 007, 7\r\nX-A: 1\r\ncontent-length: 7\r\n\r\n")
	got := string(UpstreamHead(h, -1, "127.0.0.1:8100"))
	want := "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 7\r\nX-A: 1\r\n\r\n"
	if got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
}

func TestClientResponseHeadSaysCloseWhenTheConnectionEnds(t *testing.T) {
	raw := "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: keep-alive\r\nTransfer-Encoding: chunked\r\n\r\n"
	r, err := ParseResponseHead([]byte(raw), "POST")
	if err != nil {
		t.Fatal(err)
	}
	if r.Framing != FramingChunked || !r.Reusable {
		t.Fatalf("framing %v reusable %v", r.Framing, r.Reusable)
	}
	keep := string(ClientResponseHead(r, "HTTP/1.1", true, false))
	if keep != "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n" {
		t.Fatalf("keep-alive head %q", keep)
	}
	closing := string(ClientResponseHead(r, "HTTP/1.1", false, false))
	if !strings.HasSuffix(closing, "Connection: close\r\n\r\n") {
		t.Fatalf("closing head %q", closing)
	}
}

func TestResponseFramingRules(t *testing.T) {
	cases := []struct {
		raw, method string
		framing     Framing
		reusable    bool
	}{
		{"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n", "GET", FramingLength, true},
		{"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n", "HEAD", FramingNone, true},
		{"HTTP/1.1 204 No Content\r\n\r\n", "GET", FramingNone, true},
		{"HTTP/1.1 200 OK\r\n\r\n", "GET", FramingClose, false},
		{"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\n", "GET", FramingLength, false},
		{"HTTP/1.0 200 OK\r\nContent-Length: 5\r\n\r\n", "GET", FramingLength, false},
		{"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n", "GET", FramingClose, false},
	}
	for _, c := range cases {
		r, err := ParseResponseHead([]byte(c.raw), c.method)
		if err != nil {
			t.Fatalf("%q: %v", c.raw, err)
		}
		if r.Framing != c.framing || r.Reusable != c.reusable {
			t.Errorf("%q %s: framing %v reusable %v, want %v %v", c.raw, c.method, r.Framing, r.Reusable, c.framing, c.reusable)
		}
	}
	for _, bad := range []string{
		"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n",
		"HTTP/1.1 2x0 OK\r\n\r\n",
		"ICY 200 OK\r\n\r\n",
	} {
		if _, err := ParseResponseHead([]byte(bad), "GET"); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

package maps

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// The upstream is a real net/http server: POST /sse streams 256 events
// (chunked, one flush each), GET /cl answers with a Content-Length body.
// Each response names the replica and the sha256 of the request body it
// received, so the client can check that the body crossed intact.
const sseEvents = 256

func sseEvent(replica, i int, sum string) string {
	return fmt.Sprintf("data: {\"replica\":%d,\"i\":%d,\"body\":\"%s\",\"pad\":\"%s\"}\n\n",
		replica, i, sum, strings.Repeat("x", 64+i%32))
}

func mustUpstream(tb testing.TB, replica int) string {
	tb.Helper()
	ln := mustListen(tb, "127.0.0.1:0")
	mux := http.NewServeMux()
	mux.HandleFunc("/sse", func(w http.ResponseWriter, r *http.Request) {
		h := sha256.New()
		io.Copy(h, r.Body)
		sum := hex.EncodeToString(h.Sum(nil))
		w.Header().Set("Content-Type", "text/event-stream")
		fl := w.(http.Flusher)
		for i := range sseEvents {
			io.WriteString(w, sseEvent(replica, i, sum))
			fl.Flush()
		}
	})
	mux.HandleFunc("/cl", func(w http.ResponseWriter, r *http.Request) {
		h := sha256.New()
		io.Copy(h, r.Body)
		body := fmt.Sprintf("replica=%d body=%s pad=%s\n", replica, hex.EncodeToString(h.Sum(nil)), strings.Repeat("y", 100<<10))
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		io.WriteString(w, body)
	})
	srv := &http.Server{Handler: mux}
	go srv.Serve(ln)
	tb.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

// head is one parsed request head, raw bytes kept to forward as is.
type head struct {
	raw     []byte
	method  string
	length  int64
	session string
}

func readHead(br *bufio.Reader) (head, error) {
	var h head
	for {
		line, err := br.ReadSlice('\n')
		if err != nil {
			return h, err
		}
		h.raw = append(h.raw, line...)
		s := strings.TrimRight(string(line), "\r\n")
		if s == "" {
			return h, nil
		}
		if h.method == "" {
			h.method, _, _ = strings.Cut(s, " ")
			continue
		}
		k, v, _ := strings.Cut(s, ":")
		v = strings.TrimSpace(v)
		switch strings.ToLower(k) {
		case "content-length":
			h.length, _ = strconv.ParseInt(v, 10, 64)
		case "x-claude-code-session-id":
			h.session = v
		}
	}
}

// testShim does what l7's kernel data path does, with the smallest HTTP
// handling that shows the handoff: read a head, pick an upstream by
// session, write the head, let the kernel carry the rest, wait for the
// response's end, read the next head from what the kernel passes.
type testShim struct {
	s         *State
	upstreams []string
	route     func(session string) int
	mu        sync.Mutex
	requests  []int // replica chosen per request, in order
	ends      int
	errs      []error
}

func mustShim(tb testing.TB, s *State, upstreams []string) (front string, sh *testShim) {
	tb.Helper()
	ln := mustListen(tb, "127.0.0.1:0")
	ap := netip.MustParseAddrPort("127.0.0.1:8000")
	if err := s.AddFrontend(ap, ln, false); err != nil {
		tb.Fatal(err)
	}
	sh = &testShim{s: s, upstreams: upstreams, route: func(sess string) int {
		if sess == "" {
			return 0
		}
		return int(sess[len(sess)-1]) % len(upstreams)
	}}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go sh.serve(c.(*net.TCPConn))
		}
	}()
	return ap.String(), sh
}

func (sh *testShim) fail(err error) {
	sh.mu.Lock()
	sh.errs = append(sh.errs, err)
	sh.mu.Unlock()
}

func (sh *testShim) serve(c *net.TCPConn) {
	pr, err := NewPeekReader(c)
	if err != nil {
		sh.fail(err)
		c.Close()
		return
	}
	br := bufio.NewReaderSize(pr, 4096)
	h, err := readHead(br)
	if err != nil {
		c.Close()
		return
	}
	var body []byte // body bytes the shim holds: none, it only peeked
	p, err := sh.s.NewPair(c, uint64(len(h.raw)), 0, nil)
	if err != nil {
		sh.fail(err)
		c.Close()
		return
	}
	br = bufio.NewReaderSize(p, 4096)
	defer p.Close()
	var up *net.TCPConn
	upReplica := -1
	for {
		r := sh.route(h.session)
		if r != upReplica {
			d := net.Dialer{}
			d.SetMultipathTCP(false)
			uc, err := d.Dial("tcp", sh.upstreams[r])
			if err != nil {
				sh.fail(err)
				return
			}
			up, upReplica = uc.(*net.TCPConn), r
		}
		sh.mu.Lock()
		sh.requests = append(sh.requests, r)
		sh.mu.Unlock()
		if err := p.StartRequest(up, uint32(r), h.method == "HEAD"); err != nil {
			sh.fail(err)
			return
		}
		if _, err := p.WriteUpstream(h.raw); err != nil {
			sh.fail(err)
			return
		}
		if len(body) > 0 {
			if _, err := p.WriteUpstream(body); err != nil {
				sh.fail(err)
				return
			}
		}
		if err := p.CarryBody(uint64(h.length) - uint64(len(body))); err != nil {
			sh.fail(err)
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_, err := p.WaitResponse(ctx)
		cancel()
		if err != nil {
			if !errors.Is(err, ErrClientGone) && !errors.Is(err, ErrUpstreamClosed) {
				sh.fail(fmt.Errorf("wait response: %w", err))
			}
			return
		}
		sh.mu.Lock()
		sh.ends++
		sh.mu.Unlock()
		h, err = readHead(br)
		if err != nil {
			return // client closed
		}
		n := min(int64(br.Buffered()), h.length)
		body = make([]byte, n)
		io.ReadFull(br, body)
	}
}

func (sh *testShim) check(tb testing.TB) {
	tb.Helper()
	sh.mu.Lock()
	defer sh.mu.Unlock()
	for _, err := range sh.errs {
		tb.Error("shim:", err)
	}
}

// request writes one request head and a body of n bytes produced by fill
// (which may write it in pieces), then reads and checks the response.
func request(tb testing.TB, c *net.TCPConn, br *bufio.Reader, path, session string, body []byte, write func(w io.Writer, b []byte) error) (replica int) {
	tb.Helper()
	method := "POST"
	fmt.Fprintf(c, "%s %s HTTP/1.1\r\nHost: warden\r\nX-Claude-Code-Session-Id: %s\r\nContent-Length: %d\r\n\r\n", method, path, session, len(body))
	if write == nil {
		write = func(w io.Writer, b []byte) error { _, err := w.Write(b); return err }
	}
	errc := make(chan error, 1)
	go func() { errc <- write(c, body) }()
	c.SetReadDeadline(time.Now().Add(60 * time.Second))
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		tb.Fatalf("%s: read response: %v", path, err)
	}
	got, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		tb.Fatalf("%s: read response body: %v", path, err)
	}
	if err := <-errc; err != nil {
		tb.Fatalf("write body: %v", err)
	}
	sum := sha256.Sum256(body)
	want := hex.EncodeToString(sum[:])
	if path == "/sse" {
		replica = -1
		evs := strings.SplitAfter(string(got), "\n\n")
		evs = evs[:len(evs)-1]
		if len(evs) != sseEvents {
			tb.Fatalf("got %d events, want %d", len(evs), sseEvents)
		}
		for r := range 8 {
			if strings.HasPrefix(evs[0], fmt.Sprintf("data: {\"replica\":%d,", r)) {
				replica = r
			}
		}
		for i, ev := range evs {
			if ev != sseEvent(replica, i, want) {
				tb.Fatalf("event %d differs (body checksum or order):\n got %.120q\nwant %.120q", i, ev, sseEvent(replica, i, want))
			}
		}
		return replica
	}
	if _, err := fmt.Sscanf(string(got), "replica=%d", &replica); err != nil {
		tb.Fatalf("bad /cl response %.80q", got)
	}
	if !strings.Contains(string(got), "body="+want) {
		tb.Fatalf("/cl: body checksum differs")
	}
	return replica
}

func payload(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte('a' + (i*7+i/251)%26)
	}
	return b
}

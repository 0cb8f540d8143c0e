package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/lmwarden/lmwarden/agent/config"
	"github.com/lmwarden/lmwarden/agent/placement"
	"github.com/lmwarden/lmwarden/kernel"
	"github.com/lmwarden/lmwarden/l7"
	"github.com/lmwarden/lmwarden/l7/datapath"
)

// The self-test proves a kernel datapath on this host's kernel before
// the warden trusts it with clients (docs/kernel.md, "Proving a
// datapath"): a loaded datapath can still lose bytes or never finish an
// exchange on a kernel whose sockmap code differs from the ones it was
// tested on (6.12's msg did). It runs the real programs, a real shim and
// a real replica on loopback, through the same datapath object serve
// will use: a request with a body and a streamed (chunked) response of
// some hundreds of kilobytes, a second request on the same keep-alive
// connection with a Content-Length response, a client that resets its
// connection mid-stream, and a request on a new connection after it.
// Every body is checked byte for byte, every response for its end (the
// client's parser finds it, and the shim counted the exchange done), all
// within a bound.

// Sizes of the self-test's responses.
const (
	selfTestEvents    = 160      // stream events of selfTestEventLen bytes: 320 KiB
	selfTestEventLen  = 2048     //
	selfTestLength    = 200_000  // the Content-Length response
	selfTestSlowAfter = 32 << 10 // the resetting client reads this much, then resets
)

// selfTestModel names the self-test's model in the datapath's counters,
// which forget it when the self-test ends.
const selfTestModel = "lmwarden-selftest"

// selfTestBound bounds each step of the self-test: generous, since a
// slow machine (a VM under emulation) must not fail a datapath that
// works; a datapath that stalls takes it whole to be refused.
var selfTestBound = 20 * time.Second

// selfTestEvent is the i-th event of the streamed response, a pattern
// the client can recompute.
func selfTestEvent(i int) []byte {
	head := fmt.Sprintf("data: {\"i\":%d,\"text\":\"", i)
	b := make([]byte, 0, selfTestEventLen)
	b = append(b, head...)
	for len(b) < selfTestEventLen-4 {
		b = append(b, byte('a'+(len(b)+i)%26))
	}
	return append(b, "\"}\n\n"...)
}

// selfTestBody is the Content-Length response's body.
func selfTestBody() []byte {
	b := make([]byte, selfTestLength)
	for i := range b {
		b[i] = byte('A' + (i*7)%26)
	}
	return b
}

// selfTestReplica answers the self-test's requests: /stream (the request
// body's length first, then the events, flushed one by one), /length, and
// /slow (events 2 ms apart until the client is gone).
func selfTestReplica() http.Handler {
	body := selfTestBody()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		f := w.(http.Flusher)
		switch r.URL.Path {
		case "/stream":
			w.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprintf(w, "data: {\"request_bytes\":%d}\n\n", n)
			for i := range selfTestEvents {
				w.Write(selfTestEvent(i))
				f.Flush()
			}
		case "/length":
			w.Header().Set("Content-Length", strconv.Itoa(len(body)))
			w.Write(body)
		case "/slow":
			w.Header().Set("Content-Type", "text/event-stream")
			for i := 0; i < 20_000; i++ {
				if _, err := w.Write(selfTestEvent(i)); err != nil {
					return
				}
				f.Flush()
				time.Sleep(2 * time.Millisecond)
			}
		}
	})
}

// selfTest runs the self-test over the kernel datapath p; the error says
// which step failed and how.
func selfTest(p *kernel.Path) (selfTestProof, error) {
	if err := p.ProbePairing(); err != nil {
		return selfTestProof{}, fmt.Errorf("self-test: %w", err) // msg on a kernel that carries none of it
	}
	upLn, err := l7.Listen("127.0.0.1:0")
	if err != nil {
		return selfTestProof{}, err
	}
	srv := &http.Server{Handler: selfTestReplica(), ErrorLog: nil}
	go srv.Serve(upLn)
	defer srv.Close()
	m, err := placement.NewModel(config.ModelConfig{
		Name: selfTestModel, Frontend: "127.0.0.1:0", Replicas: []string{"http://" + upLn.Addr().String()},
		Affinity: true, SpillThreshold: config.SpillThreshold{N: 8},
		SessionHeaders: config.DefaultSessionHeaders, SessionTTL: time.Minute,
		Policy: config.PolicySticky, VLLMLBStats: "fresh",
	}, placement.ModelOptions{})
	if err != nil {
		return selfTestProof{}, err
	}
	ups := l7.NewUpstreams(3*time.Second, 4*time.Second, 4)
	ups.SetDial(p.Upstreams.DialTCP)
	defer ups.Close()
	shim := l7.NewShim(m, l7.Options{Datapath: p.Datapath, Upstreams: ups,
		ResponseTimeout: selfTestBound, BodyTimeout: selfTestBound, ShutdownTimeout: 2 * time.Second,
		Logger: slog.New(slog.DiscardHandler)})
	ln, err := l7.Listen("127.0.0.1:0")
	if err != nil {
		return selfTestProof{}, err
	}
	done := make(chan error, 1)
	go func() { done <- shim.Serve(ln) }()
	defer func() { shim.Close(); <-done }()
	st := selfTestRun{addr: ln.Addr().String(), m: m}
	err = st.run()
	proof := selfTestProof{exchanges: st.exchanges, bytes: st.bytes}
	if c, ok := p.Datapath.(selfTestCounts); ok {
		proof.kernel, _ = kernel.Share(c.Counts())
		c.ForgetModel(selfTestModel) // not a served model's counts
	}
	if err != nil {
		return proof, err
	}
	if fb, ok := p.Datapath.(interface{ Fallback() (string, uint64) }); ok {
		if why, _ := fb.Fallback(); why != "" {
			return proof, fmt.Errorf("self-test: %s", why)
		}
	}
	if proof.kernel == 0 {
		// Correct, but the shim relayed everything: a datapath that
		// costs what user does and carries nothing (on 7.3 the
		// replica's end of the warden's connections never paired).
		return proof, fmt.Errorf("self-test: the kernel carried no byte of %d exchanges (on msg: the replica's end of the warden's connections did not pair)", proof.exchanges)
	}
	return proof, nil
}

// selfTestCounts is what the kernel datapaths count (kernel/counters.go).
type selfTestCounts interface {
	Counts() map[datapath.ReplicaKey]kernel.Counts
	ForgetModel(string)
}

// selfTestProof is what a passed self-test found.
type selfTestProof struct {
	exchanges int
	bytes     int64  // response bytes the client checked
	kernel    uint64 // bytes the kernel carried socket to socket
}

func (p selfTestProof) String() string {
	return fmt.Sprintf("self-test passed: %d exchanges, %d response bytes checked, %d bytes carried by the kernel", p.exchanges, p.bytes, p.kernel)
}

// selfTestRun is the client side of one self-test.
type selfTestRun struct {
	addr      string
	m         *placement.Model
	exchanges int
	bytes     int64
}

func (s *selfTestRun) run() error {
	c, err := s.dial()
	if err != nil {
		return err
	}
	defer c.Close()
	br := bufio.NewReader(c)
	reqBody := bytes.Repeat([]byte("a long agent history. "), 3000)
	if err := s.exchange(c, br, "POST", "/stream", reqBody, s.streamWant(len(reqBody))); err != nil {
		return fmt.Errorf("self-test: a streamed response: %w", err)
	}
	if err := s.exchange(c, br, "GET", "/length", nil, selfTestBody()); err != nil {
		return fmt.Errorf("self-test: a second request on the same keep-alive connection: %w", err)
	}
	if err := s.resetMidStream(); err != nil {
		return fmt.Errorf("self-test: a client that resets mid-stream: %w", err)
	}
	c2, err := s.dial()
	if err != nil {
		return err
	}
	defer c2.Close()
	if err := s.exchange(c2, bufio.NewReader(c2), "GET", "/length", nil, selfTestBody()); err != nil {
		return fmt.Errorf("self-test: a request after a client's reset: %w", err)
	}
	return nil
}

func (s *selfTestRun) dial() (*net.TCPConn, error) {
	d := net.Dialer{Timeout: selfTestBound}
	d.SetMultipathTCP(false)
	c, err := d.Dial("tcp", s.addr)
	if err != nil {
		return nil, err
	}
	return c.(*net.TCPConn), nil
}

// streamWant is the /stream response's body for a request body of n bytes.
func (s *selfTestRun) streamWant(n int) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "data: {\"request_bytes\":%d}\n\n", n)
	for i := range selfTestEvents {
		b.Write(selfTestEvent(i))
	}
	return b.Bytes()
}

// exchange sends one request on c and checks its response: status 200,
// the body byte for byte, its end where the framing says, and the shim
// done with the exchange (its in-flight count back to zero).
func (s *selfTestRun) exchange(c *net.TCPConn, br *bufio.Reader, method, path string, body, want []byte) error {
	_ = c.SetDeadline(time.Now().Add(selfTestBound))
	defer c.SetDeadline(time.Time{})
	req := fmt.Sprintf("%s %s HTTP/1.1\r\nHost: selftest\r\nX-Session-Id: selftest\r\nContent-Length: %d\r\n\r\n", method, path, len(body))
	if _, err := c.Write(append([]byte(req), body...)); err != nil {
		return err
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return fmt.Errorf("response head: %w", err)
	}
	got, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return fmt.Errorf("status %d, %d of %d body bytes, then %w (the response's end never came)", resp.StatusCode, len(got), len(want), err)
	}
	if resp.StatusCode != 200 || !bytes.Equal(got, want) {
		return fmt.Errorf("status %d, %d body bytes (%s), want 200 and %d bytes", resp.StatusCode, len(got), firstDiff(got, want), len(want))
	}
	s.exchanges++
	s.bytes += int64(len(got))
	return s.waitDone()
}

// firstDiff says where got first differs from want.
func firstDiff(got, want []byte) string {
	for i := range min(len(got), len(want)) {
		if got[i] != want[i] {
			return fmt.Sprintf("first difference at byte %d", i)
		}
	}
	return "one is a prefix of the other"
}

// waitDone waits until the shim counts no exchange in flight: the client
// having the whole response is not enough, the shim must have seen its
// end too (the next request on the connection waits for that).
func (s *selfTestRun) waitDone() error {
	deadline := time.Now().Add(selfTestBound)
	for s.m.Status().InFlight != 0 {
		if time.Now().After(deadline) {
			return fmt.Errorf("the client had the whole response, but the shim did not see it end within %s", selfTestBound)
		}
		time.Sleep(time.Millisecond)
	}
	return nil
}

// resetMidStream starts a long stream, reads part of it and resets the
// connection; the shim must end that exchange.
func (s *selfTestRun) resetMidStream() error {
	c, err := s.dial()
	if err != nil {
		return err
	}
	_ = c.SetDeadline(time.Now().Add(selfTestBound))
	if _, err := io.WriteString(c, "GET /slow HTTP/1.1\r\nHost: selftest\r\nX-Session-Id: selftest\r\n\r\n"); err != nil {
		c.Close()
		return err
	}
	if _, err := io.ReadFull(c, make([]byte, selfTestSlowAfter)); err != nil {
		c.Close()
		return fmt.Errorf("reading the stream: %w", err)
	}
	_ = c.SetLinger(0)
	c.Close()
	s.exchanges++
	return s.waitDone()
}

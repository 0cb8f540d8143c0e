package l7

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"

	"github.com/lmwarden/lmwarden/agent/config"
	"github.com/lmwarden/lmwarden/agent/placement"
	"github.com/lmwarden/lmwarden/internal/testnet"
	"github.com/lmwarden/lmwarden/internal/testutil"
	"github.com/lmwarden/lmwarden/l7/http1"
	"github.com/lmwarden/lmwarden/sim"
)

// mustSim starts the simulated replicas (fast clock) and stops them at the
// end of the test.
func mustSim(tb testing.TB, replicas int, shape string) *sim.Servers {
	tb.Helper()
	sv, err := sim.Serve(context.Background(), sim.ServerConfig{
		Replicas: replicas, Listen: "127.0.0.1:0", Shape: shape, Speed: 200,
	})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { sv.Close() })
	return sv
}

// modelConfig is a sticky model over the given replica URLs (shape 1).
func modelConfig(urls ...string) config.ModelConfig {
	return config.ModelConfig{
		Name: "m", Frontend: "127.0.0.1:0", Replicas: urls,
		Affinity: true, SpillThreshold: config.SpillThreshold{N: 8},
		SessionHeaders: config.DefaultSessionHeaders, SessionTTL: time.Hour,
		Policy: config.PolicySticky, VLLMLBStats: "fresh",
		// The suite's clients pin replicas from loopback (pin_sources).
		PinSources: []string{"127.0.0.0/8"},
	}
}

// mustModel builds the real placement state for mc and checks, when the
// test ends, that no request is left counted in flight.
func mustModel(tb testing.TB, mc config.ModelConfig) *placement.Model {
	tb.Helper()
	m, err := placement.NewModel(mc, placement.ModelOptions{})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		// The shim's Cleanup (registered later) runs first, so every
		// exchange has ended by now.
		if n := m.Status().InFlight; n != 0 {
			tb.Errorf("in flight after the test: %d, want 0", n)
		}
	})
	return m
}

// mustShim serves m on a loopback port and returns the shim and address.
func mustShim(tb testing.TB, m Placer, opts Options) (*Shim, string) {
	tb.Helper()
	ln, err := Listen("127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	if opts.Logger == nil {
		var w io.Writer = io.Discard
		if os.Getenv("LMWARDEN_TEST_LOG") != "" {
			w = os.Stderr
		}
		opts.Logger = slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	s := NewShim(m, opts)
	done := make(chan error, 1)
	go func() { done <- s.Serve(ln) }()
	tb.Cleanup(func() {
		s.Close()
		<-done
	})
	return s, ln.Addr().String()
}

// waitInFlight waits until the model counts no request in flight: ending
// an exchange after a client abort is asynchronous to the test.
func waitInFlight(tb testing.TB, m *placement.Model) {
	tb.Helper()
	testutil.Eventually(tb, 10*time.Second, "no request in flight", func() bool {
		if n := m.Status().InFlight; n != 0 {
			tb.Logf("in flight: %d", n)
			return false
		}
		return true
	})
}

// client is one raw client connection with its own reader.
type client struct {
	net.Conn
	r *bufio.Reader
}

func mustDial(tb testing.TB, addr string) *client {
	tb.Helper()
	c := testnet.Dial(tb, addr)
	_ = c.SetDeadline(time.Now().Add(30 * time.Second)) // a hang fails, not blocks
	return &client{Conn: c, r: bufio.NewReader(c)}
}

// send writes raw bytes.
func (c *client) send(tb testing.TB, s string) {
	tb.Helper()
	if _, err := io.WriteString(c, s); err != nil {
		tb.Fatal(err)
	}
}

// response reads one response and its whole body.
func (c *client) response(tb testing.TB) (*http.Response, string) {
	tb.Helper()
	resp, err := http.ReadResponse(c.r, nil)
	if err != nil {
		tb.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		tb.Fatalf("reading body: %v", err)
	}
	return resp, string(body)
}

// readResponse reads a response head, leaving the body to the caller.
func readResponse(c *client) (*http.Response, error) { return http.ReadResponse(c.r, nil) }

// closed reports whether the server closed the connection (EOF next).
func (c *client) closed() bool {
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err := c.r.ReadByte()
	return err != nil
}

// messagesRequest renders an Anthropic streaming request of one session.
func messagesRequest(session string, turns []string, extra string) string {
	return messagesRequestN(session, turns, extra, 8)
}

// messagesRequestN is messagesRequest with max_tokens.
func messagesRequestN(session string, turns []string, extra string, maxTokens int) string {
	return messagesRequestBody(session, turns, extra, map[string]any{"max_tokens": maxTokens})
}

// longStreamRequest asks for a stream of exactly maxTokens tokens
// (ignore_eos: the simulator otherwise ends at a reply length of its own,
// often a few hundred tokens, which a test about a stream cut mid-way
// would race: the replica could be done before the client leaves).
func longStreamRequest(session string, turns []string, extra string, maxTokens int) string {
	return messagesRequestBody(session, turns, extra, map[string]any{"max_tokens": maxTokens, "ignore_eos": true})
}

func messagesRequestBody(session string, turns []string, extra string, sampling map[string]any) string {
	msgs := make([]map[string]string, len(turns))
	for i, t := range turns {
		role := "user"
		if i%2 == 1 {
			role = "assistant"
		}
		msgs[i] = map[string]string{"role": role, "content": t}
	}
	req := map[string]any{"model": "qwen3-4b", "stream": true, "messages": msgs}
	for k, v := range sampling {
		req[k] = v
	}
	body, _ := json.Marshal(req)
	h := "POST /v1/messages HTTP/1.1\r\nHost: warden\r\nContent-Type: application/json\r\n"
	if session != "" {
		h += "X-Claude-Code-Session-Id: " + session + "\r\n"
	}
	return fmt.Sprintf("%s%sContent-Length: %d\r\n\r\n%s", h, extra, len(body), body)
}

// requestsDone is how many requests each sim replica has finished.
func requestsDone(sv *sim.Servers, n int) []uint64 {
	out := make([]uint64, n)
	for i := range out {
		out[i] = sv.Stats(i).RequestsDone
	}
	return out
}

// rawUpstream is a TCP "replica" that runs fn on each accepted connection,
// for failure cases a real replica cannot be made to produce on demand.
func rawUpstream(tb testing.TB, fn func(c net.Conn)) string {
	tb.Helper()
	ln, err := Listen("127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				fn(c)
			}()
		}
	}()
	return "http://" + ln.Addr().String()
}

// readRequestHead consumes one request head on an upstream connection.
func readRequestHead(c net.Conn) (*http1.Head, []byte, error) {
	return http1.ReadHead(c, nil)
}

// deadURL is a loopback address where a connect is refused for the whole
// test (each call another one: a model refuses duplicate replicas).
func deadURL(tb testing.TB) string {
	tb.Helper()
	return "http://" + testnet.RefusingAddr(tb)
}

// engineFirstTokens reads a one-endpoint replica's /metrics and returns,
// per engine (rank) label, how many requests got a first token (the
// sample count of vllm:time_to_first_token_seconds).
func engineFirstTokens(tb testing.TB, url string, ranks int) []uint64 {
	tb.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	dec := expfmt.NewDecoder(resp.Body, expfmt.ResponseFormat(resp.Header))
	out := make([]uint64, ranks)
	for {
		var mf dto.MetricFamily
		if err := dec.Decode(&mf); err == io.EOF {
			break
		} else if err != nil {
			tb.Fatal(err)
		}
		if mf.GetName() != "vllm:time_to_first_token_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "engine" {
					var i int
					fmt.Sscan(l.GetValue(), &i)
					if i >= 0 && i < ranks {
						out[i] = m.GetHistogram().GetSampleCount()
					}
				}
			}
		}
	}
	return out
}

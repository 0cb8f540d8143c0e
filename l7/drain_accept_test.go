package l7

import (
	"errors"
	"io"
	"log/slog"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/lmwarden/lmwarden/internal/testutil"
)

// TestDrainServesConnectionsStillInTheAcceptQueue: a client whose
// connection the kernel completed but the shim had not yet accepted when
// Close began has sent its request; it gets an answer (with Connection:
// close), not the reset that closing a listener with a full queue sends.
// The test holds the connection bounds' lock, so the accept loop stops
// at its first connection and the others wait in the queue while the
// drain begins.
func TestDrainServesConnectionsStillInTheAcceptQueue(t *testing.T) {
	sv := mustSim(t, 2, "ports")
	m := mustModel(t, modelConfig(sv.URLs()...))
	ln, err := Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	lim := NewConnLimits(0, 0)
	s := NewShim(m, Options{Limits: lim, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	served := make(chan error, 1)
	go func() { served <- s.Serve(ln) }()
	testutil.Eventually(t, 10*time.Second, "the shim serving", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return len(s.lns) == 1
	})
	lim.mu.Lock()
	const n = 100
	clients := make([]*client, n)
	for i := range clients {
		clients[i] = mustDial(t, ln.Addr().String())
		clients[i].send(t, messagesRequest("q", []string{"hi"}, ""))
	}
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	// Close sets closing and shuts the listeners' intake under mu: seen
	// under mu, both are done.
	testutil.Eventually(t, 10*time.Second, "the intake shut", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.closing.Load()
	})
	// While the queue drains, a new client is held off: its SYN is
	// dropped, so its connect does not complete.
	if c, err := (&net.Dialer{Timeout: 300 * time.Millisecond}).Dial("tcp", ln.Addr().String()); err == nil {
		c.Close()
		t.Error("a new connection completed while the shim drained")
	}
	lim.mu.Unlock()

	var wg sync.WaitGroup
	var mu sync.Mutex
	outcomes := map[string]int{}
	for _, c := range clients {
		wg.Go(func() {
			o := "200, closed"
			resp, err := readResponse(c)
			if err == nil {
				_, err = io.ReadAll(resp.Body)
			}
			if err != nil {
				o = err.Error()
				if errors.Is(err, syscall.ECONNRESET) {
					o = "reset"
				}
			} else if resp.StatusCode != 200 || !resp.Close {
				o = resp.Status
			}
			mu.Lock()
			outcomes[o]++
			mu.Unlock()
		})
	}
	wg.Wait()
	if outcomes["200, closed"] != n {
		t.Errorf("of %d queued clients: %v; want every one answered 200 with Connection: close", n, outcomes)
	}
	if err := <-closed; err != nil {
		t.Errorf("Close: %v", err)
	}
	if err := <-served; !errors.Is(err, ErrShimClosed) {
		t.Errorf("Serve: %v, want ErrShimClosed", err)
	}
	// Closed means closed: a new client is refused.
	if c, err := net.DialTimeout("tcp", ln.Addr().String(), 3*time.Second); err == nil {
		c.Close()
		t.Error("a new connection was accepted after Close")
	}
}

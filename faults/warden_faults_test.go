package faults

import (
	"fmt"
	"github.com/lmwarden/lmwarden/internal/testutil"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// wardenDatapaths are the datapaths the warden's own faults run on.
var wardenDatapaths = []string{"user", "msg", "skb"}

// TestWardenKilledUnderLoad: kill -9 the warden while streams are in
// flight. Its clients must not hang (their streams end at once: the
// process that held their sockets is gone), and a restarted warden on
// the same state serves every later turn, each session on the replica it
// had (kernel datapaths: the pinned sessions are restored).
func TestWardenKilledUnderLoad(t *testing.T) {
	for _, dp := range wardenDatapaths {
		t.Run(dp, func(t *testing.T) {
			if !inNetNS(t) {
				return
			}
			startReplicas(t, 4, replicaOpts{Speed: 20, ReplyTokens: 1500})
			w := startWarden(t, wardenOpts{Datapath: dp})
			stop := make(chan struct{})
			lr := load(8, 1500, "wkill", stop)
			waitStreaming(t, lr, 4)
			placed := map[string]int{}
			for i := range 8 {
				id := fmt.Sprintf("wkill-%d", i)
				placed[id] = w.sessionReplica(t, id)
			}
			at := time.Now()
			w.signal(t, syscall.SIGKILL)
			w.wait(t, 10*time.Second)
			// The clients' next turns fail while it is down (refused);
			// stop them, then restart.
			close(stop)
			hit, slowest := 0, time.Duration(0)
			for _, r := range lr.results() {
				if r.Start.Before(at) && r.End.After(at) {
					hit++
					slowest = max(slowest, r.End.Sub(at))
				}
			}
			w.restart(t)
			moved, failed := 0, 0
			for i := range 8 {
				id := fmt.Sprintf("wkill-%d", i)
				c := newClient(time.Minute)
				r := c.stream(t.Context(), anthropic, id, 32)
				c.close()
				if !r.Complete {
					failed++
					t.Logf("after the restart: %v", r)
				}
				if got := w.sessionReplica(t, id); dp != "user" && got != placed[id] {
					moved++
				}
			}
			figure(t, "warden kill -9 (%s): %d streams in flight, the slowest ended %v after; after the restart %d of 8 turns failed, %d sessions moved",
				dp, hit, slowest.Round(time.Millisecond), failed, moved)
			if slowest > 2*time.Second {
				t.Errorf("a stream in flight ended %v after the warden died", slowest)
			}
			if failed > 0 || moved > 0 {
				t.Errorf("after the restart: %d turns failed, %d sessions moved", failed, moved)
			}
		})
	}
}

// waitStreaming waits until at least n of the load's sessions are
// streaming: their responses have begun and not ended.
func waitStreaming(t *testing.T, l *loadRun, n int) {
	t.Helper()
	testutil.Eventually(t, 30*time.Second, fmt.Sprintf("%d streams to begin", n), func() bool {
		return len(l.streams()) >= n
	})
}

// TestWardenStoppedUnderLoad: SIGTERM while streams are in flight and
// keep-alive clients send request after request. The streams finish
// whole; every keep-alive client gets an answer to the request it sends
// next (with Connection: close, or its idle connection closed cleanly
// before it sent), never a broken pipe or a reset; the warden exits 0.
func TestWardenStoppedUnderLoad(t *testing.T) {
	for _, dp := range wardenDatapaths {
		t.Run(dp, func(t *testing.T) {
			if !inNetNS(t) {
				return
			}
			startReplicas(t, 4, replicaOpts{Speed: 20, ReplyTokens: 600})
			w := startWarden(t, wardenOpts{Datapath: dp})
			stop := make(chan struct{})
			lr := load(4, 600, "wterm", stop)
			keep := keepAliveClients(t, 8, 1, false, 5*time.Millisecond, stop)
			naive := keepAliveClients(t, 8, 101, true, 200*time.Millisecond, stop)
			waitStreaming(t, lr, 2)
			at := time.Now()
			w.signal(t, syscall.SIGTERM)
			err := w.wait(t, 30*time.Second)
			exited := time.Since(at)
			close(stop)
			hit, cut := 0, 0
			for _, r := range lr.results() {
				if r.Start.Before(at) && r.End.After(at) {
					hit++
					if !r.Complete {
						cut++
						t.Logf("in flight at SIGTERM: %v", r)
					}
				}
			}
			bad := 0
			summary := func(outcomes map[string]int) string {
				var lines []string
				for o, n := range outcomes {
					lines = append(lines, fmt.Sprintf("%s %d", o, n))
					if o == "broken pipe" || o == "reset" || o == "closed before an answer" {
						bad += n
					}
				}
				return strings.Join(lines, ", ")
			}
			figure(t, "SIGTERM (%s): exit %v after %v; %d streams in flight, %d cut; next request of 8 keep-alive clients sending back to back: %s; of 8 that pause 200 ms and do not check their idle connection: %s",
				dp, err, exited.Round(time.Millisecond), hit, cut, summary(keep()), summary(naive()))
			if err != nil {
				t.Errorf("the warden exited with %v", err)
			}
			if cut > 0 {
				t.Errorf("%d of %d streams in flight were cut by the drain", cut, hit)
			}
			if bad > 0 {
				t.Errorf("%d keep-alive clients' next request failed", bad)
			}
		})
	}
}

// keepAliveClients runs n clients that send small requests on one
// keep-alive connection each, pause between them, until stop; after it,
// each reports how its first request after the warden began draining
// ended ("ok, closed": answered with Connection: close; "idle connection
// closed cleanly": the client saw the close before it sent; else the
// error). A naive client does not check its idle connection before it
// reuses it (a careful one does, as Go's, curl's and urllib3's do). The
// clients connect from 127.0.1.first and on.
func keepAliveClients(t *testing.T, n, first int, naive bool, pause time.Duration, stop <-chan struct{}) func() map[string]int {
	var mu sync.Mutex
	out := map[string]int{}
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			c := dialFrom(t, fmt.Sprintf("127.0.1.%d", first+i))
			id := fmt.Sprintf("keep-%d", first+i)
			for {
				// As a well-behaved client does before it reuses an idle
				// connection: one the server closed is not used again.
				if !naive && c.closedByPeer() {
					mu.Lock()
					out["idle connection closed cleanly"]++
					mu.Unlock()
					return
				}
				resp, err := c.turn(t, id)
				if err != nil || resp.StatusCode != 200 || resp.Close {
					o := classify(err)
					if err == nil && resp.StatusCode != 200 {
						o = fmt.Sprintf("status %d", resp.StatusCode)
					} else if err == nil {
						o = "ok, closed"
					}
					mu.Lock()
					out[o]++
					mu.Unlock()
					return
				}
				select {
				case <-stop:
					mu.Lock()
					out["still open at the end"]++
					mu.Unlock()
					return
				case <-time.After(pause):
				}
			}
		})
	}
	return func() map[string]int {
		wg.Wait()
		return out
	}
}

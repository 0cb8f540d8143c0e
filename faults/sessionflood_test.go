package faults

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestStrangerCannotEvictConversations: eight real conversations (two
// turns each, a context of about 10,000 tokens), then one client without
// any credential sends fresh session ids, each twice: as pipelined
// GET /health (ten times the table's bound of them), and as small
// inference requests (twice the bound). Health checks must not enter the
// session table, and neither the number of requests nor their repetition
// may push the real conversations out: each keeps its replica.
func TestStrangerCannotEvictConversations(t *testing.T) {
	if !inNetNS(t) {
		return
	}
	const bound = 200
	startReplicas(t, 4, replicaOpts{})
	w := startWarden(t, wardenOpts{ModelExtra: fmt.Sprintf("max_sessions: %d", bound)})
	real := make([]string, 8)
	placed := map[string]int{}
	for turn := range 2 {
		for i := range real {
			real[i] = fmt.Sprintf("real-%d", i)
			c := dialFrom(t, "")
			if resp, err := c.bigTurn(t, real[i], 40000+2000*turn); err != nil || resp.StatusCode != 200 {
				t.Fatalf("turn %d of %s: %v %v", turn, real[i], resp, err)
			}
			c.Close()
		}
	}
	for _, id := range real {
		placed[id] = w.sessionReplica(t, id)
	}
	// The stranger: health checks, pipelined, ten times the bound of ids.
	var wg sync.WaitGroup
	const conns = 4
	for g := range conns {
		wg.Go(func() {
			var reqs []string
			for i := g; i < 10*bound; i += conns {
				r := fmt.Sprintf("GET /health HTTP/1.1\r\nHost: warden\r\nX-Claude-Code-Session-Id: probe-%d\r\n\r\n", i)
				reqs = append(reqs, r, r)
			}
			if err := pipeline(reqs); err != nil {
				t.Errorf("pipelined health checks: %v", err)
			}
		})
	}
	wg.Wait()
	afterProbes := w.models(t)[0]
	// Then small prompts with fresh ids, each twice: twice the bound.
	for g := range conns {
		wg.Go(func() {
			c := dialFrom(t, "127.0.0.9")
			for i := g; i < 2*bound; i += conns {
				for range 2 {
					if resp, err := c.turn(t, fmt.Sprintf("stranger-%d", i)); err != nil || resp.StatusCode != 200 {
						t.Errorf("stranger's prompt: %v %v", resp, err)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	m := w.models(t)[0]
	moved, gone := 0, 0
	for _, id := range real {
		switch r := w.sessionReplica(t, id); {
		case r < 0:
			gone++
		case r != placed[id]:
			moved++
		}
	}
	figure(t, "8 real conversations, then %d pipelined health checks (%d fresh ids, each twice) and %d small prompts (%d fresh ids, each twice) at a bound of %d: sessions %d after the health checks (evicted %d); after the prompts %d (evicted %d); real conversations gone %d, moved %d",
		2*10*bound, 10*bound, 2*2*bound, 2*bound, bound, afterProbes.Sessions, afterProbes.SessionsEvicted, m.Sessions, m.SessionsEvicted, gone, moved)
	if afterProbes.Sessions != len(real) {
		t.Errorf("health checks entered the session table: %d sessions, want %d", afterProbes.Sessions, len(real))
	}
	if gone+moved > 0 {
		t.Errorf("a stranger's requests pushed real conversations out: %d gone, %d moved", gone, moved)
	}
	// Their next turns stay where their caches are.
	for _, id := range real {
		c := dialFrom(t, "")
		if resp, err := c.bigTurn(t, id, 44000); err != nil || resp.StatusCode != 200 {
			t.Fatalf("third turn of %s: %v %v", id, resp, err)
		}
		c.Close()
		if r := w.sessionReplica(t, id); r != placed[id] {
			t.Errorf("%s's third turn went to replica %d, its cache is on %d", id, r, placed[id])
		}
	}
}

// bigTurn sends one non-streamed turn of session with a prompt of about
// size bytes (a conversation's context) and reads its answer.
func (c *rawConn) bigTurn(tb testing.TB, session string, size int) (*http.Response, error) {
	tb.Helper()
	b := fmt.Sprintf(`{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"%s %s"}]}`, session, strings.Repeat("context ", size/8))
	if _, err := io.WriteString(c, postHead(int64(len(b)), "X-Claude-Code-Session-Id: "+session)+b); err != nil {
		return nil, err
	}
	resp, _, err := c.response(30 * time.Second)
	return resp, err
}

// pipeline sends every request on one connection without waiting, and
// reads every answer.
func pipeline(reqs []string) error {
	d := net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.9")}}
	nc, err := d.Dial("tcp", frontend)
	if err != nil {
		return err
	}
	defer nc.Close()
	c := &rawConn{Conn: nc, br: bufio.NewReader(nc)}
	errc := make(chan error, 1)
	go func() {
		bw := bufio.NewWriterSize(c, 64<<10)
		for _, r := range reqs {
			if _, err := bw.WriteString(r); err != nil {
				errc <- err
				return
			}
		}
		errc <- bw.Flush()
	}()
	for range reqs {
		_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
		resp, err := http.ReadResponse(c.br, nil)
		if err != nil {
			return err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return fmt.Errorf("status %d", resp.StatusCode)
		}
	}
	return <-errc
}

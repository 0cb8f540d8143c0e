package faults

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestSoakWithAbandonedStreams: thousands of connections (2,000 in the
// short suite, 10,000 in make soak), a fifth of them abandoned in the
// middle of their stream. No other request may be lost, and within 10 s
// of the last one the warden's descriptors, goroutines, resident memory,
// in-flight count and (kernel datapaths) per-socket map entries must be
// back at what they were before.
func TestSoakWithAbandonedStreams(t *testing.T) {
	dps := []string{"user", "msg"}
	if soak() {
		dps = append(dps, "skb")
	}
	for _, dp := range dps {
		t.Run(dp, func(t *testing.T) {
			if !inNetNS(t) {
				return
			}
			raiseNoFile(t)
			conns := 2000
			if soak() {
				conns = 10000
			}
			startReplicas(t, 4, replicaOpts{Speed: 50, ReplyTokens: 64})
			w := startWarden(t, wardenOpts{Datapath: dp})
			// Warm up (pools, buffers, the runtime), then settle.
			soakRound(t, 100, 20)
			time.Sleep(6 * time.Second)
			base := w.stats(t)
			start := time.Now()
			lost, abandoned := soakRound(t, conns, 64)
			took := time.Since(start)
			var after procStats
			back := false
			deadline := time.Now().Add(10 * time.Second)
			for time.Now().Before(deadline) {
				after = w.stats(t)
				if after.InFlight == 0 && after.FDs <= base.FDs+4 && after.Goroutines <= base.Goroutines+4 &&
					after.MapEntries <= base.MapEntries && after.RSS <= base.RSS+64<<20 {
					back = true
					break
				}
				time.Sleep(200 * time.Millisecond)
			}
			settled := time.Since(start) - took
			figure(t, "%s: %d connections in %v, %d abandoned mid-stream, %d others lost; before: %v; %v later: %v",
				dp, conns, took.Round(time.Millisecond), abandoned, lost, base, settled.Round(time.Millisecond), after)
			if lost > 0 {
				t.Errorf("%d requests lost", lost)
			}
			if !back {
				t.Errorf("not back to the baseline 10 s after the soak: before %v, after %v", base, after)
			}
		})
	}
}

// soakRound sends n streamed requests, each on a new connection, width at
// a time; every fifth is abandoned after its first events. It returns the
// others that did not end whole, and how many were abandoned.
func soakRound(t *testing.T, n, width int) (lost, abandoned int) {
	var wg sync.WaitGroup
	var next, lostN, abandonedN atomic.Int64
	tr := &http.Transport{Proxy: nil, DisableKeepAlives: true, DisableCompression: true}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr, Timeout: 2 * time.Minute}
	for range width {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				abandon := i%5 == 4
				if abandon {
					abandonedN.Add(1)
				}
				if !soakOne(hc, i, abandon) && !abandon {
					lostN.Add(1)
				}
			}
		})
	}
	wg.Wait()
	return int(lostN.Load()), int(abandonedN.Load())
}

// soakOne streams one request; an abandoned one closes its connection
// after three events.
func soakOne(hc *http.Client, i int, abandon bool) bool {
	a := anthropic
	path, header := "/v1/messages", "X-Claude-Code-Session-Id"
	if i%2 == 1 {
		a, path, header = openai, "/v1/chat/completions", "X-Session-Id"
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	session := fmt.Sprintf("soak-%d", i%97)
	req, _ := http.NewRequestWithContext(ctx, "POST", "http://"+frontend+path, strings.NewReader(string(body(a, session, 64))))
	req.Header.Set(header, session)
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return false
	}
	br := bufio.NewReader(resp.Body)
	events := 0
	for {
		line, err := br.ReadString('\n')
		if strings.HasPrefix(line, "data:") {
			events++
			if strings.Contains(line, "message_stop") || strings.Contains(line, "[DONE]") {
				io.Copy(io.Discard, br)
				return true
			}
		}
		if abandon && events == 3 {
			cancel() // closes the connection mid-stream
			return true
		}
		if err != nil {
			return false
		}
	}
}

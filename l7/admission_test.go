package l7

import (
	"fmt"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/lmwarden/lmwarden/agent/config"
	"github.com/lmwarden/lmwarden/agent/placement"
	"github.com/lmwarden/lmwarden/internal/testutil"
	"github.com/lmwarden/lmwarden/l7/http1"
	"github.com/lmwarden/lmwarden/sim"
)

// mustFullModel is a cost-policy model whose one replica reports a KV
// capacity too small for any new session, so admission in queue mode
// parks every new session at the warden.
func mustFullModel(tb testing.TB, url string, queueMax int, timeout time.Duration) *placement.Model {
	tb.Helper()
	mc := modelConfig(url)
	mc.Policy = config.PolicyCost
	m := mustModel(tb, mc)
	if err := m.SetAdmission(config.AdmissionConfig{Mode: config.AdmissionQueue, QueueMax: queueMax, Timeout: timeout}); err != nil {
		tb.Fatal(err)
	}
	// A replica of 3,000 tokens held by a request in flight to the end
	// of the test: every other session waits for room. (A cache smaller
	// than the requests would not do: a prompt no cache holds never
	// waits.)
	m.ObserveReplica(0, placement.ReplicaMetrics{Healthy: true, KVCapacityTokens: 3_000}, time.Now())
	holder, err := m.Place(placement.Request{SessionID: "holder", PromptBytes: 11_600, Now: time.Now()})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { m.Done(holder, time.Now()) })
	return m
}

func waitParked(tb testing.TB, m *placement.Model, n int) {
	tb.Helper()
	testutil.Eventually(tb, 10*time.Second, fmt.Sprintf("%d requests parked", n), func() bool {
		return m.AdmissionStats().Parked == n
	})
}

func TestParkedRequestIsPlacedAfterTheAdmissionTimeout(t *testing.T) {
	sv := mustSim(t, 1, sim.ShapePorts)
	m := mustFullModel(t, sv.URLs()[0], 4, 100*time.Millisecond)
	s, addr := mustShim(t, m, Options{})
	c := mustDial(t, addr)
	c.send(t, messagesRequest("parked", []string{"hello"}, ""))
	resp, body := c.response(t)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d body %q", resp.StatusCode, body)
	}
	if s.Stats().Parked != 1 || m.AdmissionStats().TimedOut != 1 {
		t.Fatalf("parked %d timed out %d, want 1 and 1", s.Stats().Parked, m.AdmissionStats().TimedOut)
	}
	// The response says how long the request waited at the warden: at
	// least the 100 ms timeout, and less than the test's whole run.
	waited, err := strconv.ParseFloat(resp.Header.Get(http1.ParkedHeader), 64)
	if err != nil || waited < 0.1 || waited > 30 {
		t.Fatalf("%s: %q, want the wait in seconds (about 0.1)", http1.ParkedHeader, resp.Header.Get(http1.ParkedHeader))
	}
	// A request that was not parked (no session id: admission never
	// parks it) carries no such header.
	c.send(t, messagesRequest("", []string{"hello"}, ""))
	if resp, _ := c.response(t); resp.StatusCode != 200 || resp.Header.Get(http1.ParkedHeader) != "" {
		t.Fatalf("unparked request: status %d, %s %q, want 200 and none", resp.StatusCode, http1.ParkedHeader, resp.Header.Get(http1.ParkedHeader))
	}
}

func TestClientLeavingWhileParkedCancelsItsWait(t *testing.T) {
	sv := mustSim(t, 1, sim.ShapePorts)
	m := mustFullModel(t, sv.URLs()[0], 4, time.Minute)
	_, addr := mustShim(t, m, Options{})
	c := mustDial(t, addr)
	c.send(t, messagesRequest("leaves", []string{"hello"}, ""))
	waitParked(t, m, 1)
	c.Close()
	waitParked(t, m, 0)
	if n := requestsDone(sv, 1)[0]; n != 0 {
		t.Fatalf("the replica served %d requests of a client that left while parked", n)
	}
}

func TestFullAdmissionQueueGets503WithRetryAfter(t *testing.T) {
	sv := mustSim(t, 1, sim.ShapePorts)
	m := mustFullModel(t, sv.URLs()[0], 1, time.Minute)
	_, addr := mustShim(t, m, Options{})
	first := mustDial(t, addr)
	first.send(t, messagesRequest("first", []string{"hello"}, ""))
	waitParked(t, m, 1)
	c := mustDial(t, addr)
	c.send(t, messagesRequest("second", []string{"hello"}, ""))
	resp, _ := c.response(t)
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("status %d Retry-After %q, want 503 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	// Retry-After says when the queue moves at the latest: the oldest
	// waiter is placed within the minute's timeout.
	if after, err := strconv.Atoi(resp.Header.Get("Retry-After")); err != nil || after < 1 || after > 60 {
		t.Fatalf("Retry-After %q, want the seconds left of the oldest wait (1-60)", resp.Header.Get("Retry-After"))
	}
	first.Close()
	waitParked(t, m, 0)
}

func TestClientLeavingWhileParkedGivesItsPlaceToTheNext(t *testing.T) {
	// One replica with room for one session, held by a request in flight.
	// Two clients wait, the first leaves: the queue holds only the second at
	// once, and when the room frees the second is served, not the first.
	sv := mustSim(t, 1, sim.ShapePorts)
	mc := modelConfig(sv.URLs()[0])
	mc.Policy = config.PolicyCost
	m := mustModel(t, mc)
	if err := m.SetAdmission(config.AdmissionConfig{Mode: config.AdmissionQueue, Timeout: time.Minute}); err != nil {
		t.Fatal(err)
	}
	m.ObserveReplica(0, placement.ReplicaMetrics{Healthy: true, KVCapacityTokens: 3_000}, time.Now())
	holder, err := m.Place(placement.Request{SessionID: "holder", PromptBytes: 11_000, Now: time.Now()}) // 2,750 tokens of 3,000
	if err != nil {
		t.Fatal(err)
	}
	_, addr := mustShim(t, m, Options{})
	first := mustDial(t, addr)
	first.send(t, messagesRequest("first", []string{"hello"}, ""))
	waitParked(t, m, 1)
	second := mustDial(t, addr)
	second.send(t, messagesRequest("second", []string{"hello"}, ""))
	waitParked(t, m, 2)
	first.Close()
	waitParked(t, m, 1)
	m.Done(holder, time.Now())
	// the holder's room frees when its liveness lapses, at a poll
	testutil.Eventually(t, 30*time.Second, "the second waiter granted", func() bool {
		m.ObserveReplica(0, placement.ReplicaMetrics{Healthy: true, KVCapacityTokens: 3_000}, time.Now().Add(time.Minute))
		return m.AdmissionStats().Parked == 0
	})
	resp, body := second.response(t)
	if resp.StatusCode != 200 {
		t.Fatalf("second waiter: status %d body %q", resp.StatusCode, body)
	}
	if n := requestsDone(sv, 1)[0]; n != 1 {
		t.Fatalf("the replica served %d requests, want only the second waiter's", n)
	}
}

func TestHalfClosedClientStaysParkedAndIsAnswered(t *testing.T) {
	sv := mustSim(t, 1, sim.ShapePorts)
	m := mustFullModel(t, sv.URLs()[0], 4, 300*time.Millisecond)
	_, addr := mustShim(t, m, Options{})
	c := mustDial(t, addr)
	c.send(t, messagesRequest("half-parked", []string{"hello"}, ""))
	if err := c.Conn.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	resp, _, err := c.responseTo("POST") // after the probe's 100 Continue
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("status %v err %v: a half-closed client's parked request was dropped", resp, err)
	}
	if m.AdmissionStats().TimedOut != 1 {
		t.Fatalf("timed out %d, want 1: it must have waited parked", m.AdmissionStats().TimedOut)
	}
}

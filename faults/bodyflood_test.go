package faults

import (
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lmwarden/lmwarden/internal/testutil"
)

// TestBodyFloodIsRefusedNotLetThrough, on every datapath: clients from six
// addresses open connections that each send a request head announcing a
// body of 100,000 bytes (by Content-Length, or a chunk's size) and one
// byte of it, more of them than the
// warden's connection bound, under a descriptor limit of its own (as a
// systemd unit's LimitNOFILE= gives). The warden must never run out of
// descriptors: the connections beyond the bound are turned away
// (refused, or shed while they wait; counted),
// a bystander on another address is served meanwhile, nothing is
// answered 502, and when the flood's clients leave, their leaving is
// counted as theirs.
func TestBodyFloodIsRefusedNotLetThrough(t *testing.T) {
	for _, dp := range datapaths {
		t.Run(dp, func(t *testing.T) { bodyFlood(t, dp) })
	}
}

// The flood: floodAddrs addresses, floodPerAddr connections each, against
// a warden with floodNoFile descriptors (a bound of 478 connections at
// four descriptors each, after the reserve; the build before this work
// bounded it at 988, two each).
const (
	floodAddrs   = 6
	floodPerAddr = 150
	floodNoFile  = 3000
)

func bodyFlood(t *testing.T, dp string) {
	if !inNetNS(t) {
		return
	}
	raiseNoFile(t)
	startReplicas(t, 2, replicaOpts{})
	w := startWarden(t, wardenOpts{Datapath: dp, Replicas: 2, NoFile: floodNoFile, Extra: "body_timeout: 120s\n"})
	var mu sync.Mutex
	var conns []net.Conn
	var wg sync.WaitGroup
	for a := range floodAddrs {
		wg.Go(func() {
			d := net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(fmt.Sprintf("127.0.3.%d", a+1))}}
			for i := range floodPerAddr {
				c, err := d.Dial("tcp", frontend)
				if err != nil {
					continue // refused by a full backlog: the flood's own loss
				}
				head := postHead(100000, "X-Claude-Code-Session-Id: flood") + "{"
				if i%2 == 1 {
					head = chunkedHead("X-Claude-Code-Session-Id: flood") + "186a0\r\n{"
				}
				_, _ = c.Write([]byte(head))
				mu.Lock()
				conns = append(conns, c)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	t.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
	})
	sent := len(conns)
	// Every connection of the flood has been taken from the backlog and
	// either admitted or refused.
	handled := func() float64 {
		f := w.metrics(t)
		return metric(f, "lmwarden_shim_connections_total") + metric(f, "lmwarden_shim_connections_refused_total")
	}
	testutil.Eventually(t, 60*time.Second, "the warden to take every connection of the flood", func() bool {
		if !w.running() {
			t.Fatalf("the warden exited: %v", w.err)
		}
		return handled() >= float64(sent)
	})
	st := w.stats(t)
	// A bystander on another address, while the flood holds its sockets.
	start := time.Now()
	c := dialFrom(t, "127.0.0.2")
	resp, err := c.turn(t, "bystander")
	served := err == nil && resp.StatusCode == 200
	took := time.Since(start)
	fams := w.metrics(t)
	refused := metric(fams, "lmwarden_shim_connections_refused_total")
	shed := metric(fams, "lmwarden_shim_connections_shed_total")
	bad := metric(fams, "lmwarden_shim_answered_total", "code", "502")
	limit := metric(fams, "lmwarden_shim_connection_limit", "bound", "total")
	exhausted := strings.Contains(w.out.String(), "too many open files")
	figure(t, "%s: %d connections from %d addresses, each a head announcing 100000 bytes of body and one byte, against %d descriptors: bound %.0f, refused %.0f, shed %.0f; warden fds %d; descriptors exhausted %v; a bystander served %v in %v (err %v); 502s %.0f",
		dp, sent, floodAddrs, floodNoFile, limit, refused, shed, st.FDs, exhausted, served, took.Round(time.Millisecond), err, bad)
	if exhausted || st.FDs >= floodNoFile-8 {
		t.Errorf("the warden ran out of descriptors (fds %d of %d)", st.FDs, floodNoFile)
	}
	if !served {
		t.Errorf("the bystander was not served: %v %v", resp, err)
	}
	// Every connection beyond the bound was turned away: refused, or shed
	// (closed before its head was read, or its wait for a body ended).
	if refused == 0 || refused+shed < float64(sent)-limit {
		t.Errorf("of %d connections over a bound of %.0f, %.0f refused and %.0f shed", sent, limit, refused, shed)
	}
	// The flood's clients leave: their leaving is theirs.
	for _, c := range conns {
		c.Close()
	}
	testutil.Eventually(t, 30*time.Second, "the flood's connections closed", func() bool {
		f := w.metrics(t)
		return metric(f, "lmwarden_shim_open_connections", "state", "awaiting_body") == 0 &&
			metric(f, "lmwarden_shim_open_connections", "state", "busy") == 0
	})
	fams = w.metrics(t)
	bad = metric(fams, "lmwarden_shim_answered_total", "code", "502")
	left := metric(fams, "lmwarden_shim_abandoned_total", "stage", "body")
	blamed := strings.Count(w.out.String(), `msg="exchange failed"`) + strings.Count(w.out.String(), `msg="response cut on the replica's side"`)
	figure(t, "%s: the flood's clients left: %.0f counted as abandoned before their body; 502s %.0f; log lines blaming a replica %d", dp, left, bad, blamed)
	if bad != 0 || blamed != 0 {
		t.Errorf("clients that left were blamed on the replicas: %.0f 502s, %d log lines", bad, blamed)
	}
	if left == 0 {
		t.Errorf("no abandoned request counted")
	}
}

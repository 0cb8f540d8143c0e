package faults

import (
	"net"
	"strings"
	"testing"
	"time"

	"github.com/lmwarden/lmwarden/internal/testutil"
)

// TestAbandonedUploadIsTheClients, on every datapath: clients that leave in
// the middle of their request body, the ways a client leaves (closed,
// half-closed, reset; a body the warden waits for in the socket, or one
// it is already relaying to a replica; Content-Length or chunked). Each
// is counted as the client's (lmwarden_shim_abandoned_total{stage="body"}),
// never as a replica's failure: no 502, no log line blaming a replica.
func TestAbandonedUploadIsTheClients(t *testing.T) {
	for _, dp := range datapaths {
		t.Run(dp, func(t *testing.T) { abandonedUploads(t, dp) })
	}
}

func abandonedUploads(t *testing.T, dp string) {
	if !inNetNS(t) {
		return
	}
	startReplicas(t, 2, replicaOpts{})
	w := startWarden(t, wardenOpts{Datapath: dp, Replicas: 2, Extra: hostileExtra})
	big := strings.Repeat("x", 300<<10) // past what the warden waits for: relayed to a replica when the client leaves
	cases := []struct {
		name, send string
		leave      func(c *net.TCPConn)
	}{
		{"Content-Length 100000, one byte, close", postHead(100000) + "{", closeConn},
		{"Content-Length 100000, one byte, half-close", postHead(100000) + "{", halfClose},
		{"chunked, part of a chunk, close", chunkedHead() + "186a0\r\n{", closeConn},
		{"Content-Length 1000000, 300 KiB, close", postHead(1000000) + big, closeConn},
		{"Content-Length 1000000, 300 KiB, reset", postHead(1000000) + big, resetConn},
	}
	for _, tc := range cases {
		c := dialFrom(t, "")
		c.send(t, tc.send)
		tc.leave(c.Conn.(*net.TCPConn))
	}
	testutil.Eventually(t, 30*time.Second, "every abandoned upload ended", func() bool {
		f := w.metrics(t)
		return metric(f, "lmwarden_shim_abandoned_total", "stage", "body")+metric(f, "lmwarden_shim_answered_total") >= float64(len(cases))
	})
	testutil.Eventually(t, 10*time.Second, "nothing in flight", func() bool { return w.models(t)[0].InFlight == 0 })
	fams := w.metrics(t)
	bad := metric(fams, "lmwarden_shim_answered_total", "code", "502")
	left := metric(fams, "lmwarden_shim_abandoned_total", "stage", "body")
	// (Only the lines that blame a replica: a poll that times out on a
	// loaded machine warns too, and is not this test's business.)
	blamed := strings.Count(w.out.String(), `msg="exchange failed"`) + strings.Count(w.out.String(), `msg="response cut on the replica's side"`)
	figure(t, "%s: %d uploads abandoned (closed, half-closed, reset; waited for or relayed; Content-Length or chunked): %.0f counted as the client's, %.0f answered 502, %.0f answered in all, %d log lines blaming a replica",
		dp, len(cases), left, bad, metric(fams, "lmwarden_shim_answered_total"), blamed)
	if bad != 0 || blamed != 0 {
		t.Errorf("clients that left were blamed on the replicas: %.0f 502s, %d log lines", bad, blamed)
	}
	if left != float64(len(cases)) {
		t.Errorf("%.0f abandoned uploads counted, want %d", left, len(cases))
	}
	// The replicas are fine: the next request is served.
	c := dialFrom(t, "")
	if resp, err := c.turn(t, "after"); err != nil || resp.StatusCode != 200 {
		t.Errorf("a request after the abandoned uploads: %v %v", resp, err)
	}
}

func closeConn(c *net.TCPConn) { c.Close() }

func halfClose(c *net.TCPConn) { c.CloseWrite() }

func resetConn(c *net.TCPConn) {
	c.SetLinger(0)
	c.Close()
}

package l7_test

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"github.com/lmwarden/lmwarden/internal/testutil"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lmwarden/lmwarden/l7"
)

// A replica in a process of its own (this test binary again, running
// TestReplicaProcess), so that its CPU can be measured apart from the
// shim's and its writes do not compete with the shim's goroutines for the
// Go runtime. Like vLLM, it reads the whole request body, then streams
// Server-Sent Events, one write and flush each: the first event names the
// body's SHA-256, then X-Events events of X-Event-Bytes bytes each,
// X-Pace-Us microseconds apart (0: back to back). streamBody says exactly
// what it sends, so a client can check every byte.

const (
	replicaProcessEnv = "LMWARDEN_TEST_REPLICA_PROCESS"
	// replicaNetnsEnv: the replica runs in a network namespace of its
	// own, on the far end of a veth pair, at this address (CIDR).
	replicaNetnsEnv = "LMWARDEN_TEST_REPLICA_NETNS"
)

// replicaProcess is a running TestReplicaProcess.
type replicaProcess struct {
	addr string
	pid  int
}

func startReplicaProcess(tb testing.TB) replicaProcess {
	tb.Helper()
	cmd := exec.Command(os.Args[0], "-test.run", "^TestReplicaProcess$")
	cmd.Env = append(os.Environ(), replicaProcessEnv+"=1")
	cmd.Stderr = os.Stderr
	line, err := testutil.StartChild(tb, cmd).ReadString('\n')
	if err != nil {
		tb.Fatalf("replica process: %v", err)
	}
	return replicaProcess{addr: strings.TrimSpace(strings.TrimPrefix(line, "listening ")), pid: cmd.Process.Pid}
}

// cpu is the process's CPU time so far (user + system).
func (r replicaProcess) cpu(tb testing.TB) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", r.pid))
	if err != nil {
		tb.Fatal(err)
	}
	st := string(b)
	f := strings.Fields(st[strings.LastIndexByte(st, ')')+2:])
	ut, _ := strconv.Atoi(f[11])
	sy, _ := strconv.Atoi(f[12])
	return time.Duration(ut+sy) * time.Second / 100 // USER_HZ
}

// TestReplicaProcess is startReplicaProcess's server; it does nothing
// unless started by it.
func TestReplicaProcess(t *testing.T) {
	if os.Getenv(replicaProcessEnv) == "" {
		t.Skip("the tests' replica process")
	}
	listen := "127.0.0.1:0"
	if cidr := os.Getenv(replicaNetnsEnv); cidr != "" {
		listen = joinNetnsPeer(t, cidr)
	}
	ln, err := l7.Listen(listen)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := sha256.New()
		n, _ := io.Copy(h, r.Body)
		events, size, pace := streamParams(r.Header)
		w.Header().Set("Content-Type", "text/event-stream")
		f := w.(http.Flusher)
		for i, ev := range streamEvents(h.Sum(nil), n, events, size) {
			if i > 1 && pace > 0 {
				time.Sleep(pace)
			}
			if _, err := io.WriteString(w, ev); err != nil {
				return
			}
			f.Flush()
		}
	})}
	fmt.Printf("listening %s\n", ln.Addr())
	go func() {
		io.Copy(io.Discard, os.Stdin) // until the test's end of the pipe closes
		os.Exit(0)
	}()
	srv.Serve(ln)
}

// streamParams reads a request's X-Events, X-Event-Bytes, X-Pace-Us.
func streamParams(h http.Header) (events, size int, pace time.Duration) {
	events, size, us := 256, 100, 1000
	if v, err := strconv.Atoi(h.Get("X-Events")); err == nil {
		events = v
	}
	if v, err := strconv.Atoi(h.Get("X-Event-Bytes")); err == nil {
		size = v
	}
	if v, err := strconv.Atoi(h.Get("X-Pace-Us")); err == nil {
		us = v
	}
	return events, size, time.Duration(us) * time.Microsecond
}

// streamEvents is what the replica streams for a body of n bytes with
// SHA-256 sum: an event naming them, events events of about size bytes
// (each different), and a last one.
func streamEvents(sum []byte, n int64, events, size int) []string {
	out := []string{fmt.Sprintf("data: {\"sha256\":%q,\"bytes\":%d}\n\n", hex.EncodeToString(sum), n)}
	for i := range events {
		head := fmt.Sprintf("data: {\"index\":%d,\"text\":\"", i)
		pad := max(0, size-len(head)-4)
		out = append(out, head+strings.Repeat(string(rune('a'+i%26)), pad)+"\"}\n\n")
	}
	return append(out, "data: {\"type\":\"message_stop\"}\n\n")
}

// streamRequest is a request for a stream of events x size bytes, pace
// apart, with a body of bodyBytes.
func streamRequest(session string, bodyBytes, events, size int, pace time.Duration) (req, want string) {
	body := `{"model":"m","stream":true,"messages":[{"role":"user","content":"` + strings.Repeat("x", max(0, bodyBytes-64)) + `"}]}`
	sum := sha256.Sum256([]byte(body))
	req = fmt.Sprintf("POST /v1/messages HTTP/1.1\r\nHost: r\r\nContent-Type: application/json\r\nX-Claude-Code-Session-Id: %s\r\n"+
		"X-Events: %d\r\nX-Event-Bytes: %d\r\nX-Pace-Us: %d\r\nContent-Length: %d\r\n\r\n%s",
		session, events, size, pace.Microseconds(), len(body), body)
	return req, strings.Join(streamEvents(sum[:], int64(len(body)), events, size), "")
}

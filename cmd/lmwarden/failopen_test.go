package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lmwarden/lmwarden/kernel/kerneltest"
	"github.com/lmwarden/lmwarden/maps"
	"github.com/lmwarden/lmwarden/maps/mapstest"
)

// TestServeOneEndpointFailsOpenToTheReplicasOwnListener runs the layout
// that fails open, in a namespace of its own: `lmwarden sim --shape ranks`
// listens on 127.0.0.1:8000, and the warden's frontend is that same
// address, its endpoint too. Requests cross the shim exactly once (no
// loop: the warden's own connections and metrics polls go to the
// simulator's listener, not back into the shim); the warden is killed
// with SIGKILL while streams run; new connections are answered by the
// simulator's own listener at once; a restarted warden takes over again,
// every session on the rank it had.
func TestServeOneEndpointFailsOpenToTheReplicasOwnListener(t *testing.T) {
	if !mapstest.InNetNS(t) {
		return
	}
	bin := mustServeBinary(t)
	const front = "127.0.0.1:8000"
	startSimProcess(t, bin, "--shape", "ranks", "--replicas", "4", "--listen", front, "--speed", "50")
	pinDir := kerneltest.PinDir(t)
	t.Cleanup(func() {
		if err := maps.Unload(maps.Options{Dir: pinDir}); err != nil {
			t.Error(err)
		}
	})
	cfg := filepath.Join(t.TempDir(), "lmwarden.yaml")
	os.WriteFile(cfg, []byte(`admin: 127.0.0.1:9100
poll_interval: 50ms
models:
  - name: qwen3-4b
    frontend: `+front+`
    endpoint: http://`+front+`
    ranks: 4
`), 0o644)
	args := []string{"--config", cfg, "--datapath", "kernel", "--pin-dir", pinDir}

	w := mustServe(t, args...)
	ids := []string{"fo-a", "fo-b", "fo-c", "fo-d", "fo-e", "fo-f", "fo-g", "fo-h"}
	for _, id := range ids {
		sendTurn(t, front, id, []string{"first turn of " + id})
	}
	w.waitIdle(t)
	if got := shimRequests(t, w); got != len(ids) {
		t.Fatalf("the shim counted %d requests for %d sent: the warden's own connections were dispatched back into it", got, len(ids))
	}
	before := sessionReplicas(t, w)
	if len(before) != len(ids) {
		t.Fatalf("%d sessions, want %d", len(before), len(ids))
	}

	// Streams in flight through the warden when it dies: they are cut
	// (the warden held their sockets), nothing else is expected of them.
	var streams sync.WaitGroup
	started := make(chan struct{}, len(ids))
	for _, id := range ids {
		streams.Go(func() { streamUntilCut(front, id, started) })
	}
	for range ids {
		<-started
	}
	w.cmd.Process.Kill()
	<-w.exited
	w.exited <- nil // for mustServe's cleanup

	// At once, no retry: the simulator's own listener answers.
	for i := range 20 {
		if status, err := postTurn(front, fmt.Sprintf("after-kill-%d", i)); err != nil || status != 200 {
			t.Fatalf("request %d after the warden died: status %d, %v (the frontend did not fail open)", i, status, err)
		}
	}
	streams.Wait()

	w2 := mustServe(t, args...)
	if !strings.Contains(w2.logText(), "sessions restored") {
		t.Fatalf("the restarted warden restored nothing:\n%s", w2.logText())
	}
	for _, id := range ids {
		sendTurn(t, front, id, []string{"first turn of " + id, "reply", "second turn"})
	}
	w2.waitIdle(t)
	after := sessionReplicas(t, w2)
	for h, r := range before {
		if after[h] != r {
			t.Errorf("session %s: rank %d before the warden died, %d after its restart", h, r, after[h])
		}
	}
	if got := shimRequests(t, w2); got != len(ids) {
		t.Errorf("the restarted warden's shim counted %d requests for %d sent", got, len(ids))
	}
}

// startSimProcess runs `lmwarden sim args...` until the test ends and
// waits until it listens.
func startSimProcess(tb testing.TB, bin string, args ...string) {
	tb.Helper()
	cmd := exec.Command(bin, append([]string{"sim"}, args...)...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		tb.Fatalf("lmwarden sim: %v", err)
	}
	go io.Copy(io.Discard, out)
	tb.Logf("sim: %s", strings.TrimSpace(line))
}

// shimRequests reads lmwarden_shim_requests_total from the admin API.
func shimRequests(tb testing.TB, w *servedWarden) int {
	tb.Helper()
	resp, err := http.Get("http://" + w.admin + "/metrics")
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	n := 0
	for _, line := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(line, "lmwarden_shim_requests_total") {
			var v float64
			fmt.Sscan(line[strings.LastIndexByte(line, ' ')+1:], &v)
			n += int(v)
		}
	}
	return n
}

// postTurn sends one short streamed turn on a new connection and reads
// the whole answer.
func postTurn(front, session string) (int, error) {
	body := `{"model":"qwen3-4b","max_tokens":4,"stream":true,"messages":[{"role":"user","content":"hello"}]}`
	req, _ := http.NewRequest("POST", "http://"+front+"/v1/messages", strings.NewReader(body))
	req.Header.Set("X-Claude-Code-Session-Id", session)
	req.Header.Set("Content-Type", "application/json")
	req.Close = true
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	_, err = io.ReadAll(resp.Body)
	return resp.StatusCode, err
}

// streamUntilCut starts a long streamed turn and reads it until it ends or
// its connection is cut; started gets a value once the first bytes came.
func streamUntilCut(front, session string, started chan<- struct{}) {
	signal := sync.OnceFunc(func() { started <- struct{}{} })
	defer signal()
	c, err := net.DialTimeout("tcp", front, 5*time.Second)
	if err != nil {
		return
	}
	defer c.Close()
	body := `{"model":"qwen3-4b","max_tokens":4000,"stream":true,"messages":[{"role":"user","content":"tell a long story"}]}`
	fmt.Fprintf(c, "POST /v1/messages HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nX-Claude-Code-Session-Id: %s\r\nContent-Length: %d\r\n\r\n%s", session, len(body), body)
	c.SetReadDeadline(time.Now().Add(30 * time.Second))
	buf := make([]byte, 4096)
	for {
		if _, err := c.Read(buf); err != nil {
			return
		}
		signal()
	}
}

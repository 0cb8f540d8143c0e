package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/lmwarden/lmwarden/agent/adminapi"
	"github.com/lmwarden/lmwarden/internal/testutil"
	"github.com/lmwarden/lmwarden/sim"
)

var (
	serveBinOnce sync.Once
	serveBin     string
	serveBinErr  error
)

// TestMain removes the binary mustServeBinary built (26 MB a run, and one
// more for every test re-executed in a network namespace of its own).
func TestMain(m *testing.M) {
	code := m.Run()
	if serveBin != "" {
		os.RemoveAll(filepath.Dir(serveBin))
	}
	os.Exit(code)
}

// mustServeBinary builds the real lmwarden binary once per test run
// (LMWARDEN_SERVE_BIN names one built already: `make kernels` runs these
// tests in VMs that have no Go toolchain).
func mustServeBinary(tb testing.TB) string {
	tb.Helper()
	if bin := os.Getenv("LMWARDEN_SERVE_BIN"); bin != "" {
		return bin
	}
	serveBinOnce.Do(func() {
		dir, err := os.MkdirTemp("", "lmwarden-serve-test")
		if err != nil {
			serveBinErr = err
			return
		}
		serveBin = filepath.Join(dir, "lmwarden")
		out, err := exec.Command("go", "build", "-o", serveBin, ".").CombinedOutput()
		if err != nil {
			serveBinErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if serveBinErr != nil {
		tb.Fatal(serveBinErr)
	}
	return serveBin
}

// servedWarden is a running `lmwarden serve` process.
type servedWarden struct {
	cmd      *exec.Cmd
	frontend string // host:port clients use
	admin    string // host:port of the admin API
	exited   chan error
	mu       sync.Mutex
	log      strings.Builder
}

var logAddr = regexp.MustCompile(`(frontend|addr)=(\S+)`)

// mustServe starts `lmwarden serve args...` and waits until it reports its
// frontend and admin addresses; the process is stopped at the end.
func mustServe(tb testing.TB, args ...string) *servedWarden {
	tb.Helper()
	// The userspace datapath unless a test asks for another: as root, auto
	// would load the kernel state into the host's bpffs and network
	// namespace (the kernel path has its own tests, each in a namespace).
	if !slices.Contains(args, "--datapath") {
		args = append(args, "--datapath", "user")
	}
	// The admin token in the test's own directory, not the host's /run.
	if !slices.Contains(args, "--admin-token-file") {
		args = append(args, "--admin-token-file", filepath.Join(tb.TempDir(), "admin.token"))
	}
	w := &servedWarden{cmd: exec.Command(mustServeBinary(tb), append([]string{"serve"}, args...)...), exited: make(chan error, 1)}
	stderr, err := w.cmd.StderrPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := w.cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stderr)
		signalled := false
		for sc.Scan() {
			line := sc.Text()
			w.mu.Lock()
			w.log.WriteString(line + "\n")
			if m := logAddr.FindStringSubmatch(line); m != nil && strings.Contains(line, "msg=serving") {
				w.frontend = m[2]
			} else if m != nil && strings.Contains(line, `msg="admin API"`) {
				w.admin = m[2]
			}
			if !signalled && w.frontend != "" && w.admin != "" {
				signalled = true
				close(ready)
			}
			w.mu.Unlock()
		}
		w.exited <- w.cmd.Wait()
	}()
	tb.Cleanup(func() {
		w.cmd.Process.Kill()
		<-w.exited
	})
	select {
	case <-ready:
	case <-time.After(60 * time.Second):
		// 60 s: in make kernels' VMs, under emulation on a loaded host,
		// loading a kernel datapath and its self-test took over 20.
		tb.Fatalf("lmwarden serve did not start:\n%s", w.logText())
	}
	return w
}

func (w *servedWarden) logText() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.log.String()
}

// models reads GET /api/v1/models.
func (w *servedWarden) models(tb testing.TB) []adminapi.ModelStatus {
	tb.Helper()
	resp, err := http.Get("http://" + w.admin + "/api/v1/models")
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var ms []adminapi.ModelStatus
	if err := json.Unmarshal(body, &ms); err != nil {
		var wrapped struct{ Models []adminapi.ModelStatus }
		if err2 := json.Unmarshal(body, &wrapped); err2 != nil {
			tb.Fatalf("models JSON: %v: %s", err, body)
		}
		ms = wrapped.Models
	}
	return ms
}

// waitIdle waits until the warden counts nothing in flight.
func (w *servedWarden) waitIdle(tb testing.TB) {
	tb.Helper()
	testutil.Eventually(tb, 10*time.Second, "nothing in flight", func() bool {
		n := 0
		for _, m := range w.models(tb) {
			n += m.InFlight
		}
		return n == 0
	})
}

// freeAddr is a loopback address with a port that was free a moment ago.
func freeAddr(tb testing.TB) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func mustServeSim(tb testing.TB, replicas int) []string {
	tb.Helper()
	sv, err := sim.Serve(context.Background(), sim.ServerConfig{Replicas: replicas, Listen: "127.0.0.1:0", Speed: 100})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { sv.Close() })
	return sv.URLs()
}

func replicaFlags(urls []string) []string {
	var out []string
	for _, u := range urls {
		out = append(out, "--replica", u)
	}
	return out
}

// sendTurn sends one streamed Anthropic turn with a session header and
// returns the streamed body.
func sendTurn(tb testing.TB, frontend, session string, history []string) string {
	tb.Helper()
	msgs := make([]map[string]string, len(history))
	for i, h := range history {
		role := "user"
		if i%2 == 1 {
			role = "assistant"
		}
		msgs[i] = map[string]string{"role": role, "content": h}
	}
	body, _ := json.Marshal(map[string]any{"model": "qwen3-4b", "max_tokens": 8, "stream": true, "messages": msgs})
	req, _ := http.NewRequest("POST", "http://"+frontend+"/v1/messages", strings.NewReader(string(body)))
	req.Header.Set("X-Claude-Code-Session-Id", session)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != 200 || !strings.Contains(string(out), "message_stop") {
		tb.Fatalf("status %d err %v body %q", resp.StatusCode, err, out)
	}
	return string(out)
}

func TestServeKeepsEachSessionOnOneReplicaAndSpreadsNewOnes(t *testing.T) {
	urls := mustServeSim(t, 4)
	w := mustServe(t, append([]string{"--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0"}, replicaFlags(urls)...)...)
	sessions := []string{"9d3c0f52-a", "9d3c0f52-b", "9d3c0f52-c", "9d3c0f52-d"}
	history := map[string][]string{}
	for turn := range 6 {
		var wg sync.WaitGroup
		var mu sync.Mutex
		for _, s := range sessions {
			mu.Lock()
			h := append(append([]string(nil), history[s]...), fmt.Sprintf("turn %d of %s: %s", turn, s, strings.Repeat("context ", 100)))
			mu.Unlock()
			wg.Go(func() {
				out := sendTurn(t, w.frontend, s, h)
				mu.Lock()
				history[s] = append(h, fmt.Sprintf("reply of %d bytes", len(out)))
				mu.Unlock()
			})
		}
		wg.Wait()
	}
	w.waitIdle(t)
	ms := w.models(t)
	if len(ms) != 1 {
		t.Fatalf("%d models", len(ms))
	}
	m := ms[0]
	if m.StickyShare != 1 {
		t.Errorf("sticky share %v, want 1", m.StickyShare)
	}
	for _, r := range m.Replicas {
		if r.Requests["new"] != 1 || r.Requests["sticky"] != 5 {
			t.Errorf("replica %d: requests %v, want one new session and its five sticky turns", r.Index, r.Requests)
		}
	}
}

func TestServeStreamsAnthropicSDKConversation(t *testing.T) {
	node, err := exec.LookPath("node")
	_, modErr := os.Stat("../../scripts/clients/node_modules/@anthropic-ai/sdk")
	if err != nil || modErr != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI: node or @anthropic-ai/sdk missing (run scripts/deps.sh): %v %v", err, modErr)
		}
		t.Skip("node or scripts/clients/node_modules missing; run scripts/deps.sh")
	}
	urls := mustServeSim(t, 4)
	w := mustServe(t, append([]string{"--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0"}, replicaFlags(urls)...)...)
	cmd := exec.Command(node, "warden_anthropic.mjs", "http://"+w.frontend, "6")
	cmd.Dir = "../../scripts/clients"
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("SDK conversation: %v\n%s\nwarden log:\n%s", err, out, w.logText())
	}
	w.waitIdle(t) // the script's abort included
	m := w.models(t)[0]
	if m.StickyShare != 1 {
		t.Errorf("sticky share %v, want 1", m.StickyShare)
	}
}

func TestServeShutsDownCleanlyOnSIGTERM(t *testing.T) {
	urls := mustServeSim(t, 2)
	w := mustServe(t, append([]string{"--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0"}, replicaFlags(urls)...)...)
	sendTurn(t, w.frontend, "s", []string{"hello"})
	if err := w.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-w.exited:
		if err != nil {
			t.Fatalf("exit: %v\n%s", err, w.logText())
		}
		w.exited <- nil // for Cleanup
	case <-time.After(20 * time.Second):
		t.Fatal("no exit after SIGTERM")
	}
	if !strings.Contains(w.logText(), "shutting down") {
		t.Errorf("no shutdown line in the log:\n%s", w.logText())
	}
}

func TestServeLogsNeitherPromptsNorRawSessionIDs(t *testing.T) {
	urls := mustServeSim(t, 1)
	w := mustServe(t, append([]string{"--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0", "--log-level", "debug"}, replicaFlags(urls)...)...)
	sendTurn(t, w.frontend, "secret-session-7f3a", []string{"secret prompt text 91c2"})
	w.waitIdle(t)
	// the request's line is written when the exchange ends, and reaches
	// the log through the process's stderr: wait for it, do not assume it
	testutil.Eventually(t, 10*time.Second, "the request's line in the debug log", func() bool {
		return strings.Contains(w.logText(), "msg=request")
	})
	log := w.logText()
	if strings.Contains(log, "secret-session-7f3a") || strings.Contains(log, "secret prompt text") {
		t.Fatalf("log leaks a session id or prompt:\n%s", log)
	}
}

func TestServeFlagErrors(t *testing.T) {
	bin := mustServeBinary(t)
	cases := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--listen", "127.0.0.1:0"}, 2, "--replica"},
		{[]string{"--listen", "127.0.0.1:0", "--replica", "http://127.0.0.1:1", "--datapath", "fast"}, 1, "datapath"},
		{[]string{"--listen", "127.0.0.1:0", "--replica", "http://127.0.0.1:1", "--policy", "magic"}, 1, "policy"},
		{[]string{"--config", "/nonexistent.yaml"}, 1, "nonexistent"},
		{[]string{"--listen", "127.0.0.1:18999", "--replica", "http://127.0.0.1:18999", "--datapath", "user"}, 1, "loop"},
	}
	for _, c := range cases {
		out, err := exec.Command(bin, append([]string{"serve"}, c.args...)...).CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != c.code || !strings.Contains(string(out), c.want) {
			t.Errorf("%v: exit %v, output %q; want code %d mentioning %q", c.args, err, out, c.code, c.want)
		}
	}
}

func TestServeSampleConfigStarts(t *testing.T) {
	// The repository's sample config, its addresses moved to free ports.
	// The sample ships with the repository (docs/config.md points at it):
	// a missing one is a broken tree, not a reason to skip.
	data, err := os.ReadFile("../../scripts/lmwarden.yaml")
	if err != nil {
		t.Fatalf("the sample config: %v", err)
	}
	moved := map[string]string{}
	cfg := regexp.MustCompile(`127\.0\.0\.1:\d{4}`).ReplaceAllStringFunc(string(data), func(a string) string {
		if moved[a] == "" {
			moved[a] = freeAddr(t)
		}
		return moved[a]
	})
	path := filepath.Join(t.TempDir(), "lmwarden.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	w := mustServe(t, "--config", path)
	if n := len(w.models(t)); n < 1 {
		t.Fatalf("%d models", n)
	}
}

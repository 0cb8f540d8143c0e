package l7

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lmwarden/lmwarden/sim"
)

// Real clients through the shim: the official OpenAI SDK (node), curl and
// Go's net/http, each as it behaves by default.

// mustTool finds an external client or skips (fails under CI=true, where
// scripts/deps.sh installs them).
func mustTool(tb testing.TB, name string, need ...string) string {
	tb.Helper()
	path, err := exec.LookPath(name)
	missing := ""
	if err != nil {
		missing = name + " is not installed"
	}
	for _, p := range need {
		if _, err := os.Stat(p); err != nil && missing == "" {
			missing = p + " is missing"
		}
	}
	if missing != "" {
		if os.Getenv("CI") == "true" {
			tb.Fatalf("%s (CI=true: run scripts/deps.sh)", missing)
		}
		tb.Skipf("%s: run scripts/deps.sh", missing)
	}
	return path
}

func TestOpenAISDKStreamsAConversationThroughTheShim(t *testing.T) {
	dir, err := filepath.Abs(filepath.Join("..", "scripts", "clients"))
	if err != nil {
		t.Fatal(err)
	}
	node := mustTool(t, "node", filepath.Join(dir, "node_modules", "openai"))
	sv := mustSim(t, 4, sim.ShapePorts)
	m := mustModel(t, modelConfig(sv.URLs()...))
	_, addr := mustShim(t, m, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// The header in lower case, as a client library may well send it.
	cmd := exec.CommandContext(ctx, node, "warden_openai.mjs", "http://"+addr, "4", "x-session-id")
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("warden_openai.mjs: %v\n%s", err, out)
	}
	waitInFlight(t, m) // the script's abort included
	waitFor(t, "the aborted request to leave the replica", func() bool { return simIdle(sv, 4) })
	var generated uint64
	for i := range 4 {
		generated += sv.Stats(i).GenerationTokens
	}
	// Four turns of at most 16 tokens, and the aborted stream of 20000.
	if generated >= 4*16+20000 {
		t.Errorf("the replicas generated %d tokens: the aborted stream ran to its end", generated)
	}
	st := m.Status()
	if st.StickyShare != 1 {
		t.Errorf("sticky share %v, want 1", st.StickyShare)
	}
	if placed := placedOn(m); nonZero(placed) != 1 {
		t.Errorf("requests per replica %v, want all five on one", placed)
	}
	t.Logf("%s", out)
}

func TestCurlWithExpectContinueAndALargeBodyDoesNotHang(t *testing.T) {
	curl := mustTool(t, "curl")
	sv := mustSim(t, 1, sim.ShapePorts)
	m := mustModel(t, modelConfig(sv.URLs()...))
	_, addr := mustShim(t, m, Options{})
	// 3 MiB of JSON whitespace around a short chat: curl sends such a body
	// with Expect: 100-continue and waits for the interim response.
	body := `{"model":"qwen3-4b","max_tokens":4,` + strings.Repeat(" ", 3<<20) +
		`"messages":[{"role":"user","content":"hello"}]}`
	file := filepath.Join(t.TempDir(), "body.json")
	if err := os.WriteFile(file, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	// --expect100-timeout 20: were the shim silent, curl would wait that
	// long, past this command's deadline, instead of sending anyway.
	out, err := exec.CommandContext(ctx, curl, "-sS", "--fail-with-body", "--expect100-timeout", "20",
		"-H", "Expect: 100-continue", "-H", "Content-Type: application/json",
		"-H", "X-Claude-Code-Session-Id: curl-session",
		"--data-binary", "@"+file, "-w", "\n%{http_code}",
		"http://"+addr+"/v1/chat/completions").CombinedOutput()
	if err != nil {
		t.Fatalf("curl: %v\n%s", err, out)
	}
	if !strings.HasSuffix(string(out), "\n200") || !strings.Contains(string(out), `"usage"`) {
		t.Fatalf("curl output %q", out)
	}
}

func TestGoClientReusesItsConnectionAndStreams(t *testing.T) {
	sv := mustSim(t, 2, sim.ShapePorts)
	m := mustModel(t, modelConfig(sv.URLs()...))
	_, addr := mustShim(t, m, Options{})
	hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{ExpectContinueTimeout: 20 * time.Second}}
	t.Cleanup(hc.CloseIdleConnections)
	var reused int
	for i := range 4 {
		payload, _ := json.Marshal(map[string]any{
			"model": "qwen3-4b", "max_tokens": 8, "stream": true,
			"messages": []map[string]string{{"role": "user", "content": fmt.Sprint("turn ", i)}},
		})
		req, err := http.NewRequest("POST", "http://"+addr+"/v1/chat/completions", bytes.NewReader(payload))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("X-Session-Id", "go-client")
		if i%2 == 1 {
			req.Header.Set("Expect", "100-continue")
		}
		req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
			GotConn: func(ci httptrace.GotConnInfo) {
				if ci.Reused {
					reused++
				}
			},
		}))
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 || !strings.Contains(string(b), "data: [DONE]") {
			t.Fatalf("turn %d: status %d err %v body %q", i, resp.StatusCode, err, b)
		}
	}
	if reused != 3 {
		t.Errorf("the client reused its connection %d times, want 3", reused)
	}
	if placed := placedOn(m); nonZero(placed) != 1 {
		t.Errorf("requests per replica %v, want all four on one", placed)
	}
}

// simIdle reports whether no simulated replica runs or queues a request.
func simIdle(sv *sim.Servers, n int) bool {
	for i := range n {
		if st := sv.Stats(i); st.Running+st.Waiting != 0 {
			return false
		}
	}
	return true
}

func nonZero(xs []uint64) (n int) {
	for _, x := range xs {
		if x != 0 {
			n++
		}
	}
	return n
}

func TestCurlHTTP2AttemptsGetHTTP11OrAFastRefusal(t *testing.T) {
	curl := mustTool(t, "curl")
	sv := mustSim(t, 1, sim.ShapePorts)
	m := mustModel(t, modelConfig(sv.URLs()...))
	s, addr := mustShim(t, m, Options{HeadTimeout: time.Minute})
	run := func(args ...string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		out, err := exec.CommandContext(ctx, curl, append(args, "-sS", "http://"+addr+"/v1/models")...).CombinedOutput()
		if ctx.Err() != nil {
			t.Fatalf("curl %v hung: %s", args, out)
		}
		return string(out), err
	}
	// --http2 on http:// asks to upgrade (Upgrade: h2c): the shim drops the
	// offer and answers in HTTP/1.1.
	if out, err := run("--http2"); err != nil || !strings.Contains(out, "qwen3-4b") {
		t.Fatalf("curl --http2: %v %q", err, out)
	}
	// Prior knowledge sends the HTTP/2 preface: refused at once (505),
	// which curl reports as an error, not after the head timeout.
	if out, err := run("--http2-prior-knowledge"); err == nil {
		t.Fatalf("curl --http2-prior-knowledge succeeded: %q", out)
	}
	if n := s.Stats().Answered[505]; n != 1 {
		t.Fatalf("answered 505 %d times, want 1", n)
	}
}

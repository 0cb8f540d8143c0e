package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lmwarden/lmwarden/agent"
	"github.com/lmwarden/lmwarden/internal/testnet"
	"github.com/lmwarden/lmwarden/sim"
)

// check-config prints every problem at once, each as FILE:LINE: field:
// message, and exits 1; a valid file exits 0 and says what it describes;
// no FILE is a usage error (2).
func TestCheckConfigListsEveryProblemWithItsLineAndField(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(bad, []byte(`admin: 127.0.0.1:9100
poll_interval: fast
models:
  - name: a
    frontend: 127.0.0.1:8000
    replicas: [ftp://x:1, http://127.0.0.1:8101]
    spill_threshold: lots
    polcy: sticky
`), 0o644)
	var out strings.Builder
	if err := runCheckConfig([]string{bad}, &out); err != errConfigProblems {
		t.Fatalf("err %v, want the problems", err)
	}
	for _, want := range []string{
		bad + ":2: poll_interval: ",
		bad + `:6: models[0].replicas[0]: "ftp://x:1": want an http:// URL`,
		bad + ":7: models[0].spill_threshold: ",
		bad + ":8: models[0].polcy: unknown field",
		bad + ": 4 problem(s)",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	if code := run([]string{"check-config", bad}); code != 1 {
		t.Errorf("exit %d for problems, want 1", code)
	}

	out.Reset()
	if err := runCheckConfig([]string{"../../scripts/lmwarden.yaml"}, &out); err != nil {
		t.Fatalf("the sample config: %v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "ok: datapath auto") || !strings.Contains(out.String(), "qwen3-4b-dp: frontend 127.0.0.1:8001, endpoint http://127.0.0.1:8200, 4 ranks") {
		t.Errorf("valid file:\n%s", out.String())
	}
	if code := run([]string{"check-config", "../../scripts/lmwarden.yaml"}); code != 0 {
		t.Errorf("exit %d for a valid file", code)
	}
	if code := run([]string{"check-config"}); code != 2 {
		t.Errorf("exit %d without FILE, want 2", code)
	}
	if code := run([]string{"check-config", filepath.Join(dir, "missing.yaml")}); code != 1 {
		t.Errorf("exit %d for a missing file, want 1", code)
	}

	// What serve refuses after the file: the userspace datapath on a
	// frontend that is a replica's own address.
	loop := filepath.Join(dir, "loop.yaml")
	os.WriteFile(loop, []byte("datapath: user\nmodels:\n  - name: m\n    frontend: 127.0.0.1:8000\n    endpoint: http://127.0.0.1:8000\n    ranks: 2\n"), 0o644)
	out.Reset()
	if err := runCheckConfig([]string{loop}, &out); err != errConfigProblems || !strings.Contains(out.String(), "a loop") {
		t.Errorf("loop with datapath user: %v\n%s", err, out.String())
	}
}

// A replica URL is a server, nothing more: a path (the warden adds the
// API's paths itself), a missing scheme, the same server twice in a model
// are each refused with what to write instead.
func TestCheckConfigRefusesReplicaURLsThatAreNotOneServer(t *testing.T) {
	f := filepath.Join(t.TempDir(), "urls.yaml")
	os.WriteFile(f, []byte(`models:
  - name: a
    frontend: 127.0.0.1:8000
    replicas:
      - http://127.0.0.1:8100/v1
      - 127.0.0.1:8101
      - http://localhost:8102
      - http://LOCALHOST:8102/
`), 0o644)
	var out strings.Builder
	if err := runCheckConfig([]string{f}, &out); err != errConfigProblems {
		t.Fatalf("err %v, want the problems\n%s", err, out.String())
	}
	for _, want := range []string{
		f + `:5: models[0].replicas[0]: "http://127.0.0.1:8100/v1": a path (/v1) is not allowed: write http://127.0.0.1:8100`,
		f + `:6: models[0].replicas[1]: "127.0.0.1:8101" has no scheme: write http://127.0.0.1:8101`,
		f + `:8: models[0].replicas[3]: "http://LOCALHOST:8102/" duplicates replicas[2] (http://localhost:8102)`,
		f + ": 3 problem(s)",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}

// check-config --probe polls each replica once as the poller would: a
// vLLM answers, a server that is not vLLM and a port nobody listens on
// are each named with why, and the file stays valid (exit 0).
func TestCheckConfigProbeWarnsOfReplicasThatAreNotVLLM(t *testing.T) {
	s, err := sim.Serve(context.Background(), sim.ServerConfig{Replicas: 1, Listen: "127.0.0.1:0", Speed: 50})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	other := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, _ *http.Request) { io.WriteString(rw, "up 1\n") }))
	t.Cleanup(other.Close)
	refused := "http://" + testnet.RefusingAddr(t)
	f := filepath.Join(t.TempDir(), "probe.yaml")
	os.WriteFile(f, []byte(fmt.Sprintf("models:\n  - name: m\n    frontend: 127.0.0.1:8000\n    replicas: [%s, %s, %s]\n", s.URLs()[0], other.URL, refused)), 0o644)
	var out strings.Builder
	if err := runCheckConfig([]string{"--probe", f}, &out); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	for _, want := range []string{
		f + ": models[0].replicas[0]: " + s.URLs()[0] + " answers as vLLM",
		f + ": models[0].replicas[1]: warning: " + other.URL + ": " + agent.ErrNoVLLMSeries.Error(),
		f + ": models[0].replicas[2]: warning: " + refused + ": GET /health: dial tcp",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}

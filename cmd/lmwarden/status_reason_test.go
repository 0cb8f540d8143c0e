package main

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/lmwarden/lmwarden/agent"
	"github.com/lmwarden/lmwarden/agent/config"
	"github.com/lmwarden/lmwarden/internal/testutil"
	"github.com/lmwarden/lmwarden/sim"
)

// TestStatusSaysWhyAReplicaIsUnhealthy: beside a replica that is not a
// vLLM server (it answers /health, its /metrics has no vllm: series) the
// replica table says so; a healthy one has no reason.
func TestStatusSaysWhyAReplicaIsUnhealthy(t *testing.T) {
	s, err := sim.Serve(context.Background(), sim.ServerConfig{Replicas: 1, Listen: "127.0.0.1:0", Speed: 50})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	other := &http.Server{Handler: http.HandlerFunc(func(rw http.ResponseWriter, _ *http.Request) {
		io.WriteString(rw, "process_open_fds 9\n")
	})}
	go other.Serve(ln)
	t.Cleanup(func() { other.Close() })

	cfg := config.DefaultConfig()
	cfg.PollInterval = 20 * time.Millisecond
	if err := cfg.ApplyFlags("127.0.0.1:18081", "127.0.0.1:0", "user", []string{s.URLs()[0], "http://" + ln.Addr().String()}); err != nil {
		t.Fatal(err)
	}
	w, err := agent.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	testutil.Eventually(t, 10*time.Second, "replica 1 down", func() bool { return !w.Models()[0].Healthy(1) })

	var out bytes.Buffer
	if err := runStatus([]string{"--admin", w.AdminAddr()}, &out); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(out.String(), "\n")
	if !strings.HasSuffix(lines[3], "REASON") || !strings.HasSuffix(strings.TrimSpace(lines[4]), " -") {
		t.Errorf("healthy replica:\n%s", out.String())
	}
	if !strings.Contains(lines[5], " no ") || !strings.HasSuffix(lines[5], agent.ErrNoVLLMSeries.Error()) {
		t.Errorf("replica that is not vLLM:\n%s", out.String())
	}
}

package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lmwarden/lmwarden/agent"
	"github.com/lmwarden/lmwarden/agent/config"
	"github.com/lmwarden/lmwarden/agent/placement"
	"github.com/lmwarden/lmwarden/internal/testutil"
	"github.com/lmwarden/lmwarden/sim"
)

// mustWriteWarden runs a warden over two sim replicas with a known admin
// token (in a file, as serve makes it) and, when key is set, hash key.
func mustWriteWarden(tb testing.TB, key []byte) (*agent.Warden, string) {
	tb.Helper()
	s, err := sim.Serve(context.Background(), sim.ServerConfig{Replicas: 2, Listen: "127.0.0.1:0", Speed: 50})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Close() })
	cfg := config.DefaultConfig()
	cfg.PollInterval = 20 * time.Millisecond
	cfg.HashKey = key
	cfg.Models[0].AgentHeaders = config.DefaultAgentHeaders
	if err := cfg.ApplyFlags("127.0.0.1:18082", "127.0.0.1:0", "user", s.URLs()); err != nil {
		tb.Fatal(err)
	}
	token := "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	w, err := agent.NewWithOptions(cfg, agent.Options{AdminToken: token})
	if err != nil {
		tb.Fatal(err)
	}
	if err := w.Start(context.Background()); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { w.Close() })
	file := filepath.Join(tb.TempDir(), "admin.token")
	if err := os.WriteFile(file, []byte(token+"\n"), 0o600); err != nil {
		tb.Fatal(err)
	}
	testutil.Eventually(tb, 10*time.Second, "both replicas polled", func() bool { return w.Readiness().Models[0].Ready == 2 })
	return w, file
}

// TestAffinityAndPolicyCommands: each command is the admin API's PUT with
// the token from its file, says what the model does now, and a mistake
// is a usage error (exit 2) before anything is sent.
func TestAffinityAndPolicyCommands(t *testing.T) {
	w, token := mustWriteWarden(t, nil)
	m := w.Models()[0]
	admin := []string{"--admin", w.AdminAddr(), "--admin-token-file", token}
	var out bytes.Buffer
	if err := runAffinity(append([]string{"default", "off"}, admin...), &out); err != nil {
		t.Fatal(err)
	}
	if m.Affinity() || !strings.Contains(out.String(), "model default: affinity off (effective policy vllm-lb)") {
		t.Errorf("affinity off: %v, said %q", m.Affinity(), out.String())
	}
	out.Reset()
	if err := runAffinity(append(admin, "default", "on"), &out); err != nil || !m.Affinity() {
		t.Fatalf("affinity on (flags first): %v, on=%v", err, m.Affinity())
	}
	out.Reset()
	if err := runPolicy(append([]string{"default", "cost"}, admin...), &out); err != nil {
		t.Fatal(err)
	}
	if st := m.Status(); st.Policy != "cost" || !strings.Contains(out.String(), "policy cost") {
		t.Errorf("policy %s, said %q", st.Policy, out.String())
	}

	for _, bad := range [][]string{
		{"default"}, {"default", "maybe"}, {"default", "on", "extra"},
	} {
		if err := runAffinity(append(bad, admin...), &out); !errors.Is(err, errUsage) {
			t.Errorf("affinity %q: %v, want a usage error", bad, err)
		}
	}
	if err := runPolicy(append([]string{"default", "fastest"}, admin...), &out); !errors.Is(err, errUsage) {
		t.Errorf("unknown policy: %v", err)
	}
	if err := runAffinity(append([]string{"nope", "on"}, admin...), &out); err == nil || !strings.Contains(err.Error(), "404") {
		t.Errorf("unknown model: %v", err)
	}
	wrong := filepath.Join(t.TempDir(), "wrong.token")
	os.WriteFile(wrong, []byte("fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210"), 0o600)
	if err := runAffinity([]string{"default", "off", "--admin", w.AdminAddr(), "--admin-token-file", wrong}, &out); err == nil || !strings.Contains(err.Error(), "401") || !m.Affinity() {
		t.Errorf("wrong token: %v (affinity %v)", err, m.Affinity())
	}
	if code := run([]string{"affinity", "default"}); code != 2 {
		t.Errorf("exit %d for a missing argument, want 2", code)
	}
}

// TestDrainCommand: a drained replica takes no new conversation and a
// live one moves at its next turn; --undo ends it.
func TestDrainCommand(t *testing.T) {
	w, token := mustWriteWarden(t, nil)
	m := w.Models()[0]
	admin := []string{"--admin", w.AdminAddr(), "--admin-token-file", token}
	p, err := m.Place(placement.Request{SessionID: "live", Now: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	m.Done(p, time.Now())
	var out bytes.Buffer
	if err := runDrain(append([]string{"default", strconv.Itoa(p.Replica)}, admin...), &out); err != nil {
		t.Fatal(err)
	}
	if !m.Draining(p.Replica) || !strings.Contains(out.String(), "drains: 0 in flight finish there, 1 pinned conversations move at their next turn") {
		t.Fatalf("draining %v, said %q", m.Draining(p.Replica), out.String())
	}
	next, err := m.Place(placement.Request{SessionID: "live", Now: time.Now()})
	if err != nil || next.Replica == p.Replica {
		t.Fatalf("next turn on %d (%v), drained %d", next.Replica, err, p.Replica)
	}
	m.Done(next, time.Now())
	var status bytes.Buffer
	if err := runStatus([]string{"--admin", w.AdminAddr()}, &status); err != nil || !strings.Contains(status.String(), "draining") {
		t.Errorf("status while draining (%v):\n%s", err, status.String())
	}
	out.Reset()
	if err := runDrain(append([]string{"default", strconv.Itoa(p.Replica), "--undo"}, admin...), &out); err != nil {
		t.Fatal(err)
	}
	if m.Draining(p.Replica) || !strings.Contains(out.String(), "takes new conversations again") {
		t.Errorf("after --undo: draining %v, said %q", m.Draining(p.Replica), out.String())
	}
	if err := runDrain(append([]string{"default", "9"}, admin...), &out); err == nil || !strings.Contains(err.Error(), "no such replica") {
		t.Errorf("replica 9: %v", err)
	}
}

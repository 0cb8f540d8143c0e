package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lmwarden/lmwarden/bench"
)

func TestBenchRejectsBadFlagsAsUsageErrors(t *testing.T) {
	cases := [][]string{
		{"--virtual", "--steps", "4,x"},
		{"--virtual", "--steps", "0"},
		{"--virtual", "--arms", "off,bogus"},
		{"--virtual", "--lb-stats", "sometimes"},
		{"--virtual", "--profile", "h100-nothing"},
		{"--virtual", "--duration", "0s"},
		{"--virtual", "--target", "http://127.0.0.1:1"},
		{"--policies", "sticky"},
		{"--virtual", "--policies", "sticky", "--arms", "on"},
		{},
		{"--target", "http://127.0.0.1:1", "--replica-metrics", "http://127.0.0.1:2"},
		{"--target", "http://127.0.0.1:1", "--arms", "on"},
		{"--target", "127.0.0.1:1", "--arms", "on", "--replica-metrics", "http://x"},
		{"--target", "http://127.0.0.1:1", "--api", "grpc", "--arms", "on", "--replica-metrics", "http://x"},
		{"--virtual", "--arrivals", "uniform"},
		{"--virtual", "--arrivals", "poisson:3/min", "--steps", "4"},
		{"--virtual", "--arrivals", "poisson", "--steps", "3/day"},
		{"--virtual", "--steps", "1.5"},
		{"--virtual", "--warmup", "-1s"},
		{"--virtual", "--max-context", "-5"},
		{"--virtual", "--workload", "huge"},
		{"--target", "http://127.0.0.1:1", "--arms", "on", "--replica-metrics", "http://x", "--steps", "1.5x"},
	}
	for _, args := range cases {
		err := runBench(args)
		if !errors.Is(err, errUsage) {
			t.Errorf("lmwarden bench %s: %v, want a usage error", strings.Join(args, " "), err)
		}
	}
}

func TestBenchVirtualWritesReport(t *testing.T) {
	out := t.TempDir()
	err := runBench([]string{"--virtual", "--steps", "4", "--duration", "30s", "--policies", "sticky,round-robin", "--out", out})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := bench.ReadReport(filepath.Join(out, bench.ReportJSON))
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Results) != 2 || rep.Mode != "virtual" {
		t.Fatalf("report: %d results, mode %q", len(rep.Results), rep.Mode)
	}
}

func TestBenchVirtualRunsLongSessionsArrivingAtARate(t *testing.T) {
	out := t.TempDir()
	err := runBench([]string{"--virtual", "--workload", "long", "--arrivals", "poisson:3/min", "--warmup", "1m",
		"--duration", "2m", "--policies", "sticky", "--replicas", "2", "--out", out})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := bench.ReadReport(filepath.Join(out, bench.ReportJSON))
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Results) != 1 || rep.Workload != "long" || rep.Results[0].PerMin != 3 || rep.Results[0].Requests == 0 {
		t.Fatalf("report: workload %q, %+v", rep.Workload, rep.Results)
	}
}

func TestBenchVirtualTakesTheProfileOverridesAndRealRunsRefuseThem(t *testing.T) {
	err := runBench([]string{"--virtual", "--steps", "4", "--duration", "10s", "--max-model-len", "262144"})
	if err == nil || !strings.Contains(err.Error(), "estimated maximum model length is 46704") {
		t.Fatalf("got %v, want vLLM's start-up refusal", err)
	}
	out := t.TempDir()
	if err := runBench([]string{"--virtual", "--steps", "4", "--duration", "10s", "--kv-tokens", "20000", "--max-model-len", "16384", "--policies", "sticky", "--out", out}); err != nil {
		t.Fatal(err)
	}
	err = runBench([]string{"--target", "http://127.0.0.1:1", "--kv-tokens", "20000"})
	if err == nil || !strings.Contains(err.Error(), "--kv-tokens is for --virtual runs") {
		t.Fatalf("got %v", err)
	}
}

func TestBenchReplayAndClaudeCodeFlags(t *testing.T) {
	dir := t.TempDir()
	trace := filepath.Join(dir, "trace.jsonl")
	var b strings.Builder
	for i := range 6 { // three conversations of two turns
		c := i % 3
		ids := []string{"0", fmt.Sprint(10 + c), fmt.Sprint(20 + c)}
		input := 1100
		if i >= 3 {
			ids, input = append(ids[:2], fmt.Sprint(30+c), fmt.Sprint(40+c)), 1700
		}
		fmt.Fprintf(&b, `{"timestamp": %d, "input_length": %d, "output_length": 20, "hash_ids": [%s]}`+"\n",
			i*4000, input, strings.Join(ids, ", "))
	}
	if err := os.WriteFile(trace, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"--virtual", "--replay", trace, "--steps", "4"},
		{"--virtual", "--replay", filepath.Join(dir, "missing.jsonl")},
		{"--virtual", "--replay", trace, "--replay-block", "16"},
		{"--virtual", "--replay", trace, "--replay-speed", "0"},
		{"--virtual", "--replay", trace, "--replay-from", "10s", "--replay-until", "5s"},
		{"--virtual", "--spill-threshold", "many"},
		{"--describe"},
		{"--workload", "claude-code", "--describe"}, // the default profile's context is too small
	} {
		if err := runBench(args); !errors.Is(err, errUsage) {
			t.Errorf("lmwarden bench %s: %v, want a usage error", strings.Join(args, " "), err)
		}
	}
	out := t.TempDir()
	if err := runBench([]string{"--virtual", "--replay", trace, "--replay-speed", "1,2", "--policies", "sticky",
		"--session-header=false", "--spill-threshold", "auto", "--out", out}); err != nil {
		t.Fatal(err)
	}
	rep, err := bench.ReadReport(filepath.Join(out, bench.ReportJSON))
	if err != nil {
		t.Fatal(err)
	}
	if rep.Replay == nil || rep.Replay.Conversations != 3 || rep.Replay.SessionHeader || len(rep.Results) != 2 || rep.Results[1].Requests != 6 {
		t.Fatalf("replay report %+v, %d results", rep.Replay, len(rep.Results))
	}
}

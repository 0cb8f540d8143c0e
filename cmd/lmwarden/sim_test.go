package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lmwarden/lmwarden/sim"
)

func TestSimRejectsBadFlagsAsUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"--shape", "mesh"},
		{"--lb-stats", "hot"},
		{"--profile", "nope"},
		{"--replicas", "0"},
		{"--speed", "-1"},
		{"--reply-tokens", "normal:1:2"},
		{"--reply-tokens", "uniform:9:3"},
		{"--tool-use", "1.5"},
		{"extra"},
	} {
		if err := runSim(args); !errors.Is(err, errUsage) {
			t.Fatalf("%v: got %v, want a usage error", args, err)
		}
	}
}

func TestSimCalibratePrintsTheTable(t *testing.T) {
	var out strings.Builder
	simStdout = &out
	t.Cleanup(func() { simStdout = os.Stdout })
	if err := runSim([]string{"--print-calibration"}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "| KV capacity | 46720 tokens (2920 blocks of 16)") {
		t.Fatalf("calibration output:\n%s", out.String())
	}
}

func TestSimRefusesToStartWhenTheCacheCannotHoldMaxModelLen(t *testing.T) {
	err := runSim([]string{"--max-model-len", "262144"})
	if err == nil || !strings.Contains(err.Error(), "To serve at least one request with the model's max seq len (262144)") ||
		!strings.Contains(err.Error(), "estimated maximum model length is 46704") {
		t.Fatalf("got %v, want vLLM's start-up refusal", err)
	}
	// --kv-tokens makes room
	var out strings.Builder
	simStdout = &out
	t.Cleanup(func() { simStdout = os.Stdout })
	if err := runSim([]string{"--max-model-len", "65536", "--kv-tokens", "70000", "--print-calibration"}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "| KV capacity | 70000 tokens") {
		t.Fatalf("--kv-tokens ignored:\n%s", out.String())
	}
}

// TestSimCalibrateWritesAProfileTheSimulatorRuns measures a simulated
// replica through the command, then starts the simulator on the file.
func TestSimCalibrateWritesAProfileTheSimulatorRuns(t *testing.T) {
	sv, err := sim.Serve(context.Background(), sim.ServerConfig{Replicas: 1, Listen: "127.0.0.1:0", Speed: 2000})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sv.Close() })
	file := filepath.Join(t.TempDir(), "card.yaml")
	var out, progress strings.Builder
	simStdout, simStderr = &out, &progress
	t.Cleanup(func() { simStdout, simStderr = os.Stdout, os.Stderr })
	if err := runSim([]string{"calibrate", "--replica", sv.URLs()[0], "--out", file, "--name", "card"}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(progress.String(), "[14/14] decode, batch 8") || !strings.Contains(out.String(), "KV 46720 tokens") {
		t.Fatalf("progress %q, output %q", progress.String(), out.String())
	}
	out.Reset()
	if err := runSim([]string{"--profile", file, "--print-calibration"}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "Profile `card`") || !strings.Contains(out.String(), "| KV capacity | 46720 tokens") {
		t.Fatalf("%s", out.String())
	}
	if err := runSim([]string{"calibrate"}); !errors.Is(err, errUsage) {
		t.Fatalf("no --replica: %v", err)
	}
}

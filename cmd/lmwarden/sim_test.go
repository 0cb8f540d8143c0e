package main

import (
	"errors"
	"os"
	"strings"
	"testing"
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
	if !strings.Contains(out.String(), "| KV capacity | 39088 tokens (2443 blocks of 16)") {
		t.Fatalf("calibration output:\n%s", out.String())
	}
}

func TestSimRefusesToStartWhenTheCacheCannotHoldMaxModelLen(t *testing.T) {
	err := runSim([]string{"--max-model-len", "262144"})
	if err == nil || !strings.Contains(err.Error(), "To serve at least one request with the model's max seq len (262144)") ||
		!strings.Contains(err.Error(), "estimated maximum model length is 39072") {
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

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
	if err := runSim([]string{"--calibrate"}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "| KV capacity | 40000 tokens (2500 blocks of 16)") {
		t.Fatalf("calibration output:\n%s", out.String())
	}
}

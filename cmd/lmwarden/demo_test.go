package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lmwarden/lmwarden/bench"
	"github.com/lmwarden/lmwarden/internal/vllmlb"
	"github.com/lmwarden/lmwarden/sim"
)

func TestDemoRunsTheABThroughTheWardenAndWritesTheReport(t *testing.T) {
	p, err := sim.LookupProfile("a4000-qwen3-4b")
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	var table strings.Builder
	f := demoFlags{replicas: 2, speed: 100, duration: 60 * time.Second, api: bench.APIAnthropic, seed: 1}
	if err := demo(context.Background(), &table, f, []int{2}, p, vllmlb.Fresh, out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(table.String(), "datapath") || !strings.Contains(table.String(), "→") {
		t.Fatalf("demo output lacks the datapath or the table:\n%s", table.String())
	}
	rep, err := bench.ReadReport(filepath.Join(out, bench.ReportJSON))
	if err != nil {
		t.Fatal(err)
	}
	for _, arm := range []string{bench.ArmOff, bench.ArmOn} {
		x, ok := rep.Find(2, arm)
		if !ok || x.Requests == 0 || x.Failed() {
			t.Fatalf("arm %s: %+v", arm, x)
		}
	}
	for _, f := range []string{bench.PlotTTFT, bench.PlotHitRate, bench.PlotThroughput, bench.PlotTask, bench.ReportCSV} {
		if _, err := os.Stat(filepath.Join(out, f)); err != nil {
			t.Fatal(err)
		}
	}
}

func TestDemoRejectsBadFlags(t *testing.T) {
	for _, args := range [][]string{{"--speed", "0"}, {"--steps", "a"}, {"--api", "soap"}, {"--profile", "nope"}, {"extra"}} {
		if err := runDemo(args); err == nil || !strings.Contains(err.Error(), "usage") {
			t.Errorf("demo %v: %v, want a usage error", args, err)
		}
	}
}

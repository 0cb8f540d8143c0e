package bench

import (
	"context"
	"testing"
	"time"
)

// BenchmarkVirtualReferenceRun times the reference run (5 steps × 3
// simulated minutes × 2 arms) on the virtual clock; the budget is 60 s of
// wall time on a 2-core machine. Reported per run, with requests/s of wall.
func BenchmarkVirtualReferenceRun(b *testing.B) {
	cfg := VirtualConfig{
		Profile: mustProfile(b, "a4000-qwen3-4b"), Replicas: 4, Steps: Sessions(4, 8, 16, 24, 32),
		Duration: 3 * time.Minute, Arms: mustArms(b, "off,on"), Seed: 1,
	}
	requests := 0
	for b.Loop() {
		rep, err := RunVirtual(context.Background(), cfg)
		if err != nil {
			b.Fatal(err)
		}
		for _, x := range rep.Results {
			requests += x.Requests + x.Cut
		}
	}
	b.ReportMetric(float64(requests)/b.Elapsed().Seconds(), "requests/s")
}

// BenchmarkVirtualClaudeCodeAtTheCache times the Claude Code workload at
// 1x its eight replicas' cache (51 sessions of 100K-250K tokens on replicas
// of 855K): an hour of warm-up and 20 measured minutes, simulated. The
// virtual clock must stay fast with contexts this long; docs/sim.md says
// where its time goes.
func BenchmarkVirtualClaudeCodeAtTheCache(b *testing.B) {
	cfg := VirtualConfig{
		Profile: mustProfile(b, "h200-qwen3-4b"), Replicas: 8, Steps: []Step{{CacheLoad: 1}},
		Warmup: time.Hour, Duration: 20 * time.Minute, Arms: mustArms(b, "sticky"), Seed: 1, Workload: ClaudeCodeShape,
	}
	requests, tokens := 0, 0.0
	for b.Loop() {
		rep, err := RunVirtual(context.Background(), cfg)
		if err != nil {
			b.Fatal(err)
		}
		for _, x := range rep.Results {
			requests += x.Requests + x.Cut
			tokens += float64(x.LiveContext)
		}
	}
	b.ReportMetric(float64(requests)/b.Elapsed().Seconds(), "requests/s")
	b.ReportMetric(tokens/float64(b.N), "live-context-tokens")
}

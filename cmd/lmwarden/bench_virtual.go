package main

import (
	"context"
	"fmt"
	"os"

	"github.com/lmwarden/lmwarden/agent/config"
	"github.com/lmwarden/lmwarden/bench"
)

// runVirtual is `lmwarden bench --virtual`: replicas and placement
// simulated in this process.
func (f *benchFlags) runVirtual(ctx context.Context, plan benchPlan, tracer bench.Tracer) (*bench.Report, error) {
	for _, name := range []string{"target", "admin", "replica-metrics", "speed", "api", "timeout", "model", "model-name"} {
		if f.set[name] {
			return nil, fmt.Errorf("--%s is for real runs, not --virtual: %w", name, errUsage)
		}
	}
	f.overrides.name = f.profile
	p, err := f.overrides.resolve()
	if err != nil {
		return nil, err
	}
	if f.pollInterval <= 0 {
		return nil, fmt.Errorf("--poll-interval %v: want a positive duration: %w", f.pollInterval, errUsage)
	}
	if f.replicas < 1 {
		return nil, fmt.Errorf("--replicas %d: want at least 1: %w", f.replicas, errUsage)
	}
	admission, err := admissionFor(f.admission, f.admissionTimeout, f.admissionFill, f.admissionQuantum)
	if err != nil {
		return nil, err
	}
	spill, err := spillThresholdFor(f.spillThreshold)
	if err != nil {
		return nil, err
	}
	if !f.set["lb-stats"] {
		plan.lb = p.LBStats() // as the profile's vLLM behaves
	}
	return bench.RunVirtual(ctx, bench.VirtualConfig{
		Profile: p, Replicas: f.replicas, Steps: plan.steps, Duration: f.duration, Warmup: f.warmup, Arms: plan.arms,
		FreshReplicas: plan.fresh, LBStats: plan.lb, Seed: f.seed, Progress: bench.NewProgress(os.Stderr, plan.phases),
		PollInterval:    f.pollInterval,
		Trace:           tracer,
		Admission:       admission,
		Workload:        plan.shape,
		MaxContext:      f.maxContext,
		Replay:          plan.replay,
		NoSessionHeader: !f.sessionHeader,
		NoAgentKey:      !f.agentKey,
		NoBodyKey:       !f.bodyKey,
		SpillThreshold:  spill,
	})
}

// spillThresholdFor reads --spill-threshold: "" (the warden's default), a
// number, auto or prefill.
func spillThresholdFor(v string) (config.SpillThreshold, error) {
	if v == "" {
		return config.SpillThreshold{}, nil
	}
	if v == "auto" || v == "prefill" {
		return config.ParseSpillThreshold(v)
	}
	var n int
	if _, err := fmt.Sscanf(v, "%d", &n); err != nil || n < 1 || fmt.Sprint(n) != v {
		return config.SpillThreshold{}, fmt.Errorf("--spill-threshold %q: want a number of requests in flight, auto or prefill: %w", v, errUsage)
	}
	return config.SpillThreshold{N: n}, nil
}

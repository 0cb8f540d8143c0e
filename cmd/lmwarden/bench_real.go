package main

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/lmwarden/lmwarden/agent"
	"github.com/lmwarden/lmwarden/bench"
)

// runReal is `lmwarden bench --target URL`: real HTTP against a warden or
// a replica.
func (f *benchFlags) runReal(ctx context.Context, plan benchPlan) (*bench.Report, error) {
	if f.target == "" {
		return nil, fmt.Errorf("--target is required (or --virtual): %w", errUsage)
	}
	for _, name := range overrideFlags {
		if f.set[name] {
			return nil, fmt.Errorf("--%s is for --virtual runs (a real replica has its own): %w", name, errUsage)
		}
	}
	for _, name := range []string{"admission", "admission-timeout", "admission-fill", "admission-quantum", "spill-threshold"} {
		if f.set[name] {
			return nil, fmt.Errorf("--%s is for --virtual runs (a real warden has its own, in its config): %w", name, errUsage)
		}
	}
	if f.api != bench.APIAnthropic && f.api != bench.APIOpenAI {
		return nil, fmt.Errorf("--api %q: want anthropic or openai: %w", f.api, errUsage)
	}
	if len(plan.arms) > 1 && f.admin == "" {
		return nil, fmt.Errorf("%d arms need --admin to switch between them (or --arms on for one arm): %w", len(plan.arms), errUsage)
	}
	if f.admin == "" && len(f.replicaMetrics) == 0 {
		return nil, fmt.Errorf("give --replica-metrics (repeat per replica) or --admin to read the replicas' counters: %w", errUsage)
	}
	if f.speed <= 0 {
		return nil, fmt.Errorf("--speed %v: want > 0: %w", f.speed, errUsage)
	}
	for name, u := range map[string]string{"target": f.target, "admin": f.admin} {
		if u != "" && !strings.HasPrefix(u, "http://") && !strings.HasPrefix(u, "https://") {
			return nil, fmt.Errorf("--%s %q: want an http:// URL: %w", name, u, errUsage)
		}
	}
	profile, lbLabel := "", ""
	if f.set["profile"] {
		profile = f.profile
	}
	for _, s := range plan.steps {
		if s.CacheLoad > 0 && profile == "" {
			return nil, fmt.Errorf("step %s is a load: give --profile, the replicas' profile, to size it: %w", s, errUsage)
		}
	}
	if f.set["lb-stats"] {
		lbLabel = plan.lb.String() // else the warden's (or vLLM's) own setting, unknown here
	}
	// With --admin the run switches the warden to each arm and back
	// through its admin API: writes, which need the warden's token.
	var token string
	if f.admin != "" {
		var err error
		if token, err = agent.ReadAdminToken(f.adminTokenFile); err != nil {
			return nil, err
		}
	}
	return bench.RunReal(ctx, bench.RealConfig{
		Target: f.target, API: f.api, Model: f.model, Admin: f.admin, AdminToken: token, ModelName: f.modelName,
		ReplicaMetrics: f.replicaMetrics, Steps: plan.steps, Duration: f.duration, Warmup: f.warmup, Arms: plan.arms, Seed: f.seed,
		Speed: f.speed, RequestTimeout: f.timeout, Profile: profile, LBStats: lbLabel,
		Progress: bench.NewProgress(os.Stderr, plan.phases), Workload: plan.shape, MaxContext: f.maxContext,
		Replay: plan.replay, NoSessionHeader: !f.sessionHeader,
	})
}

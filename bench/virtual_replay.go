package bench

import (
	"context"
	"time"
)

// runVirtualReplay replays cfg.Replay's slice once a step (speed) and arm.
func runVirtualReplay(ctx context.Context, cfg VirtualConfig) (*Report, error) {
	plan, err := newReplayPlan(*cfg.Replay)
	if err != nil {
		return nil, err
	}
	wall := time.Now()
	cache := cfg.Replicas * cfg.Profile.KVTokens()
	ideal, _ := plan.ideal(cache)
	rep := &Report{
		Mode: "virtual", Profile: cfg.Profile.Name, Replicas: cfg.Replicas, LBStats: cfg.LBStats.String(),
		Seed: cfg.Seed, Steps: cfg.Steps, PollSeconds: cfg.PollInterval.Seconds(),
		ArmPolicies: map[string]string{}, WorkloadIdeal: Num(ideal), PercentileMethod: PercentileMethod,
		Started: wall.UTC(), Workload: WorkloadReplay, MaxContext: cfg.Profile.ContextLimit(),
		Replay: plan.info(!cfg.NoSessionHeader), SpillThreshold: cfg.spill(),
	}
	for _, a := range cfg.Arms {
		rep.Arms = append(rep.Arms, a.Name)
		rep.ArmPolicies[a.Name] = a.describe(cfg.LBStats, false)
	}
	perConversation := float64(len(plan.rows)) / float64(len(plan.convs))
	err = playWindows(cfg, rep, wall, func(world *virtualWorld, variant uint64, step Step, arm Arm) (Result, error) {
		world.perSession = perConversation
		counts := &replayCounts{}
		flows := plan.flows(replayOptions{speed: step.ReplaySpeed, seed: cfg.Seed, variant: variant,
			noHeader: cfg.NoSessionHeader, tokens: true}, counts)
		res, err := world.runFlows(ctx, flows, step, arm)
		if err != nil {
			return res, err
		}
		res.Replay = plan.result(step.ReplaySpeed, counts, cache)
		res.IdealHitRate = res.Replay.IdealHitRate
		return res, nil
	})
	return rep, err
}

// WorkloadReplay names a replay in reports.
const WorkloadReplay = "replay"

// info says what the plan replays, for the report.
func (p *replayPlan) info(sessionHeader bool) *ReplayInfo {
	t := p.cfg.Trace
	continued := 0
	for _, e := range p.conv.parent {
		if e >= 0 {
			continued++
		}
	}
	return &ReplayInfo{Trace: t.Name, Block: t.Block, FromSeconds: p.cfg.From.Seconds(), UntilSeconds: p.cfg.Until.Seconds(),
		SpanSeconds: p.span().Seconds(), Requests: len(p.rows), Conversations: len(p.convs),
		TraceRequests: len(t.Rows), TraceConversations: len(p.conv.rows), TraceContinued: continued,
		SessionHeader: sessionHeader}
}

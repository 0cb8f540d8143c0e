package bench

import "context"

// replay prepares a real run's replay: the report says what is played, and
// each step and arm is one flowWindow over the slice.
func (r *realRun) replay(ctx context.Context, rep *Report) (func(si, ai int, step Step, arm Arm) (Result, error), error) {
	plan, err := newReplayPlan(*r.cfg.Replay)
	if err != nil {
		return nil, err
	}
	cache := 0 // the replicas' total KV cache, as they report it
	for _, s := range r.poller.poll(ctx) {
		if s == nil || s.KVCapacity <= 0 {
			cache = 0 // one replica unknown: no honest total
			break
		}
		cache += int(s.KVCapacity)
	}
	ideal, _ := plan.ideal(cache)
	rep.Workload, rep.WorkloadIdeal, rep.StepSeconds = WorkloadReplay, Num(ideal), 0
	rep.Replay = plan.info(!r.cfg.NoSessionHeader)
	perConversation := float64(len(plan.rows)) / float64(len(plan.convs))
	return func(si, ai int, step Step, arm Arm) (Result, error) {
		counts := &replayCounts{}
		flows := plan.flows(replayOptions{speed: step.ReplaySpeed, seed: r.cfg.Seed, variant: textVariant(si, ai),
			noHeader: r.cfg.NoSessionHeader}, counts)
		res, err := r.flowWindow(ctx, flows, step, arm, perConversation)
		if err != nil {
			return res, err
		}
		res.Replay = plan.result(step.ReplaySpeed, counts, cache)
		res.IdealHitRate = res.Replay.IdealHitRate
		return res, nil
	}, nil
}

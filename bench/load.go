package bench

import (
	"fmt"
	"math"
	"time"

	"github.com/lmwarden/lmwarden/sim"
)

// Load as live context over the cache. A step stated as a load ("1.5x")
// asks for sessions whose live context (each session that has started and
// not finished holds its latest prompt) is that many times the replicas'
// total KV cache. The estimate plays the workload's sessions on paper with
// the profile's step costs, at the speed of a cache that holds everything
// (every turn computes only its new tokens):
//
//   - each request takes its client pause, the prefill of its new tokens
//     (in chunks of max_num_batched_tokens) and the decode of its output at
//     the batch the load puts on a replica (live sessions ÷ replicas, each
//     at the mean context), slowed by the share of the replica's time that
//     the prefills of its sessions take (a step that carries a prefill
//     chunk advances every decode by one token only);
//   - the mean context of a live session is weighted by those times (a
//     session holds a turn's prompt for as long as the turn takes);
//   - closed loop: sessions = load × total cache ÷ mean context;
//   - open loop: arrivals a minute = those sessions ÷ the mean session
//     duration (Little's law: live sessions = arrival rate × duration).
//
// Past the cache, turns recompute what was evicted and take longer than
// this, so an open loop then holds more live context than it was sized for
// (and may grow without bound: that is overload); the report's measured
// live context (live ctx) says what each window held.

// LoadEstimate is how a load was sized.
type LoadEstimate struct {
	Load float64
	// CacheTokens is the replicas' total KV capacity.
	CacheTokens float64
	// MeanContext is a live session's mean context (tokens, time-weighted).
	MeanContext float64
	// SessionSeconds is the mean session duration at that speed.
	SessionSeconds float64
	// Sessions is the live sessions the load asks for, PerMin the arrivals
	// a minute that keep that many live.
	Sessions, PerMin float64
}

// EstimateLoad sizes a load for the workload on replicas of profile p,
// compacting at limit (the model's context; 0: never).
func EstimateLoad(w *Workload, p sim.Profile, replicas, limit int, load float64) LoadEstimate {
	if w.Shape.claudeCode {
		return w.ccEstimateLoad(p, replicas, limit, load)
	}
	cache := float64(replicas * p.NumBlocks() * p.BlockSize)
	est := LoadEstimate{Load: load, CacheTokens: cache}
	plans := make([]sessionPlan, w.sampleSize())
	for i := range plans {
		plans[i] = w.plan(i)
	}
	sys := w.SystemSectionTokens()
	// Start from the request-weighted mean prompt, then let the batch it
	// implies set the times, and the times the weights; a few rounds settle.
	var prompts, requests float64
	for _, pl := range plans {
		pl.play(sys, limit, func(r playedRequest) { prompts += float64(r.Prompt); requests++ })
	}
	est.MeanContext = prompts / requests
	prefillShare := 0.0 // of a replica's time
	for range 8 {
		est.Sessions = load * cache / est.MeanContext
		perReplica := est.Sessions / float64(replicas)
		batch := int(math.Round(min(max(perReplica, 1), float64(p.MaxNumSeqs))))
		decode := p.StepCost(repeatChunk(sim.Chunk{Context: int(est.MeanContext), Tokens: 1}, batch)).Seconds()
		decode /= 1 - min(prefillShare, 0.9)
		var weighted, total, prefill float64
		for _, pl := range plans {
			pl.play(sys, limit, func(r playedRequest) {
				pre := prefillSeconds(p, r.Reused, r.Uncache)
				t := r.Pause.Seconds() + pre + float64(r.Output)*decode
				weighted += float64(r.Prompt) * t
				total += t
				prefill += pre
			})
		}
		est.MeanContext = weighted / total
		est.SessionSeconds = total / float64(len(plans))
		prefillShare = perReplica * prefill / total // sessions a replica × their share of time in prefill
	}
	est.Sessions = load * cache / est.MeanContext
	est.PerMin = est.Sessions / est.SessionSeconds * 60
	return est
}

// prefillSeconds prices computing n new tokens on top of ctx cached ones,
// alone on a replica, in chunks of the scheduler's token budget.
func prefillSeconds(p sim.Profile, ctx, n int) float64 {
	var d time.Duration
	for done := 0; done < n; {
		c := min(n-done, p.MaxNumBatchedTokens)
		d += p.StepCost([]sim.Chunk{{Context: ctx + done, Tokens: c}})
		done += c
	}
	return d.Seconds()
}

func repeatChunk(c sim.Chunk, n int) []sim.Chunk {
	out := make([]sim.Chunk, n)
	for i := range out {
		out[i] = c
	}
	return out
}

// sampleSize is how many sessions the workload-wide estimates (ideal hit
// rate, load, requests a session) draw: a heavy tail needs many, and a
// shape with a plan draws sizes without text.
func (w *Workload) sampleSize() int {
	if w.Shape.claudeCode {
		return ccPaperSessions
	}
	if w.Shape.plan != nil {
		return 4096
	}
	return 64
}

// meanRequests is the mean number of requests a session sends, compaction
// requests included, at limit.
func (w *Workload) meanRequests(limit int) float64 {
	if w.Shape.claudeCode {
		return w.ccMeanRequests(limit)
	}
	n := w.sampleSize()
	var requests int
	for i := range n {
		w.plan(i).play(w.SystemSectionTokens(), limit, func(playedRequest) { requests++ })
	}
	return float64(requests) / float64(n)
}

// ResolveSteps sizes the steps stated as a load for replicas of profile p
// (compaction at limit) and says how, one line a load step for the
// report's notes. Other steps are returned as they are.
func ResolveSteps(steps []Step, w *Workload, p sim.Profile, replicas, limit int) ([]Step, []string, error) {
	out := make([]Step, len(steps))
	var notes []string
	for i, s := range steps {
		out[i] = s
		if s.CacheLoad > 0 {
			est := EstimateLoad(w, p, replicas, limit, s.CacheLoad)
			if s.Open() {
				out[i].PerMin = math.Round(est.PerMin*100) / 100
			} else {
				out[i].Sessions = max(1, int(math.Round(est.Sessions)))
			}
			notes = append(notes, fmt.Sprintf("%s: %.1f live sessions of %.0f tokens (mean, time-weighted) for %.0f tokens of KV cache; "+
				"a session lasts %.0fs when its history stays cached (%d replicas of %s)",
				out[i], est.Sessions, est.MeanContext, est.CacheTokens, est.SessionSeconds, replicas, p.Name))
		}
		if !out[i].sized() {
			return nil, nil, fmt.Errorf("%w: step %s is empty", ErrBadConfig, out[i])
		}
	}
	return out, notes, nil
}

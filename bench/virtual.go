package bench

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"time"

	"github.com/lmwarden/lmwarden/agent/config"
	"github.com/lmwarden/lmwarden/agent/placement"
	"github.com/lmwarden/lmwarden/internal/vllmlb"
	"github.com/lmwarden/lmwarden/sim"
)

// VirtualConfig is a run on the virtual clock: the workload, placement.Model's
// placement and sim's replica engines in one goroutine, no sockets.
type VirtualConfig struct {
	Profile  sim.Profile
	Replicas int
	Steps    []Step        // closed-loop sessions, open-loop rates or loads (steps.go)
	Duration time.Duration // per step and arm, simulated
	// Warmup runs each window's sessions this long before it is measured
	// (simulated): an open loop then starts from a population in
	// progress, not from idle replicas.
	Warmup time.Duration
	Arms   []Arm
	// FreshReplicas runs every step and arm on new replicas (policy
	// comparisons). Otherwise the whole run shares one set of replicas and
	// one warden, arms back to back, as the reference A/B did.
	FreshReplicas bool
	LBStats       vllmlb.StatsMode
	Seed          uint64
	// PollInterval is how often replica stats feed Model.ObserveReplica and
	// the busy count, as the warden's poller would (default 250 ms).
	PollInterval time.Duration
	Progress     *Progress
	// Trace, if set, receives every poll and answered request (bench/trace.go).
	Trace Tracer
	// Admission, if its Mode is set, replaces the model's admission settings
	// (placement.Model.SetAdmission; virtual_admission.go).
	Admission config.AdmissionConfig
	// Workload sizes the sessions (zero: DefaultShape; workload_shape.go).
	Workload WorkloadShape
	// MaxContext is the model's context in tokens, where sessions that
	// compact do (zero: the profile's ContextLimit).
	MaxContext int
	// Replay, if set, replays a trace instead of generating sessions
	// (replay.go; the steps are then its speeds).
	Replay *ReplayConfig
	// NoSessionHeader sends no session id, as a client without one.
	NoSessionHeader bool
	// SpillThreshold, if set (N or Auto), replaces the warden's default
	// spill threshold (agent config spill_threshold).
	SpillThreshold config.SpillThreshold
}

// DefaultPollInterval is the warden poller's period the virtual run mimics.
const DefaultPollInterval = 250 * time.Millisecond

// RunVirtual runs every step and arm and returns the report. Canceling ctx
// stops between slices of simulated time.
func RunVirtual(ctx context.Context, cfg VirtualConfig) (*Report, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = DefaultPollInterval
	}
	if cfg.Replay != nil {
		return runVirtualReplay(ctx, cfg)
	}
	if cfg.MaxContext <= 0 {
		cfg.MaxContext = cfg.Profile.ContextLimit()
	}
	wall := time.Now()
	w := NewWorkloadShape(cfg.Seed, cfg.Workload)
	if err := w.checkContext(cfg.MaxContext); err != nil {
		return nil, err
	}
	steps, notes, err := ResolveSteps(cfg.Steps, w, cfg.Profile, cfg.Replicas, cfg.MaxContext)
	if err != nil {
		return nil, err
	}
	cfg.Steps = steps
	rep := &Report{
		Mode: "virtual", Profile: cfg.Profile.Name, Replicas: cfg.Replicas, LBStats: cfg.LBStats.String(),
		Seed: cfg.Seed, StepSeconds: cfg.Duration.Seconds(), Steps: cfg.Steps, PollSeconds: cfg.PollInterval.Seconds(),
		ArmPolicies: map[string]string{}, WorkloadIdeal: Num(w.IdealHitRate(w.sampleSize(), cfg.MaxContext)),
		PercentileMethod: PercentileMethod, Started: wall.UTC(), Workload: w.Shape.Name, MaxContext: cfg.MaxContext,
		StepNotes: notes, SpillThreshold: cfg.spill(),
	}
	perSession := w.meanRequests(cfg.MaxContext)
	for _, a := range cfg.Arms {
		rep.Arms = append(rep.Arms, a.Name)
		rep.ArmPolicies[a.Name] = a.describe(cfg.LBStats, false)
	}
	err = playWindows(cfg, rep, wall, func(world *virtualWorld, variant uint64, step Step, arm Arm) (Result, error) {
		world.perSession = perSession
		return world.runArm(ctx, w, variant, step, arm)
	})
	return rep, err
}

// playWindows plays every step and arm of a run with play (each on the
// replicas worldSource hands it), appends the results to rep and closes it.
func playWindows(cfg VirtualConfig, rep *Report, wall time.Time, play func(*virtualWorld, uint64, Step, Arm) (Result, error)) error {
	worlds := worldSource{cfg: cfg}
	for si, step := range cfg.Steps {
		for ai, arm := range cfg.Arms {
			world, err := worlds.next()
			if err != nil {
				return err
			}
			cfg.Progress.Begin(step, arm.Name)
			res, err := play(world, textVariant(si, ai), step, arm)
			if err != nil {
				return err
			}
			rep.Results = append(rep.Results, res)
			cfg.Progress.End(summary(res))
		}
	}
	cfg.Progress.Finish()
	rep.WallSeconds = time.Since(wall).Seconds()
	return nil
}

// worldSource hands each window its replicas and placement: new ones for
// a policy comparison, else the one set the whole run shares.
type worldSource struct {
	cfg    VirtualConfig
	shared *virtualWorld
}

func (s *worldSource) next() (*virtualWorld, error) {
	if s.shared != nil && !s.cfg.FreshReplicas {
		return s.shared, nil
	}
	world, err := newVirtualWorld(s.cfg)
	if err != nil {
		return nil, err
	}
	s.shared = world
	return world, nil
}

// textVariant numbers the step-arm windows of a run (see SessionVariant).
func textVariant(step, arm int) uint64 { return uint64(step)<<8 | uint64(arm) }

// PercentileMethod is stated in every report.
const PercentileMethod = "nearest-rank percentiles; per session = each session's median, then across sessions"

func (cfg *VirtualConfig) check() error {
	switch {
	case cfg.Replicas < 1:
		return fmt.Errorf("%w: replicas %d", ErrBadConfig, cfg.Replicas)
	case len(cfg.Steps) == 0:
		return fmt.Errorf("%w: no steps", ErrBadConfig)
	case cfg.Duration <= 0 && cfg.Replay == nil:
		return fmt.Errorf("%w: duration %v", ErrBadConfig, cfg.Duration)
	case cfg.Replay != nil && cfg.Warmup > 0:
		return fmt.Errorf("%w: a replay has no warm-up (play an earlier slice of the trace instead)", ErrBadConfig)
	case cfg.Warmup < 0:
		return fmt.Errorf("%w: warm-up %v", ErrBadConfig, cfg.Warmup)
	case len(cfg.Arms) == 0:
		return fmt.Errorf("%w: no arms", ErrBadConfig)
	case cfg.Profile.Name == "":
		return fmt.Errorf("%w: no profile", ErrBadConfig)
	}
	for _, s := range cfg.Steps {
		if s.CacheLoad <= 0 && !s.sized() {
			return fmt.Errorf("%w: step %s", ErrBadConfig, s)
		}
		if (s.ReplaySpeed > 0) != (cfg.Replay != nil) {
			return fmt.Errorf("%w: step %s: a replay's steps are its speeds, and only a replay's", ErrBadConfig, s)
		}
	}
	return nil
}

func summary(r Result) string {
	s := fmt.Sprintf("hit %s, TTFT p50 %s p95 %s, %d requests", fmtPct(r.HitRate), fmtSec(r.TTFTP50), fmtSec(r.TTFTP95), r.Requests)
	if r.Failed() {
		s += fmt.Sprintf(", %d FAILED", r.Errors+r.Timeouts)
	}
	return s
}

// virtualWorld is one set of simulated replicas and the warden's placement
// state in front of them, with a poller on the virtual clock.
type virtualWorld struct {
	cfg   VirtualConfig
	v     *sim.Virtual
	model *placement.Model
	rec   *recorder // the window being measured, nil between windows
	live  liveSet   // the window's live sessions' context (tasks.go)
	// perSession is the workload's mean requests a session (sessions/h).
	perSession float64
	parked     []*parkedTurn // requests waiting at the warden (virtual_admission.go)
	nextID     uint64
	net        clientPath   // the clients' network (network.go)
	loop       *sessionLoop // sessions that go on into the next window (virtual_sessions.go)
}

func newVirtualWorld(cfg VirtualConfig) (*virtualWorld, error) {
	mc := config.DefaultConfig().Models[0]
	mc.Name = "bench"
	mc.Frontend = "127.0.0.1:8000"
	mc.Replicas = nil
	for i := range cfg.Replicas {
		mc.Replicas = append(mc.Replicas, fmt.Sprintf("http://127.0.0.1:%d", 8100+i))
	}
	mc.VLLMLBStats = cfg.LBStats.String()
	if cfg.SpillThreshold.Auto || cfg.SpillThreshold.N > 0 {
		mc.SpillThreshold = cfg.SpillThreshold
	}
	// The session-hash key comes from the seed too, so that `hash` (and
	// every table ordered by hash) places the same sessions alike run after run.
	var key [16]byte
	binary.LittleEndian.PutUint64(key[:8], cfg.Seed)
	binary.LittleEndian.PutUint64(key[8:], 0x6c6d7761726465e6)
	hasher := placement.NewSessionHasher(key[:])
	model, err := placement.NewModel(mc, placement.ModelOptions{Seed: cfg.Seed, Hasher: &hasher})
	if err != nil {
		return nil, fmt.Errorf("bench: placement model: %w", err)
	}
	w := &virtualWorld{cfg: cfg, v: sim.NewVirtual(cfg.Profile, cfg.Replicas), model: model,
		net: clientPath{rtt: cfg.Profile.ClientRTT}}
	if err := w.setAdmission(); err != nil {
		return nil, fmt.Errorf("bench: admission: %w", err)
	}
	w.poll()
	return w, nil
}

// poll is the warden's poller and sweeper on the virtual clock: it observes,
// expires idle sessions, and schedules itself again. Started once per world.
func (w *virtualWorld) poll() {
	w.observe()
	w.model.ExpireIdle(w.v.Now(), expireBudget)
	w.v.At(w.v.Now().Add(w.cfg.PollInterval), w.poll)
}

// drain lets virtual time pass until no replica runs or queues anything
// (the previous window's aborted requests end with their step), as the real
// runner waits before a window, so a window starts from idle replicas and
// the placement sees them idle.
func (w *virtualWorld) drain() {
	for range 1000 {
		idle := true
		for i := range w.v.Replicas() {
			if s := w.v.Stats(i); s.Running+s.Waiting > 0 {
				idle = false
			}
		}
		if idle {
			break
		}
		w.v.RunUntil(w.v.Now().Add(10 * time.Millisecond))
	}
	w.observe()
}

// expireBudget is the Warden's sweep budget per poll tick.
const expireBudget = 4096

// observe feeds the model every replica's stats, as one poll would, and
// samples the window's counters. Windows call it at their start and end for
// exact baselines without starting another poll chain.
func (w *virtualWorld) observe() {
	now := w.v.Now()
	samples := make([]*replicaSample, w.v.Replicas())
	for i := range samples {
		s := w.v.Stats(i)
		w.model.ObserveReplica(i, placement.ReplicaMetrics{
			Healthy: true, Running: float64(s.Running), Waiting: float64(s.Waiting), KVUsage: s.KVUsage,
			PrefixQueries: float64(s.PrefixQueries), PrefixHits: float64(s.PrefixHits),
			PromptTokens: float64(s.PromptTokens), GenerationTokens: float64(s.GenerationTokens),
			TTFTSum: s.TTFTSum, TTFTCount: float64(s.TTFTCount), KVCapacityTokens: float64(s.KVCapacityTokens),
		}, now)
		if w.cfg.Trace != nil && w.rec != nil {
			w.cfg.Trace.Poll(now, i, s)
		}
		samples[i] = &replicaSample{Running: float64(s.Running), Waiting: float64(s.Waiting),
			PrefixQueries: float64(s.PrefixQueries), PrefixHits: float64(s.PrefixHits),
			RequestsDone: float64(s.RequestsDone), KVCapacity: float64(s.KVCapacityTokens)}
	}
	if w.rec != nil {
		w.rec.poll(samples)
		w.rec.tasks.liveContext(w.live.sum())
	}
	w.wakeParked()
}

// flight is one request in flight.
type flight struct {
	replica int
	place   placement.Placement
}

// runArm plays one window for the configured duration: step.Sessions
// sessions in a closed loop, or sessions arriving at step.PerMin a minute.
// A closed loop on shared replicas goes on from the last window's sessions,
// as the reference's harness did (docs/workload.md, "Sessions go on between
// windows"); otherwise the window starts from drained replicas and aborts
// whatever is still in flight when it closes.
func (w *virtualWorld) runArm(ctx context.Context, wl *Workload, variant uint64, step Step, arm Arm) (Result, error) {
	if wl.Shape.claudeCode {
		return w.runClaudeCode(ctx, wl, variant, step, arm)
	}
	goOn := !step.Open() && !w.cfg.FreshReplicas
	keep := goOn && w.loop != nil
	if w.loop != nil && !keep {
		w.loop.a.stop()
	}
	a, err := w.openWindow(step, arm, keep)
	if err != nil {
		return Result{}, err
	}
	l := w.loop
	if !keep {
		l = &sessionLoop{wl: wl, sys: wl.SystemSectionTokens(), began: map[string]time.Time{}}
	}
	l.a, l.variant = a, variant
	w.loop = nil
	if goOn {
		w.loop = l
	}
	l.adopt(a.window.tasks)
	if step.Open() {
		for _, at := range arrivalTimes(w.cfg.Seed, step, w.cfg.Warmup+w.cfg.Duration) {
			w.v.At(a.begin.Add(at), func() { l.startSession(w.v.Now()) })
		}
	} else {
		l.target = step.Sessions
		l.grow(a.begin)
	}
	if err := a.play(ctx, a.end, nil); err != nil {
		return Result{}, err
	}
	return a.close(w.cfg.Duration.Seconds(), l.sys, goOn), nil
}

// runClaudeCode plays a window of Claude Code sessions.
func (w *virtualWorld) runClaudeCode(ctx context.Context, wl *Workload, variant uint64, step Step, arm Arm) (Result, error) {
	if w.loop != nil { // sessions of another workload never share a run with these
		w.loop.a.stop()
		w.loop = nil
	}
	stats := &ccStats{}
	plan := wl.ccFlows(step, ccOptions{seed: w.cfg.Seed, variant: variant, limit: w.cfg.MaxContext,
		window: w.cfg.Warmup + w.cfg.Duration, noHeader: w.cfg.NoSessionHeader, tokens: true, stats: stats})
	res, err := w.runFlows(ctx, plan, step, arm)
	res.ClaudeCode = stats.report(w.cfg.MaxContext)
	return res, err
}

var nanSec = math.NaN()

// nextPrompt renders a turn's prompt. After the first turn it extends the
// previous prompt (which ends with the generation marker) by the reply and
// the new user message instead of rendering 12k tokens again; the result is
// identical to sim.RenderPrompt of the whole history (tested).
func nextPrompt(system string, prev []uint32, msgs []sim.Message) []uint32 {
	if prev == nil || len(msgs) < 3 {
		return sim.RenderPrompt(system, msgs)
	}
	tail := sim.RenderPrompt("", msgs[len(msgs)-2:]) // marker, reply, end, user, end, marker
	out := make([]uint32, 0, len(prev)-1+len(tail))
	out = append(out, prev[:len(prev)-1]...)
	return append(out, tail...)
}

// bodyBytes approximates the request body's Content-Length, what the shim
// tells the placement about a prompt's size.
func bodyBytes(system string, msgs []sim.Message) int64 {
	n := len(system) + 128
	for _, m := range msgs {
		n += len(m.Content) + 32
	}
	return int64(n)
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// spill names the spill threshold the run set ("": the warden's default).
func (cfg *VirtualConfig) spill() string {
	if cfg.SpillThreshold.Auto || cfg.SpillThreshold.N > 0 {
		return cfg.SpillThreshold.String()
	}
	return ""
}

package bench

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lmwarden/lmwarden/sim"
)

// RealConfig is a run over real HTTP against any endpoint: the warden, or a
// replica directly.
type RealConfig struct {
	Target string // base URL the sessions talk to
	API    string // APIAnthropic or APIOpenAI
	Model  string // model field of requests; "" asks GET /v1/models
	// Admin is the warden's admin base URL, needed to switch arms; with it
	// the replica list comes from the admin API when ReplicaMetrics is empty.
	Admin string
	// AdminToken is the warden's admin token, which its PUTs need
	// (agent.ReadAdminToken); "" sends none (a warden refuses the switch).
	AdminToken string
	ModelName  string // the warden's model to switch ("" = its only model)
	// ReplicaMetrics are /metrics URLs (a base URL gets /metrics appended);
	// one URL may carry several ranks (engine label).
	ReplicaMetrics []string
	// Steps are closed-loop sessions, open-loop rates or loads (steps.go);
	// a load needs Profile, the replicas' profile, to be sized.
	Steps    []Step
	Duration time.Duration // per step and arm, in the replicas' time
	// Warmup runs each window's sessions this long before it is measured
	// (the replicas' time).
	Warmup time.Duration
	Arms   []Arm
	Seed   uint64
	// Speed is how much faster than real time the replicas run (simulated
	// replicas at --speed N). Durations, pauses and timeouts are divided by
	// it and measured times multiplied, so the report is in the replicas'
	// time and comparable with a virtual run. 1 for real hardware.
	Speed          float64
	RequestTimeout time.Duration // per request, in the replicas' time (default 5m)
	Profile        string        // the replicas' profile: sizes load steps, and is named in the report
	LBStats        string        // the off arm's stats mode, for the report only ("": unknown, as configured)
	Progress       *Progress
	// Workload sizes the sessions (zero: DefaultShape).
	Workload WorkloadShape
	// MaxContext is the model's context in tokens, where sessions that
	// compact do (zero: max_model_len from the target's GET /v1/models).
	MaxContext int
	// Replay, if set, replays a trace (replay.go; the steps are its speeds).
	Replay *ReplayConfig
	// NoSessionHeader sends no session id, as a client without one.
	NoSessionHeader bool
}

// DefaultRequestTimeout bounds one request, in the replicas' time.
const DefaultRequestTimeout = 5 * time.Minute

// RunReal runs every step and arm against cfg.Target.
func RunReal(ctx context.Context, cfg RealConfig) (*Report, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	wall := time.Now()
	conns := 0
	for _, s := range cfg.Steps {
		if s.Open() || s.CacheLoad > 0 {
			conns = max(conns, openLoopConns)
		}
		conns = max(conns, s.Sessions)
	}
	r := &realRun{cfg: cfg, client: newHTTPClient(conns), wl: NewWorkloadShape(cfg.Seed, cfg.Workload)}
	r.admin = adminClient{base: cfg.Admin, client: r.client, token: cfg.AdminToken}
	if err := r.setup(ctx); err != nil {
		return nil, err
	}
	if err := r.wl.checkContext(r.maxContext); err != nil {
		return nil, err
	}
	var notes []string
	if err := r.sizeSteps(&notes); err != nil {
		return nil, err
	}
	perSession := r.wl.meanRequests(r.maxContext)
	if cfg.Admin != "" {
		// Leave the warden as found, even after an error or Ctrl-C.
		defer func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := r.admin.restore(ctx, r.modelName, r.affinity, r.policy); err != nil {
				fmt.Fprintf(os.Stderr, "bench: could not restore the warden's affinity and policy: %v\n", err)
			}
		}()
	}
	rep := &Report{
		Mode: "real", Target: cfg.Target, API: cfg.API, Profile: cfg.Profile, Replicas: len(r.poller.keys),
		LBStats: cfg.LBStats, Speed: cfg.Speed, Seed: cfg.Seed, StepSeconds: cfg.Duration.Seconds(),
		Steps: r.steps, ArmPolicies: map[string]string{}, WorkloadIdeal: Num(r.wl.IdealHitRate(r.wl.sampleSize(), r.maxContext)),
		PercentileMethod: PercentileMethod, Started: wall.UTC(), ReplicasRead: r.replicaList(),
		Workload: r.wl.Shape.Name, MaxContext: r.maxContext, StepNotes: notes,
	}
	for _, a := range cfg.Arms {
		rep.Arms = append(rep.Arms, a.Name)
		if cfg.Admin == "" {
			rep.ArmPolicies[a.Name] = "whatever " + cfg.Target + " does (no admin API: not switched)"
		} else {
			rep.ArmPolicies[a.Name] = a.describeLB(cfg.LBStats, r.oneEndpoint)
			if a.Affinity && a.Name == ArmOn {
				rep.ArmPolicies[a.Name] = "affinity on: warden policy " + r.policy
			}
		}
	}
	play := func(si, ai int, step Step, arm Arm) (Result, error) {
		return r.window(ctx, textVariant(si, ai), step, arm, perSession)
	}
	if cfg.Replay != nil {
		var err error
		if play, err = r.replay(ctx, rep); err != nil {
			return nil, err
		}
	}
	for si, step := range r.steps {
		for ai, arm := range cfg.Arms {
			if cfg.Admin != "" {
				if err := r.admin.setArm(ctx, r.modelName, arm, r.policy); err != nil {
					return nil, err
				}
			}
			cfg.Progress.Begin(step, arm.Name)
			res, err := play(si, ai, step, arm)
			if err != nil {
				return nil, err
			}
			rep.Results = append(rep.Results, res)
			cfg.Progress.End(summary(res))
		}
	}
	cfg.Progress.Finish()
	rep.WallSeconds = time.Since(wall).Seconds()
	return rep, nil
}

func (cfg *RealConfig) check() error {
	switch {
	case cfg.Target == "":
		return fmt.Errorf("%w: no target URL", ErrBadConfig)
	case cfg.API != APIAnthropic && cfg.API != APIOpenAI:
		return fmt.Errorf("%w: api %q (want anthropic or openai)", ErrBadConfig, cfg.API)
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
	case len(cfg.Arms) > 1 && cfg.Admin == "":
		return fmt.Errorf("%w: %d arms need --admin to switch between them", ErrBadConfig, len(cfg.Arms))
	case cfg.Admin == "" && len(cfg.ReplicaMetrics) == 0:
		return fmt.Errorf("%w: no replica metrics: give --replica-metrics or --admin", ErrBadConfig)
	}
	for _, s := range cfg.Steps {
		if s.CacheLoad <= 0 && !s.sized() {
			return fmt.Errorf("%w: step %s", ErrBadConfig, s)
		}
		if s.CacheLoad > 0 && cfg.Profile == "" {
			return fmt.Errorf("%w: step %s is a load: give the replicas' profile to size it", ErrBadConfig, s)
		}
	}
	if cfg.Speed <= 0 {
		cfg.Speed = 1
	}
	if cfg.RequestTimeout <= 0 {
		cfg.RequestTimeout = DefaultRequestTimeout
	}
	return nil
}

// realRun is the state of one run over HTTP.
type realRun struct {
	cfg         RealConfig
	client      *http.Client
	admin       adminClient
	wl          *Workload
	poller      *metricsPoller
	model       string // the request's model field
	modelName   string // the warden's model name
	oneEndpoint bool
	policy      string // the warden's configured policy
	affinity    bool   // the warden's affinity before the run (restored after it)
	maxContext  int    // the model's context (tokens; 0 unknown)
	steps       []Step // cfg.Steps with loads sized
}

// openLoopConns sizes the connection pool of an open loop, whose live
// sessions are not known in advance.
const openLoopConns = 256

// sizeSteps sizes the load steps for the replicas found (load.go).
func (r *realRun) sizeSteps(notes *[]string) error {
	r.steps = r.cfg.Steps
	for _, s := range r.cfg.Steps {
		if s.CacheLoad <= 0 {
			continue
		}
		p, err := sim.LookupProfile(r.cfg.Profile)
		if err != nil {
			return fmt.Errorf("%w: sizing step %s: %v", ErrBadConfig, s, err)
		}
		steps, n, err := ResolveSteps(r.cfg.Steps, r.wl, p, len(r.poller.keys), r.maxContext)
		r.steps, *notes = steps, n
		return err
	}
	return nil
}

// setup finds the replicas' metrics, the model names and checks the target
// answers, so a typo fails before the first step rather than as a step of
// errors.
func (r *realRun) setup(ctx context.Context) error {
	urls := r.cfg.ReplicaMetrics
	if r.cfg.Admin != "" {
		m, err := r.admin.model(ctx, r.cfg.ModelName)
		if err != nil {
			return err
		}
		r.modelName = m.Name
		r.oneEndpoint = m.Shape == "endpoint"
		r.policy, r.affinity = m.Policy, m.Affinity
		if len(urls) == 0 {
			seen := map[string]bool{}
			for _, rep := range m.Replicas {
				if u := metricsURL(rep.URL); !seen[u] {
					seen[u] = true
					urls = append(urls, u)
				}
			}
		}
	}
	var sources []metricsSource
	for _, u := range urls {
		sources = append(sources, metricsSource{url: metricsURL(u)})
	}
	r.poller = &metricsPoller{client: r.client, sources: sources}
	if err := r.poller.discover(ctx); err != nil {
		return err
	}
	r.model, r.maxContext = r.cfg.Model, r.cfg.MaxContext
	if r.model == "" || (r.maxContext <= 0 && r.wl.compacts()) {
		name, maxLen, err := modelName(ctx, r.client, r.cfg.Target)
		if err != nil {
			return fmt.Errorf("target %s: %w", r.cfg.Target, err)
		}
		if r.model == "" {
			r.model = name
		}
		if r.maxContext <= 0 {
			r.maxContext = maxLen
		}
	}
	return nil
}

// scaled converts a duration in the replicas' time to wall time.
func (r *realRun) scaled(d time.Duration) time.Duration {
	return time.Duration(float64(d) / r.cfg.Speed)
}

// window plays one step under one arm for the step's duration: a
// goroutine per session slot in a closed loop, or one per session as they
// arrive in an open one; requests still in flight at its end are canceled
// and counted as cut.
func (r *realRun) window(ctx context.Context, variant uint64, step Step, arm Arm, perSession float64) (Result, error) {
	if r.wl.Shape.claudeCode {
		stats := &ccStats{}
		plan := r.wl.ccFlows(step, ccOptions{seed: r.cfg.Seed, variant: variant, limit: r.maxContext,
			window: r.cfg.Warmup + r.cfg.Duration, noHeader: r.cfg.NoSessionHeader, stats: stats})
		res, err := r.flowWindow(ctx, plan, step, arm, perSession)
		res.ClaudeCode = stats.report(r.maxContext)
		return res, err
	}
	ws := r.openWindow(ctx, perSession)
	total := r.scaled(r.cfg.Warmup + r.cfg.Duration)
	wctx, cancel := context.WithTimeout(ctx, total)
	defer cancel()
	pollDone := r.poll(ctx, wctx, ws, total)
	sys := r.wl.SystemSectionTokens()
	var next atomic.Int64
	var wg sync.WaitGroup
	if step.Open() {
		wg.Add(1)
		go func() { // the arrivals
			defer wg.Done()
			for i, at := range arrivalTimes(r.cfg.Seed, step, r.cfg.Warmup+r.cfg.Duration) {
				select {
				case <-wctx.Done():
					return
				case <-time.After(time.Until(ws.begin.Add(r.scaled(at)))):
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					r.playSession(wctx, r.wl.SessionVariant(i, variant), sys, ws)
				}()
			}
		}()
	} else {
		for slot := range step.Sessions {
			wg.Add(1)
			go func() {
				defer wg.Done()
				select { // the slot's first session starts at its own offset
				case <-wctx.Done():
					return
				case <-time.After(r.scaled(r.wl.StartOffset(slot))):
				}
				for wctx.Err() == nil {
					s := r.wl.SessionVariant(int(next.Add(1)-1), variant)
					if !r.playSession(wctx, s, sys, ws) {
						r.backOff(wctx)
					}
				}
			}()
		}
	}
	wg.Wait()
	<-pollDone
	r.closeWindow(ctx, ws)
	return ws.window.result(step, arm.Name, r.cfg.Duration.Seconds(), sys), nil
}

// backOff waits a little after a failure, so a dead endpoint is counted,
// not hammered.
func (r *realRun) backOff(wctx context.Context) {
	select {
	case <-wctx.Done():
	case <-time.After(max(10*time.Millisecond, r.scaled(time.Second))):
	}
}

// openWindow drains the replicas and prepares a window's recorders; the
// measure starts at once, or after the warm-up.
func (r *realRun) openWindow(ctx context.Context, perSession float64) *realWindow {
	r.drain(ctx)
	rec := newRecorder(len(r.poller.keys))
	rec.requestsPerSession = perSession
	begin := time.Now()
	ws := &realWindow{rec: rec, window: rec, mu: &sync.Mutex{}, live: liveSet{}, begin: begin,
		start: begin.Add(r.scaled(r.cfg.Warmup)), speed: r.cfg.Speed}
	if r.cfg.Warmup > 0 {
		// the warm-up's requests go to a recorder that is thrown away;
		// the sessions' starts, in the tasks both share, stay
		ws.rec = newRecorder(len(r.poller.keys))
		ws.rec.tasks = rec.tasks
	} else {
		r.measure(ctx, ws)
	}
	return ws
}

// measure starts the measured window: counters' baselines.
func (r *realRun) measure(ctx context.Context, ws *realWindow) {
	ws.before, ws.haveAdmin = r.adminCounters(ctx)
	s := r.poller.poll(ctx)
	ws.mu.Lock()
	ws.rec = ws.window
	ws.window.poll(s)
	ws.window.tasks.liveContext(ws.live.sum())
	ws.mu.Unlock()
}

// poll samples the replicas every poll interval until wctx ends, then
// takes the closing sample; the channel closes when it has.
func (r *realRun) poll(ctx, wctx context.Context, ws *realWindow, total time.Duration) <-chan struct{} {
	done := make(chan struct{})
	sample := func(c context.Context) {
		s := r.poller.poll(c)
		if c.Err() != nil {
			return
		}
		ws.mu.Lock()
		ws.window.poll(s)
		ws.window.tasks.liveContext(ws.live.sum())
		ws.mu.Unlock()
	}
	go func() {
		defer close(done)
		every := max(50*time.Millisecond, r.scaled(DefaultPollInterval))
		t := time.NewTicker(every)
		defer t.Stop()
		warm := time.NewTimer(time.Until(ws.start))
		defer warm.Stop()
		measuring := r.cfg.Warmup <= 0
		for {
			select {
			case <-wctx.Done():
				sample(ctx) // the window's closing sample
				return
			case <-warm.C:
				if !measuring {
					r.measure(ctx, ws)
					measuring = true
				}
			case <-t.C:
				if total > 0 {
					r.cfg.Progress.Update(time.Since(ws.begin).Seconds() / total.Seconds())
				}
				if measuring {
					sample(wctx)
				}
			}
		}
	}()
	return done
}

// closeWindow reads the warden's placement counters over the window.
func (r *realRun) closeWindow(ctx context.Context, ws *realWindow) {
	if !ws.haveAdmin {
		return
	}
	after, ok := r.adminCounters(ctx)
	if !ok {
		return
	}
	rec, before := ws.window, ws.before
	rec.knowsPlace = true
	rec.stayed = int(after.stayed - before.stayed)
	rec.moved = int(after.moved - before.moved)
	for i := range rec.placedOn {
		if i < len(after.perReplica) && i < len(before.perReplica) {
			rec.placedOn[i] = float64(after.perReplica[i] - before.perReplica[i])
		}
	}
	if after.unknownReplica > before.unknownReplica {
		// vLLM's own balancer chose: the warden cannot say where.
		rec.knowsPlace = false
		rec.stayed, rec.moved = 0, 0
	}
}

// realWindow is what a window's session goroutines share.
type realWindow struct {
	rec    *recorder   // where requests are recorded now (a throw-away one during a warm-up)
	window *recorder   // the measured window's
	mu     *sync.Mutex // guards rec, window and live
	live   liveSet
	begin  time.Time // sessions start here
	start  time.Time // the measure starts here
	speed  float64
	// the warden's counters at the measure's start
	before    adminSnapshot
	haveAdmin bool
}

// since is seconds from the window's start to t, in the replicas' time.
func (ws *realWindow) since(t time.Time) float64 { return t.Sub(ws.start).Seconds() * ws.speed }

// playSession sends a session's turns until it ends, fails or the window
// closes; false when a request failed.
func (r *realRun) playSession(wctx context.Context, s *Session, sys int, ws *realWindow) bool {
	mu := ws.mu
	c := NewConversation(s)
	c.Limit = r.maxContext
	reused, held := sys, 0
	for !c.Done() {
		select {
		case <-wctx.Done():
			return true
		case <-time.After(r.scaled(s.Pauses[c.Turn])):
		}
		req := c.NextRequest()
		if req.Fresh {
			reused, held = sys, 0 // a fresh history shares only the system prompt
		}
		sent := time.Now()
		mu.Lock()
		if req.First {
			ws.rec.tasks.sessionStarted(s.ID, ws.since(sent))
		}
		// the prompt's size is known from the answer's usage; until then,
		// the history so far and the new message (4 bytes a token)
		ws.live.set(s.ID, max(held, sys)+len(req.Messages[len(req.Messages)-1].Content)/sim.BytesPerToken)
		mu.Unlock()
		rctx, cancel := context.WithTimeout(wctx, r.scaled(r.cfg.RequestTimeout))
		ids := turnHeaders{Session: s.ID}
		if r.cfg.NoSessionHeader {
			ids.Session = ""
		}
		res, err := streamTurn(rctx, r.client, r.cfg.API, r.cfg.Target, r.model, ids, r.wl.System, req.Messages, req.MaxTokens)
		timedOut := rctx.Err() != nil && wctx.Err() == nil
		cancel()
		mu.Lock()
		rec := ws.rec
		if res.parked > 0 {
			rec.tasks.parkedFor(res.parked.Seconds()*r.cfg.Speed, false)
		}
		switch {
		case wctx.Err() != nil:
			rec.cut++ // the window closed with the request in flight
			mu.Unlock()
			return true
		case timedOut || err != nil:
			if timedOut {
				rec.failed("timeout", true, fmt.Errorf("no complete answer within %v", r.cfg.RequestTimeout))
			} else {
				rec.failed(failureKind(err, res), false, err)
			}
			rec.tasks.sessionFailed(s.ID)
			ws.live.end(s.ID)
			mu.Unlock()
			return false
		}
		ttft := res.ttft.Seconds() * r.cfg.Speed
		rec.answered(s.ID, req.First, ttft, res.promptTokens, res.cachedTokens, res.outputTokens, reused)
		held = res.promptTokens + res.outputTokens
		ws.live.set(s.ID, held)
		if req.Compaction {
			rec.compactions++
		}
		c.Answer(res.text, res.promptTokens, res.outputTokens)
		if c.Done() {
			rec.completed++
			rec.tasks.sessionFinished(s.ID, ws.since(time.Now()))
			ws.live.end(s.ID)
		}
		mu.Unlock()
		reused = held
	}
	return true
}

// failureKind names a failure for the report's notes.
func failureKind(err error, res turnResult) string {
	switch {
	case res.status != 0 && res.status != http.StatusOK:
		return fmt.Sprintf("HTTP %d", res.status)
	case errors.Is(err, ErrNoFirstToken):
		return "no content token"
	case res.status == 0:
		return "connect"
	default:
		return "broken stream"
	}
}

// drain waits (bounded) until no replica runs or queues anything, so a
// window does not start with the previous one's aborted work.
func (r *realRun) drain(ctx context.Context) {
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		busy := false
		for _, s := range r.poller.poll(ctx) {
			if s != nil && s.Running+s.Waiting > 0 {
				busy = true
			}
		}
		if !busy {
			// let the warden's poller see them idle too, or its first
			// placements of the window trust the aborted work's counts
			time.Sleep(max(50*time.Millisecond, 2*r.scaled(DefaultPollInterval)))
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// adminSnapshot is what a window reads from the warden before and after.
type adminSnapshot struct {
	stayed, moved  uint64
	perReplica     []uint64
	unknownReplica uint64 // requests vLLM's own balancer placed
}

func (r *realRun) adminCounters(ctx context.Context) (adminSnapshot, bool) {
	if r.cfg.Admin == "" {
		return adminSnapshot{}, false
	}
	m, err := r.admin.model(ctx, r.modelName)
	if err != nil || len(m.Replicas) != len(r.poller.keys) {
		return adminSnapshot{}, false
	}
	s := adminSnapshot{stayed: m.Stayed, moved: m.Moved}
	var placed uint64
	for _, rep := range m.Replicas {
		var n uint64
		for _, c := range rep.Requests {
			n += c
		}
		placed += n
		s.perReplica = append(s.perReplica, n)
	}
	var total uint64
	for _, c := range m.Requests {
		total += c
	}
	s.unknownReplica = total - min(total, placed)
	return s, true
}

// replicaList names the replicas found, for the report.
func (r *realRun) replicaList() []string {
	var out []string
	for _, k := range r.poller.keys {
		if k.engine != "" {
			out = append(out, k.url+`{engine="`+k.engine+`"}`)
		} else {
			out = append(out, k.url)
		}
	}
	return out
}

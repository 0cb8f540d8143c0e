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
	Admin     string
	ModelName string // the warden's model to switch ("" = its only model)
	// ReplicaMetrics are /metrics URLs (a base URL gets /metrics appended);
	// one URL may carry several ranks (engine label).
	ReplicaMetrics []string
	Steps          []int
	Duration       time.Duration // per step and arm, in the replicas' time
	Arms           []Arm
	Seed           uint64
	// Speed is how much faster than real time the replicas run (simulated
	// replicas at --speed N). Durations, pauses and timeouts are divided by
	// it and measured times multiplied, so the report is in the replicas'
	// time and comparable with a virtual run. 1 for real hardware.
	Speed          float64
	RequestTimeout time.Duration // per request, in the replicas' time (default 5m)
	Profile        string        // for the report only
	LBStats        string        // the off arm's stats mode, for the report only ("": unknown, as configured)
	Progress       *Progress
}

// DefaultRequestTimeout bounds one request, in the replicas' time.
const DefaultRequestTimeout = 5 * time.Minute

// RunReal runs every step and arm against cfg.Target.
func RunReal(ctx context.Context, cfg RealConfig) (*Report, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	wall := time.Now()
	maxStep := 0
	for _, s := range cfg.Steps {
		maxStep = max(maxStep, s)
	}
	r := &realRun{cfg: cfg, client: newHTTPClient(maxStep), wl: NewWorkload(cfg.Seed)}
	r.admin = adminClient{base: cfg.Admin, client: r.client}
	if err := r.setup(ctx); err != nil {
		return nil, err
	}
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
		Steps: cfg.Steps, ArmPolicies: map[string]string{}, WorkloadIdeal: Num(r.wl.IdealHitRate(64)),
		PercentileMethod: PercentileMethod, Started: wall.UTC(), ReplicasRead: r.replicaList(),
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
	for si, step := range cfg.Steps {
		for ai, arm := range cfg.Arms {
			if cfg.Admin != "" {
				if err := r.admin.setArm(ctx, r.modelName, arm, r.policy); err != nil {
					return nil, err
				}
			}
			cfg.Progress.Begin(step, arm.Name)
			res, err := r.window(ctx, textVariant(si, ai), step, arm)
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
	case cfg.Duration <= 0:
		return fmt.Errorf("%w: duration %v", ErrBadConfig, cfg.Duration)
	case len(cfg.Arms) == 0:
		return fmt.Errorf("%w: no arms", ErrBadConfig)
	case len(cfg.Arms) > 1 && cfg.Admin == "":
		return fmt.Errorf("%w: %d arms need --admin to switch between them", ErrBadConfig, len(cfg.Arms))
	case cfg.Admin == "" && len(cfg.ReplicaMetrics) == 0:
		return fmt.Errorf("%w: no replica metrics: give --replica-metrics or --admin", ErrBadConfig)
	}
	for _, s := range cfg.Steps {
		if s < 1 {
			return fmt.Errorf("%w: step of %d sessions", ErrBadConfig, s)
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
	r.model = r.cfg.Model
	if r.model == "" {
		name, err := modelName(ctx, r.client, r.cfg.Target)
		if err != nil {
			return fmt.Errorf("target %s: %w", r.cfg.Target, err)
		}
		r.model = name
	}
	return nil
}

// scaled converts a duration in the replicas' time to wall time.
func (r *realRun) scaled(d time.Duration) time.Duration {
	return time.Duration(float64(d) / r.cfg.Speed)
}

// window plays one step under one arm: sessions goroutines in a closed
// loop for the step's duration; requests still in flight at its end are
// canceled and counted as cut.
func (r *realRun) window(ctx context.Context, variant uint64, sessions int, arm Arm) (Result, error) {
	r.drain(ctx)
	rec := newRecorder(len(r.poller.keys))
	var mu sync.Mutex // guards rec and live
	live := liveSet{}
	before, haveAdmin := r.adminCounters(ctx)
	rec.poll(r.poller.poll(ctx))
	rec.tasks.liveContext(0)
	ws := &realWindow{rec: rec, mu: &mu, live: live, start: time.Now(), speed: r.cfg.Speed}

	wctx, cancel := context.WithTimeout(ctx, r.scaled(r.cfg.Duration))
	defer cancel()
	pollDone := make(chan struct{})
	go func() {
		defer close(pollDone)
		every := max(50*time.Millisecond, r.scaled(DefaultPollInterval))
		t := time.NewTicker(every)
		defer t.Stop()
		start := time.Now()
		total := r.scaled(r.cfg.Duration)
		for {
			select {
			case <-wctx.Done():
				s := r.poller.poll(ctx) // the window's closing sample
				mu.Lock()
				rec.poll(s)
				rec.tasks.liveContext(live.sum())
				mu.Unlock()
				return
			case <-t.C:
				s := r.poller.poll(wctx)
				if wctx.Err() != nil {
					continue
				}
				mu.Lock()
				rec.poll(s)
				rec.tasks.liveContext(live.sum())
				mu.Unlock()
				r.cfg.Progress.Update(time.Since(start).Seconds() / total.Seconds())
			}
		}
	}()

	sys := r.wl.SystemSectionTokens()
	var next atomic.Int64
	var wg sync.WaitGroup
	for range sessions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for wctx.Err() == nil {
				s := r.wl.SessionVariant(int(next.Add(1)-1), variant)
				if !r.playSession(wctx, s, sys, ws) {
					// back off after a failure, so a dead endpoint is
					// counted, not hammered
					select {
					case <-wctx.Done():
					case <-time.After(max(10*time.Millisecond, r.scaled(time.Second))):
					}
				}
			}
		}()
	}
	wg.Wait()
	<-pollDone
	if haveAdmin {
		if after, ok := r.adminCounters(ctx); ok {
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
	}
	return rec.result(sessions, arm.Name, r.cfg.Duration.Seconds(), sys), nil
}

// realWindow is what a window's session goroutines share.
type realWindow struct {
	rec   *recorder
	mu    *sync.Mutex // guards rec and live
	live  liveSet
	start time.Time
	speed float64
}

// since is seconds from the window's start to t, in the replicas' time.
func (ws *realWindow) since(t time.Time) float64 { return t.Sub(ws.start).Seconds() * ws.speed }

// playSession sends a session's turns until it ends, fails or the window
// closes; false when a request failed.
func (r *realRun) playSession(wctx context.Context, s *Session, sys int, ws *realWindow) bool {
	rec, mu := ws.rec, ws.mu
	c := NewConversation(s)
	reused, held := sys, 0
	for !c.Done() {
		select {
		case <-wctx.Done():
			return true
		case <-time.After(r.scaled(s.Pauses[c.Turn])):
		}
		msgs := c.Next()
		sent := time.Now()
		mu.Lock()
		if c.Turn == 0 {
			rec.tasks.sessionStarted(s.ID, ws.since(sent))
		}
		// the prompt's size is known from the answer's usage; until then,
		// the history so far and the new message (4 bytes a token)
		ws.live.set(s.ID, max(held, sys)+len(msgs[len(msgs)-1].Content)/sim.BytesPerToken)
		mu.Unlock()
		rctx, cancel := context.WithTimeout(wctx, r.scaled(r.cfg.RequestTimeout))
		res, err := streamTurn(rctx, r.client, r.cfg.API, r.cfg.Target, r.model, s.ID, r.wl.System, msgs, s.MaxTokens[c.Turn])
		timedOut := rctx.Err() != nil && wctx.Err() == nil
		cancel()
		mu.Lock()
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
		rec.answered(s.ID, c.Turn == 0, ttft, res.promptTokens, res.cachedTokens, res.outputTokens, reused)
		held = res.promptTokens + res.outputTokens
		ws.live.set(s.ID, held)
		if c.Turn == len(s.Users)-1 {
			rec.completed++
			rec.tasks.sessionFinished(s.ID, ws.since(time.Now()))
			ws.live.end(s.ID)
		}
		mu.Unlock()
		reused = held
		c.Reply(res.text)
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

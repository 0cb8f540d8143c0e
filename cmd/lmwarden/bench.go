package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/lmwarden/lmwarden/agent"
	"github.com/lmwarden/lmwarden/agent/config"
	"github.com/lmwarden/lmwarden/bench"
	"github.com/lmwarden/lmwarden/internal/vllmlb"
	"github.com/lmwarden/lmwarden/sim"
)

func init() {
	register("bench", "A/B benchmark of synthetic agent sessions (real endpoint or --virtual)", runBench)
}

// stringList is a repeatable string flag.
type stringList []string

func (s *stringList) String() string { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error {
	*s = append(*s, v)
	return nil
}

// benchFlags are the flags of `lmwarden bench`; demo reuses the parsing of
// steps and the report output.
type benchFlags struct {
	target, api, admin, model, modelName string
	adminTokenFile                       string
	replicaMetrics                       stringList
	steps, arms, policies                string
	duration, timeout, warmup            time.Duration
	virtual                              bool
	profile                              string
	overrides                            profileFlags // --virtual: vLLM settings over the profile
	replicas                             int
	lbStats                              string
	seed                                 uint64
	speed                                float64
	out                                  string
	trace                                bool
	admission                            string
	admissionTimeout                     time.Duration
	admissionFill, admissionQuantum      float64
	workload                             string
	arrivals                             string
	maxContext                           int
	pollInterval                         time.Duration
	spillThreshold                       string
	replay, replaySpeed                  string // bench_replay.go
	replayBlock                          int
	replayFrom, replayUntil              time.Duration
	sessionHeader                        bool
	agentKey, bodyKey                    bool
	describe                             bool
	set                                  map[string]bool // the flags given
}

func (f *benchFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.target, "target", "", "base URL the sessions talk to: the warden's frontend or a replica (real runs)")
	fs.StringVar(&f.api, "api", bench.APIAnthropic, "request shape: anthropic (POST /v1/messages) or openai (POST /v1/chat/completions)")
	fs.StringVar(&f.admin, "admin", "", "the warden's admin URL, to switch arms and list replicas (real runs)")
	fs.StringVar(&f.adminTokenFile, "admin-token-file", agent.DefaultAdminTokenFile(), "the warden's admin token, which switching arms needs (readable by the warden's user and root)")
	fs.StringVar(&f.model, "model", "", "model field of requests (default: the first of GET /v1/models)")
	fs.StringVar(&f.modelName, "model-name", "", "the warden's model to switch (default: its only model)")
	fs.Var(&f.replicaMetrics, "replica-metrics", "a replica's /metrics URL (repeat; default: the replicas the admin API lists)")
	fs.StringVar(&f.steps, "steps", "4,8,16,24,32", "comma-separated steps: concurrent sessions (closed loop), new sessions a minute (--arrivals poisson: 3, 3/min, 0.2/s, 30/h), or a load: live context over the replicas' total KV cache (1.5x)")
	fs.StringVar(&f.arrivals, "arrivals", "closed", "closed (a finished session is replaced at once), poisson (steps are arrival rates or loads) or poisson:RATE (one step, e.g. poisson:3/min)")
	fs.DurationVar(&f.duration, "duration", 3*time.Minute, "length of each step and arm (simulated time with --virtual or --speed)")
	fs.DurationVar(&f.warmup, "warmup", 0, "run each step and arm's sessions this long before measuring (simulated time with --virtual or --speed); an open loop needs a few session lengths to fill up")
	fs.StringVar(&f.arms, "arms", "off,on", "arms, run back to back on the same replicas: off (vLLM's balancer), on (affinity), or policy names")
	fs.StringVar(&f.policies, "policies", "", "--virtual: compare these policies side by side, each on fresh replicas ("+policyNames()+", or all)")
	fs.BoolVar(&f.virtual, "virtual", false, "simulate replicas and placement on a virtual clock in this process (no sockets)")
	fs.StringVar(&f.profile, "profile", "a4000-qwen3-4b", "--virtual: replica profile: "+strings.Join(sim.ProfileNames(), ", ")+", or a profile file (YAML)")
	f.overrides.registerOverrides(fs)
	fs.IntVar(&f.replicas, "replicas", 4, "--virtual: number of replicas")
	fs.StringVar(&f.lbStats, "lb-stats", "", "stats mode of vLLM's balancer in the off arm: fresh, stale or none (default: the profile's with --virtual, as its vLLM version behaves; else fresh)")
	fs.Uint64Var(&f.seed, "seed", 1, "workload seed: the same seed gives the same sessions")
	fs.Float64Var(&f.speed, "speed", 1, "real runs against simulated replicas: their --speed; times are reported in simulated time")
	fs.DurationVar(&f.timeout, "timeout", bench.DefaultRequestTimeout, "real runs: per-request timeout (simulated time with --speed)")
	fs.StringVar(&f.out, "out", "", "directory for report.json, report.csv and the SVG plots (default out/bench-<time>)")
	fs.DurationVar(&f.pollInterval, "poll-interval", bench.DefaultPollInterval, "--virtual: how often replica stats reach the placement, as the warden's poller (simulated time)")
	fs.StringVar(&f.admission, "admission", string(config.DefaultAdmission.Mode), "--virtual, policies cost and sticky: cache-capacity admission auto (waits at the warden only while the live context exceeds the caches), queue (always), spill (nobody waits) or off")
	fs.DurationVar(&f.admissionTimeout, "admission-timeout", config.DefaultAdmission.Timeout, "--virtual: the longest a request waits at the warden (simulated)")
	fs.Float64Var(&f.admissionFill, "admission-fill", config.DefaultAdmission.Fill, "--virtual: share of a replica's KV capacity its live sessions may hold (1.5: half again)")
	fs.Float64Var(&f.admissionQuantum, "admission-quantum", config.DefaultAdmission.Quantum, "--virtual: how long a session keeps its room while others wait, in multiples of its own re-prefill time")
	fs.StringVar(&f.workload, "workload", "agent", "sessions: agent (docs/workload.md: six turns, ~12k tokens), big (six turns, ~58k tokens, for rtx5090-gemma3-27b-int4), long (heavy-tailed turns with tool results, compacting near the model's context) or claude-code (Claude Code's published shape: ~25K to start, hundreds of turns, subagent groups; needs a context of 64K or more, e.g. --profile h200-qwen3-4b)")
	fs.BoolVar(&f.describe, "describe", false, "--workload claude-code: print what the workload generates beside the published figures (2,000 sessions on paper, at --max-context or the profile's context) and exit")
	fs.IntVar(&f.maxContext, "max-context", 0, "the model's context in tokens, where long sessions compact (default: the profile's with --virtual, else max_model_len of the target's /v1/models)")
	fs.BoolVar(&f.trace, "trace", false, "--virtual: also write every poll and request (trace_*.csv), trace.md and per-window queue/TTFT plots into --out")
	fs.StringVar(&f.spillThreshold, "spill-threshold", "", "--virtual: the warden's spill threshold, requests in flight, auto or prefill (default: the warden's default, prefill)")
	fs.BoolVar(&f.agentKey, "agent-key", true, "--virtual: a request with an agent header (a subagent) is a conversation of its own, as the warden's default agent_headers; =false keys it by its session alone")
	fs.BoolVar(&f.bodyKey, "body-key", true, "--virtual: a request without a session header is keyed by its body's start, as the warden's default body_key; =false places it by load")
	f.registerReplay(fs)
}

func policyNames() string {
	var names []string
	for _, p := range config.Policies() {
		names = append(names, string(p))
	}
	return strings.Join(names, ", ")
}

func runBench(args []string) error {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	var f benchFlags
	f.register(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	f.set = map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { f.set[fl.Name] = true })
	if f.describe {
		return f.describeWorkload(os.Stdout)
	}
	plan, err := f.plan()
	if err != nil {
		return err
	}
	out := f.out
	if out == "" {
		out = filepath.Join("out", "bench-"+time.Now().UTC().Format("20060102-150405"))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var rep *bench.Report
	var tr bench.TraceRecorder
	if f.virtual {
		rep, err = f.runVirtual(ctx, plan, traceFor(f.trace, &tr))
	} else {
		rep, err = f.runReal(ctx, plan)
	}
	if err != nil {
		return err
	}
	if f.trace {
		if err := tr.WriteAll(out); err != nil {
			return fmt.Errorf("writing the trace: %w", err)
		}
	}
	return finishReport(os.Stdout, rep, out)
}

// benchPlan is what the flags common to both runners resolve to.
type benchPlan struct {
	steps  []bench.Step
	arms   []bench.Arm
	fresh  bool // policies side by side, each on fresh replicas
	shape  bench.WorkloadShape
	lb     vllmlb.StatsMode
	replay *bench.ReplayConfig
	phases int
}

// plan checks the flags both runners share and resolves them.
func (f *benchFlags) plan() (benchPlan, error) {
	var p benchPlan
	var err error
	if f.replay != "" {
		if p.steps, p.replay, err = f.replayPlan(); err != nil {
			return p, err
		}
	} else if p.steps, err = f.sessionSteps(); err != nil {
		return p, err
	}
	if f.warmup < 0 {
		return p, fmt.Errorf("--warmup %v: want zero or a positive duration: %w", f.warmup, errUsage)
	}
	if f.maxContext < 0 {
		return p, fmt.Errorf("--max-context %d: want a number of tokens: %w", f.maxContext, errUsage)
	}
	if p.shape, err = bench.ParseWorkload(f.workload); err != nil {
		return p, fmt.Errorf("--workload: %v: %w", err, errUsage)
	}
	if f.duration <= 0 {
		return p, fmt.Errorf("--duration %v: want a positive duration: %w", f.duration, errUsage)
	}
	if p.lb, err = vllmlb.ParseStatsMode(f.lbStats); err != nil {
		return p, fmt.Errorf("--lb-stats: %v: %w", err, errUsage)
	}
	armList := f.arms
	if f.policies != "" {
		if !f.virtual {
			return p, fmt.Errorf("--policies needs --virtual (against a warden, configure its policy and use --arms): %w", errUsage)
		}
		if f.set["arms"] {
			return p, fmt.Errorf("give --arms or --policies, not both: %w", errUsage)
		}
		armList, p.fresh = f.policies, true
		if f.policies == "all" {
			armList = policyNames()
		}
	}
	if p.arms, err = bench.ParseArms(armList); err != nil {
		return p, fmt.Errorf("--arms/--policies: %v: %w", err, errUsage)
	}
	p.phases = len(p.steps) * len(p.arms)
	return p, nil
}

// sessionSteps reads --steps and --arrivals.
func (f *benchFlags) sessionSteps() ([]bench.Step, error) {
	list := f.steps
	if !f.set["steps"] && strings.Contains(f.arrivals, ":") {
		list = "" // poisson:RATE names the one step
	}
	steps, err := bench.ParseSteps(list, f.arrivals)
	if err != nil {
		return nil, fmt.Errorf("--steps/--arrivals: %v: %w", err, errUsage)
	}
	return steps, nil
}

// finishReport prints the table, writes the files and says where they are.
func finishReport(w io.Writer, rep *bench.Report, out string) error {
	if err := rep.WriteTable(w); err != nil {
		return err
	}
	if err := rep.Write(out); err != nil {
		return fmt.Errorf("writing the report: %w", err)
	}
	fmt.Fprintf(w, "\nwall time %.1fs. Report: %s and %s; plots: %s, %s, %s, %s (in %s)\n",
		rep.WallSeconds, bench.ReportJSON, bench.ReportCSV, bench.PlotTTFT, bench.PlotHitRate, bench.PlotThroughput, bench.PlotTask, out)
	return nil
}

// parseSteps reads "4,8,16": positive session counts.
func parseSteps(s string) ([]int, error) {
	var steps []int
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		n, err := strconv.Atoi(part)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("--steps %q: %q is not a positive number of sessions: %w", s, part, errUsage)
		}
		steps = append(steps, n)
	}
	if len(steps) == 0 {
		return nil, fmt.Errorf("--steps %q: no steps: %w", s, errUsage)
	}
	return steps, nil
}

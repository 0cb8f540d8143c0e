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
	fs.StringVar(&f.admission, "admission", string(agent.DefaultAdmission.Mode), "--virtual, policy cost: cache-capacity admission auto (waits at the warden only while the live context exceeds the caches), queue (always), spill (nobody waits) or off")
	fs.DurationVar(&f.admissionTimeout, "admission-timeout", agent.DefaultAdmission.Timeout, "--virtual: the longest a request waits at the warden (simulated)")
	fs.Float64Var(&f.admissionFill, "admission-fill", agent.DefaultAdmission.Fill, "--virtual: share of a replica's KV capacity its live sessions may hold (1.5: half again)")
	fs.Float64Var(&f.admissionQuantum, "admission-quantum", agent.DefaultAdmission.Quantum, "--virtual: how long a session keeps its room while others wait, in multiples of its own re-prefill time")
	fs.StringVar(&f.workload, "workload", "agent", "sessions: agent (docs/workload.md: six turns, ~12k tokens), big (six turns, ~58k tokens, for rtx5090-gemma3-27b-int4) or long (heavy-tailed turns with tool results, compacting near the model's context)")
	fs.IntVar(&f.maxContext, "max-context", 0, "the model's context in tokens, where long sessions compact (default: the profile's with --virtual, else max_model_len of the target's /v1/models)")
	fs.BoolVar(&f.trace, "trace", false, "--virtual: also write every poll and request (trace_*.csv), trace.md and per-window queue/TTFT plots into --out")
}

func policyNames() string {
	var names []string
	for _, p := range agent.Policies() {
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
	set := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })

	list := f.steps
	if !set["steps"] && strings.Contains(f.arrivals, ":") {
		list = "" // poisson:RATE names the one step
	}
	steps, err := bench.ParseSteps(list, f.arrivals)
	if err != nil {
		return fmt.Errorf("--steps/--arrivals: %v: %w", err, errUsage)
	}
	if f.warmup < 0 {
		return fmt.Errorf("--warmup %v: want zero or a positive duration: %w", f.warmup, errUsage)
	}
	if f.maxContext < 0 {
		return fmt.Errorf("--max-context %d: want a number of tokens: %w", f.maxContext, errUsage)
	}
	shape, err := bench.ParseWorkload(f.workload)
	if err != nil {
		return fmt.Errorf("--workload: %v: %w", err, errUsage)
	}
	if f.duration <= 0 {
		return fmt.Errorf("--duration %v: want a positive duration: %w", f.duration, errUsage)
	}
	lb, err := vllmlb.ParseStatsMode(f.lbStats)
	if err != nil {
		return fmt.Errorf("--lb-stats: %v: %w", err, errUsage)
	}
	armList, fresh := f.arms, false
	if f.policies != "" {
		if !f.virtual {
			return fmt.Errorf("--policies needs --virtual (against a warden, configure its policy and use --arms): %w", errUsage)
		}
		if set["arms"] {
			return fmt.Errorf("give --arms or --policies, not both: %w", errUsage)
		}
		armList, fresh = f.policies, true
		if f.policies == "all" {
			armList = policyNames()
		}
	}
	arms, err := bench.ParseArms(armList)
	if err != nil {
		return fmt.Errorf("--arms/--policies: %v: %w", err, errUsage)
	}
	out := f.out
	if out == "" {
		out = filepath.Join("out", "bench-"+time.Now().UTC().Format("20060102-150405"))
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	phases := len(steps) * len(arms)
	var rep *bench.Report
	var tr bench.TraceRecorder
	if f.virtual {
		for _, name := range []string{"target", "admin", "replica-metrics", "speed", "api", "timeout", "model", "model-name"} {
			if set[name] {
				return fmt.Errorf("--%s is for real runs, not --virtual: %w", name, errUsage)
			}
		}
		f.overrides.name = f.profile
		p, err := f.overrides.resolve()
		if err != nil {
			return err
		}
		if f.pollInterval <= 0 {
			return fmt.Errorf("--poll-interval %v: want a positive duration: %w", f.pollInterval, errUsage)
		}
		if f.replicas < 1 {
			return fmt.Errorf("--replicas %d: want at least 1: %w", f.replicas, errUsage)
		}
		admission, err := admissionFor(f.admission, f.admissionTimeout, f.admissionFill, f.admissionQuantum)
		if err != nil {
			return err
		}
		if !set["lb-stats"] {
			lb = p.LBStats()
		}
		rep, err = bench.RunVirtual(ctx, bench.VirtualConfig{
			Profile: p, Replicas: f.replicas, Steps: steps, Duration: f.duration, Warmup: f.warmup, Arms: arms,
			FreshReplicas: fresh, LBStats: lb, Seed: f.seed, Progress: bench.NewProgress(os.Stderr, phases),
			PollInterval: f.pollInterval,
			Trace:        traceFor(f.trace, &tr),
			Admission:    admission,
			Workload:     shape,
			MaxContext:   f.maxContext,
		})
		if err != nil {
			return err
		}
	} else {
		if f.target == "" {
			return fmt.Errorf("--target is required (or --virtual): %w", errUsage)
		}
		for _, name := range overrideFlags {
			if set[name] {
				return fmt.Errorf("--%s is for --virtual runs (a real replica has its own): %w", name, errUsage)
			}
		}
		for _, name := range []string{"admission", "admission-timeout", "admission-fill", "admission-quantum"} {
			if set[name] {
				return fmt.Errorf("--%s is for --virtual runs (a real warden has its own, in its config): %w", name, errUsage)
			}
		}
		if f.api != bench.APIAnthropic && f.api != bench.APIOpenAI {
			return fmt.Errorf("--api %q: want anthropic or openai: %w", f.api, errUsage)
		}
		if len(arms) > 1 && f.admin == "" {
			return fmt.Errorf("%d arms need --admin to switch between them (or --arms on for one arm): %w", len(arms), errUsage)
		}
		if f.admin == "" && len(f.replicaMetrics) == 0 {
			return fmt.Errorf("give --replica-metrics (repeat per replica) or --admin to read the replicas' counters: %w", errUsage)
		}
		if f.speed <= 0 {
			return fmt.Errorf("--speed %v: want > 0: %w", f.speed, errUsage)
		}
		for name, u := range map[string]string{"target": f.target, "admin": f.admin} {
			if u != "" && !strings.HasPrefix(u, "http://") && !strings.HasPrefix(u, "https://") {
				return fmt.Errorf("--%s %q: want an http:// URL: %w", name, u, errUsage)
			}
		}
		profile, lbLabel := "", ""
		if set["profile"] {
			profile = f.profile
		}
		for _, s := range steps {
			if s.CacheLoad > 0 && profile == "" {
				return fmt.Errorf("step %s is a load: give --profile, the replicas' profile, to size it: %w", s, errUsage)
			}
		}
		if set["lb-stats"] {
			lbLabel = lb.String() // else the warden's (or vLLM's) own setting, unknown here
		}
		// With --admin the run switches the warden to each arm and back
		// through its admin API: writes, which need the warden's token.
		var token string
		if f.admin != "" {
			if token, err = agent.ReadAdminToken(f.adminTokenFile); err != nil {
				return err
			}
		}
		rep, err = bench.RunReal(ctx, bench.RealConfig{
			Target: f.target, API: f.api, Model: f.model, Admin: f.admin, AdminToken: token, ModelName: f.modelName,
			ReplicaMetrics: f.replicaMetrics, Steps: steps, Duration: f.duration, Warmup: f.warmup, Arms: arms, Seed: f.seed,
			Speed: f.speed, RequestTimeout: f.timeout, Profile: profile, LBStats: lbLabel,
			Progress: bench.NewProgress(os.Stderr, phases), Workload: shape, MaxContext: f.maxContext,
		})
		if err != nil {
			return err
		}
	}
	if f.trace {
		if err := tr.WriteAll(out); err != nil {
			return fmt.Errorf("writing the trace: %w", err)
		}
	}
	return finishReport(os.Stdout, rep, out)
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

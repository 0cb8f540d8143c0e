package bench

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/lmwarden/lmwarden/agent/placement"
)

// Report is one benchmark run: how it was run and one result per step and
// arm. It is what report.json holds and what the table and plots draw.
type Report struct {
	Mode     string `json:"mode"` // "virtual" or "real"
	Target   string `json:"target,omitempty"`
	API      string `json:"api,omitempty"`
	Profile  string `json:"profile,omitempty"`
	Replicas int    `json:"replicas"`
	// ReplicasRead are the /metrics series read, in replica order (real runs).
	ReplicasRead []string `json:"replicas_read,omitempty"`
	LBStats      string   `json:"lb_stats,omitempty"` // the off arm's balancer stats mode
	// SpillThreshold is the warden's spill threshold a virtual run set
	// ("": the warden's default).
	SpillThreshold string  `json:"spill_threshold,omitempty"`
	Speed          float64 `json:"speed,omitempty"` // times are simulated when > 1
	Seed           uint64  `json:"seed"`
	// PollSeconds is how often replica stats reached the placement (virtual
	// runs; 0 when unknown), in the replicas' time.
	PollSeconds float64 `json:"poll_seconds,omitempty"`
	StepSeconds float64 `json:"step_seconds"`
	Steps       []Step  `json:"steps"`
	// StepNotes say how steps stated as a load were sized (load.go).
	StepNotes []string `json:"step_notes,omitempty"`
	// Workload names the sessions' shape; MaxContext is the model's context
	// where sessions compact (tokens).
	Workload   string   `json:"workload,omitempty"`
	MaxContext int      `json:"max_context,omitempty"`
	Arms       []string `json:"arms"`
	// Replay describes the trace a replay played (replay.go).
	Replay *ReplayInfo `json:"replay,omitempty"`
	// ArmPolicies says what each arm ran (e.g. off = vllm-lb, lb-stats fresh).
	ArmPolicies map[string]string `json:"arm_policies"`
	// WorkloadIdeal is the steady-state ideal hit rate of the workload.
	WorkloadIdeal    Num       `json:"workload_ideal_hit_rate"`
	PercentileMethod string    `json:"percentile_method"`
	Started          time.Time `json:"started"`
	WallSeconds      float64   `json:"wall_seconds"`
	Results          []Result  `json:"results"`
}

// Result is one step (concurrency) under one arm.
type Result struct {
	// Step is the step: Sessions (closed loop), or the arrival rate (open
	// loop), and the load it was sized for (steps.go).
	Step
	Arm     string `json:"arm"`
	Seconds Num    `json:"seconds"` // measured window (simulated when the replicas are)

	Requests  int `json:"requests"`           // answered within the window
	Errors    int `json:"errors"`             // failed (connect, HTTP status, broken stream)
	Timeouts  int `json:"timeouts"`           // no answer within the request timeout
	Cut       int `json:"cut"`                // still in flight when the window closed
	Completed int `json:"sessions_completed"` // sessions that finished all turns

	// SessionsPerHour is answered turns / 6 an hour (session equivalents).
	SessionsPerHour    Num `json:"sessions_per_hour"`
	OutputTokensPerMin Num `json:"output_tokens_per_min"`

	TTFTP50        Num `json:"ttft_p50_s"` // per request
	TTFTP95        Num `json:"ttft_p95_s"`
	SessionTTFTP50 Num `json:"session_ttft_p50_s"` // each session's median, then across sessions
	SessionTTFTP95 Num `json:"session_ttft_p95_s"`

	ReplicasBusy Num `json:"replicas_busy"` // mean number of replicas with running requests
	HitRate      Num `json:"hit_rate"`      // pooled delta(hits)/delta(queries) from the replicas
	// ClientCachedShare is the cached share of prompt tokens the responses'
	// usage reported: the client's view of the same thing.
	ClientCachedShare Num `json:"client_cached_share"`
	// QueriesPerPromptToken is the replicas' prefix-cache queries (the
	// counters' increase) over the prompt tokens of the answered requests:
	// about 1 where vLLM counts each request once; well above 1 where it
	// counts every look-up of a waiting request, which inflates the
	// counters while requests wait (docs/sim.md).
	QueriesPerPromptToken Num `json:"queries_per_prompt_token"`
	IdealHitRate          Num `json:"ideal_hit_rate"` // of the turns actually sent
	CounterResets         int `json:"counter_resets"`

	// Stayed is the share of a session's later requests that went to the
	// replica its previous request went to (NaN when unknowable).
	Stayed Num `json:"stayed"`
	// Load is each replica's share of the requests, and Imbalance max/mean.
	Load []float64 `json:"load_per_replica"`
	// MeanRunning and MeanWaiting are each replica's polled running and
	// waiting counts, averaged over the window: the load as the replica saw it.
	MeanRunning []Num `json:"mean_running_per_replica"`
	MeanWaiting []Num `json:"mean_waiting_per_replica"`
	Imbalance   Num   `json:"load_imbalance"`

	TaskStats

	// TTFT's mean and further percentiles, per request.
	TTFTMean Num `json:"ttft_mean_s"`
	TTFTP90  Num `json:"ttft_p90_s"`
	TTFTP99  Num `json:"ttft_p99_s"`

	// Replay holds a replay step's own numbers.
	Replay *ReplayResult `json:"replay,omitempty"`
	// ClaudeCode is what the Claude Code workload sent in the window
	// (warm-up included) beside the published figures.
	ClaudeCode *CCReport `json:"claude_code,omitempty"`

	Notes []string `json:"notes,omitempty"`
}

// ReplayInfo says what a replay played.
type ReplayInfo struct {
	Trace string `json:"trace"`
	Block int    `json:"block_tokens"`
	// FromSeconds and UntilSeconds are the slice of the trace's time (0:
	// its end).
	FromSeconds   float64 `json:"from_s"`
	UntilSeconds  float64 `json:"until_s,omitempty"`
	SpanSeconds   float64 `json:"span_s"`
	Requests      int     `json:"requests"`
	Conversations int     `json:"conversations"`
	// TraceConversations are the whole trace's, rebuilt from its hash
	// chains, and TraceContinued the rows that continue one.
	TraceRequests      int  `json:"trace_requests"`
	TraceConversations int  `json:"trace_conversations"`
	TraceContinued     int  `json:"trace_continued"`
	SessionHeader      bool `json:"session_header"`
}

// TaskStats are what an agent user waits for (bench/tasks.go): whole
// tasks, first turns against later ones, and waits at the warden.
type TaskStats struct {
	// A task is a session's turns, from its first request sent to the last
	// token of its last turn; the tasks of a window are the sessions that
	// finished within it (Completed counts them), started within it or
	// during the warm-up before it.
	TaskP50 Num `json:"task_p50_s"`
	TaskP95 Num `json:"task_p95_s"`
	// TasksUnfinished are sessions that had started (in the window or its
	// warm-up) and not finished when it closed (failed ones not included).
	TasksUnfinished int `json:"tasks_unfinished"`
	// TaskP50Open and TaskP95Open count the unfinished sessions too, at
	// their time so far: lower bounds.
	TaskP50Open Num `json:"task_p50_with_unfinished_s"`
	TaskP95Open Num `json:"task_p95_with_unfinished_s"`

	// TTFT of each session's first request, and of every later one.
	TTFTFirstP50 Num `json:"ttft_first_p50_s"`
	TTFTFirstP95 Num `json:"ttft_first_p95_s"`
	TTFTLaterP50 Num `json:"ttft_later_p50_s"`
	TTFTLaterP95 Num `json:"ttft_later_p95_s"`
	// SubagentCached is the cached share of the prompt tokens of
	// subagents' later requests (NaN: none; workload claude-code).
	SubagentCached Num `json:"subagent_later_cached"`
	// Compactions counts the compaction requests answered (workload long).
	Compactions int `json:"compactions"`

	// Parked counts the requests that waited at the warden (admission),
	// ParkedAtClose those still waiting when the window closed; the
	// percentiles and the maximum are over all of them, the latter at their
	// wait so far.
	Parked        int `json:"parked"`
	ParkedAtClose int `json:"parked_at_close"`
	ParkedP50     Num `json:"parked_p50_s"`
	ParkedP95     Num `json:"parked_p95_s"`
	ParkedMax     Num `json:"parked_max_s"`

	// Admission is what the warden's admission did in the window (virtual
	// runs; nil when it never engaged).
	Admission *AdmissionCounts `json:"admission,omitempty"`

	// LiveContext is the mean over polls of the context (tokens) of the
	// sessions started and not finished; LiveContextX the same over the
	// replicas' total KV capacity (NaN when a capacity is unknown).
	LiveContext  Num `json:"live_context_tokens"`
	LiveContextX Num `json:"live_context_x"`
}

// AdmissionCounts are the warden's admission counters over a window
// (placement.AdmissionStats' increase).
type AdmissionCounts struct {
	Parked   uint64 `json:"parked"`    // requests that waited
	Rejected uint64 `json:"rejected"`  // refused, queue full (503)
	TimedOut uint64 `json:"timed_out"` // placed at the timeout
	Yields   uint64 `json:"yields"`    // sessions that gave up their room after a quantum
	Evicted  uint64 `json:"evicted"`   // sessions whose room went to a request at its timeout, or to a grown session's replica
	Released uint64 `json:"released"`  // sessions idle so long they had likely ended whose room went to a waiter
	Switches uint64 `json:"switches"`  // times admission engaged (mode auto)
}

// admissionCounts is the increase from a to b (nil when nothing happened).
func admissionCounts(a, b placement.AdmissionStats) *AdmissionCounts {
	c := &AdmissionCounts{Parked: b.Waits - a.Waits, Rejected: b.Rejected - a.Rejected, TimedOut: b.TimedOut - a.TimedOut,
		Yields: b.Yields - a.Yields, Evicted: b.Evicted - a.Evicted, Released: b.Released - a.Released, Switches: b.Switches - a.Switches}
	if *c == (AdmissionCounts{}) && !b.Engaged {
		return nil
	}
	return c
}

// Failed says whether the step had errors or timeouts.
func (r Result) Failed() bool { return r.Errors > 0 || r.Timeouts > 0 }

// Num is a float64 that encodes NaN (no data) as JSON null.
type Num float64

// MarshalJSON writes null for NaN and infinities.
func (n Num) MarshalJSON() ([]byte, error) {
	f := float64(n)
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return []byte("null"), nil
	}
	return strconv.AppendFloat(nil, f, 'g', 6, 64), nil
}

// UnmarshalJSON reads null as NaN.
func (n *Num) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		*n = Num(math.NaN())
		return nil
	}
	f, err := strconv.ParseFloat(string(b), 64)
	*n = Num(f)
	return err
}

// Find returns the result of a closed-loop step of sessions and an arm.
func (r *Report) Find(sessions int, arm string) (Result, bool) {
	for _, x := range r.Results {
		if x.Sessions == sessions && !x.Open() && x.Arm == arm {
			return x, true
		}
	}
	return Result{}, false
}

// FindStep returns the result of a step and an arm.
func (r *Report) FindStep(step Step, arm string) (Result, bool) {
	for _, x := range r.Results {
		if x.Step == step && x.Arm == arm {
			return x, true
		}
	}
	return Result{}, false
}

// Files written by Write, relative to the output directory.
const (
	ReportJSON     = "report.json"
	ReportCSV      = "report.csv"
	PlotTTFT       = "ttft.svg"
	PlotHitRate    = "hit_rate.svg"
	PlotThroughput = "output_tokens.svg"
	PlotTask       = "task.svg"
)

// Write puts report.json, report.csv and the SVG plots into dir.
func (r *Report) Write(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, ReportJSON), append(b, '\n'), 0o644); err != nil {
		return err
	}
	if err := r.writeCSV(filepath.Join(dir, ReportCSV)); err != nil {
		return fmt.Errorf("csv: %w", err)
	}
	if err := r.writePlots(dir); err != nil {
		return fmt.Errorf("plots: %w", err)
	}
	return nil
}

// ReadReport loads a report.json.
func ReadReport(path string) (*Report, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var r Report
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &r, nil
}

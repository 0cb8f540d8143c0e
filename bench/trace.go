package bench

import (
	"encoding/csv"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/lmwarden/lmwarden/agent/placement"
	"github.com/lmwarden/lmwarden/sim"
)

// Tracer receives the virtual runner's raw observations: every poll of
// every replica and every answered request. The overload study
// (docs/notes/2026-11-30-overload-and-policy-cost.md) is drawn from them
// (`lmwarden bench --virtual --trace`).
type Tracer interface {
	// Window starts a step-arm window.
	Window(step Step, arm string, start time.Time)
	// Poll is one replica's numbers at one poll.
	Poll(at time.Time, replica int, s sim.Stats)
	// Request is one request answered within the window.
	Request(r TraceRequest)
}

// TraceRequest is one answered request as the client and the replica saw it.
type TraceRequest struct {
	Session string
	Turn    int // 0: the session's first turn
	Replica int
	Kind    string // the placement kind (new, sticky, spilled, balanced, ...)
	Sent    time.Time
	TTFT    float64 // seconds, at the client (NaN if no token)
	Done    time.Time
	Prompt  int // prompt tokens
	Cached  int // of which served from the prefix cache
	Output  int
	// Parked is the time the request waited at the warden before it was
	// placed (admission; 0 otherwise), included in TTFT.
	Parked float64
	// Cut: still unanswered (in flight or parked) when the window closed;
	// TTFT is then a lower bound (close - sent) unless a token had come.
	Cut bool
}

// cutRequest is the trace row of a request the window's close cut.
func cutRequest(session string, turn int, p placement.Placement, sent time.Time, ttft float64, at time.Time, parked float64) TraceRequest {
	if math.IsNaN(ttft) {
		ttft = at.Sub(sent).Seconds()
	}
	return TraceRequest{Session: session, Turn: turn, Replica: p.Replica, Kind: p.Kind.String(), Sent: sent,
		TTFT: ttft, Done: at, Cut: true, Parked: parked}
}

// TraceWindow is what a TraceRecorder kept of one window.
type TraceWindow struct {
	Step
	Arm      string
	Start    time.Time
	Polls    []TracePoll
	Requests []TraceRequest
}

// TracePoll is one replica's gauges at one poll.
type TracePoll struct {
	At              float64 // seconds since the window's start
	Replica         int
	Running         int
	Waiting         int
	KVUsage         float64
	PromptTokens    uint64
	PrefixQueries   uint64
	PrefixHits      uint64
	Preemptions     uint64
	GenerationTotal uint64
}

// TraceRecorder keeps every window in memory (a 3-minute window of 32
// sessions is a few thousand rows).
type TraceRecorder struct {
	Windows []*TraceWindow
}

// Window implements Tracer.
func (t *TraceRecorder) Window(step Step, arm string, start time.Time) {
	t.Windows = append(t.Windows, &TraceWindow{Step: step, Arm: arm, Start: start})
}

// Poll implements Tracer.
func (t *TraceRecorder) Poll(at time.Time, replica int, s sim.Stats) {
	w := t.current()
	if w == nil || at.Before(w.Start) {
		return
	}
	w.Polls = append(w.Polls, TracePoll{
		At: at.Sub(w.Start).Seconds(), Replica: replica, Running: s.Running, Waiting: s.Waiting,
		KVUsage: s.KVUsage, PromptTokens: s.PromptTokens, PrefixQueries: s.PrefixQueries, PrefixHits: s.PrefixHits,
		Preemptions: s.Preemptions, GenerationTotal: s.GenerationTokens,
	})
}

// Request implements Tracer.
func (t *TraceRecorder) Request(r TraceRequest) {
	if w := t.current(); w != nil {
		w.Requests = append(w.Requests, r)
	}
}

func (t *TraceRecorder) current() *TraceWindow {
	if len(t.Windows) == 0 {
		return nil
	}
	return t.Windows[len(t.Windows)-1]
}

// Find returns the window of a step and arm.
func (t *TraceRecorder) Find(sessions int, arm string) *TraceWindow {
	for _, w := range t.Windows {
		if w.Sessions == sessions && !w.Open() && w.Arm == arm {
			return w
		}
	}
	return nil
}

// Trace files written by WriteTrace.
const (
	TracePollsCSV    = "trace_polls.csv"
	TraceRequestsCSV = "trace_requests.csv"
)

// traceRequestsHeader is trace_requests.csv's header; ReadPool reads the
// columns back by these names (pool.go).
var traceRequestsHeader = []string{"sessions", "arm", "session", "turn", "replica", "kind", "sent_s", "ttft_s",
	"done_s", "prompt_tokens", "cached_tokens", "output_tokens", "parked_s", "cut"}

// Write puts the trace as two CSV files into dir.
func (t *TraceRecorder) Write(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	polls := [][]string{{"sessions", "arm", "t_s", "replica", "running", "waiting", "kv_usage",
		"prompt_tokens", "prefix_queries", "prefix_hits", "preemptions", "generation_tokens"}}
	reqs := [][]string{traceRequestsHeader}
	f := func(x float64) string { return strconv.FormatFloat(x, 'f', 3, 64) }
	for _, w := range t.Windows {
		head := []string{w.Step.String(), w.Arm}
		for _, p := range w.Polls {
			polls = append(polls, append(append([]string{}, head...), f(p.At), strconv.Itoa(p.Replica),
				strconv.Itoa(p.Running), strconv.Itoa(p.Waiting), f(p.KVUsage),
				strconv.FormatUint(p.PromptTokens, 10), strconv.FormatUint(p.PrefixQueries, 10), strconv.FormatUint(p.PrefixHits, 10),
				strconv.FormatUint(p.Preemptions, 10), strconv.FormatUint(p.GenerationTotal, 10)))
		}
		for _, r := range w.Requests {
			ttft := "NaN"
			if !math.IsNaN(r.TTFT) {
				ttft = f(r.TTFT)
			}
			reqs = append(reqs, append(append([]string{}, head...), r.Session, strconv.Itoa(r.Turn),
				strconv.Itoa(r.Replica), r.Kind, f(r.Sent.Sub(w.Start).Seconds()), ttft,
				f(r.Done.Sub(w.Start).Seconds()), strconv.Itoa(r.Prompt), strconv.Itoa(r.Cached),
				strconv.Itoa(r.Output), f(r.Parked), strconv.FormatBool(r.Cut)))
		}
	}
	for name, rows := range map[string][][]string{TracePollsCSV: polls, TraceRequestsCSV: reqs} {
		if err := writeCSVFile(filepath.Join(dir, name), rows); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	return nil
}

func writeCSVFile(path string, rows [][]string) error {
	fh, err := os.Create(path)
	if err != nil {
		return err
	}
	w := csv.NewWriter(fh)
	if err := w.WriteAll(rows); err != nil {
		fh.Close()
		return err
	}
	return fh.Close()
}

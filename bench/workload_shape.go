package bench

import "fmt"

// WorkloadShape sizes a workload's sessions in tokens (docs/workload.md).
// The turn count, pauses and output lengths are the same for every shape.
type WorkloadShape struct {
	Name                       string
	FirstUserMin, FirstUserMax int // the first user message, unique to the session
	FollowUpTokens             int // each later user message
	FollowUpJitter             int

	// session and plan, when set, draw the shape's sessions and their
	// sizes instead of the six-turn generator (workload_long.go).
	session func(w *Workload, i int, variant uint64) *Session
	plan    func(w *Workload, i int) sessionPlan
	// claudeCode: sessions are Claude Code's, with subagents
	// (workload_claude.go), played as flows.
	claudeCode bool
}

// The workloads `lmwarden bench --workload` knows.
var (
	// DefaultShape is the agent workload: about 11k tokens at the first turn,
	// about 14k at the last.
	DefaultShape = WorkloadShape{Name: "agent", FirstUserMin: FirstUserMin, FirstUserMax: FirstUserMax,
		FollowUpTokens: FollowUpTokens, FollowUpJitter: FollowUpJitter}
	// BigShape is the reference's second box: sessions of about 58k tokens
	// (about 51k at the first turn, 3.5k of it the shared system prompt,
	// about 62k at the sixth), for profile rtx5090-gemma3-27b-int4.
	BigShape = WorkloadShape{Name: "big", FirstUserMin: 46_500, FirstUserMax: 48_500,
		FollowUpTokens: 2000, FollowUpJitter: 100}
)

// ParseWorkload returns the named shape: agent, big, long or claude-code.
func ParseWorkload(name string) (WorkloadShape, error) {
	for _, s := range []WorkloadShape{DefaultShape, BigShape, LongShape, ClaudeCodeShape} {
		if s.Name == name {
			return s, nil
		}
	}
	return WorkloadShape{}, fmt.Errorf("%w: workload %q (want agent, big, long or claude-code)", ErrBadConfig, name)
}

// NewWorkloadShape is NewWorkload with another shape (zero: the default).
func NewWorkloadShape(seed uint64, shape WorkloadShape) *Workload {
	w := NewWorkload(seed)
	if shape.Name != "" {
		w.Shape = shape
	}
	return w
}

package bench

import "fmt"

// WorkloadShape sizes a workload's sessions in tokens (docs/workload.md).
// The turn count, pauses and output lengths are the same for every shape.
type WorkloadShape struct {
	Name                       string
	FirstUserMin, FirstUserMax int // the first user message, unique to the session
	FollowUpTokens             int // each later user message
	FollowUpJitter             int
	// ToolTime adds the agent's tool time (log-uniform ToolPauseMin to
	// ToolPauseMax) to the pause before every later turn; without it a
	// session sends its next turn as soon as the last one ended (and the
	// client's pause), as the reference's harness did.
	ToolTime bool
	// MinOutput is the least max_tokens a turn draws (up to
	// MaxOutputTokens); 0 is MinOutputTokens.
	MinOutput int

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
	// DefaultShape is the agent workload, the reference's harness: about
	// 11.6k tokens at the first turn, about 15.4k at the last; turns back
	// to back, each writing MaxOutputTokens (the model writes past the
	// limit on these prompts, so every turn ends at max_tokens).
	DefaultShape = WorkloadShape{Name: "agent", FirstUserMin: FirstUserMin, FirstUserMax: FirstUserMax,
		FollowUpTokens: FollowUpTokens, FollowUpJitter: FollowUpJitter, MinOutput: MaxOutputTokens}
	// BigShape is the reference's second box: sessions of about 58k tokens
	// (about 52k at the first turn, 4.3k of it the shared system prompt,
	// about 62k at the sixth), for profile rtx5090-gemma3-27b-int4; real
	// agents there, with their tool time.
	BigShape = WorkloadShape{Name: "big", FirstUserMin: 46_500, FirstUserMax: 48_500,
		FollowUpTokens: 2000, FollowUpJitter: 100, ToolTime: true}
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

func (s WorkloadShape) minOutput() int {
	if s.MinOutput > 0 {
		return s.MinOutput
	}
	return MinOutputTokens
}

// NewWorkloadShape is NewWorkload with another shape (zero: the default).
func NewWorkloadShape(seed uint64, shape WorkloadShape) *Workload {
	w := NewWorkload(seed)
	if shape.Name != "" {
		w.Shape = shape
	}
	return w
}

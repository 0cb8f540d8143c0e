package sim

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// ReplyModel is how the simulated model answers: how long a text reply runs
// before the model ends it by itself, and how often, when the request offers
// tools, the reply is a call of one of them instead. Everything is drawn
// from the prompt (greedy decoding: the same prompt gets the same answer).
type ReplyModel struct {
	Lengths LengthDist // natural length of a text reply, in tokens
	ToolUse float64    // share of replies that call a tool when tools are offered, 0-1
}

// DefaultReplies is shaped like a coding agent's replies: a median of 250
// tokens with a long tail (one reply in ten runs past 900 tokens, one in a
// hundred past 2,500), and half of the replies a tool call when tools are
// offered, as an agent alternates reading files and explaining.
var DefaultReplies = ReplyModel{Lengths: LengthDist{Kind: "lognormal", A: 250, B: 1.0}, ToolUse: 0.5}

// LengthDist is a distribution of reply lengths in tokens:
//
//	lognormal:MEDIAN:SIGMA  the log of the length is normal (SIGMA its sd)
//	uniform:MIN:MAX         every length from MIN to MAX alike
//	fixed:N                 always N
type LengthDist struct {
	Kind string  // "lognormal", "uniform" or "fixed"
	A, B float64 // median and sigma; min and max; N
}

// maxNaturalTokens bounds a drawn length: past it the tail is only ever cut
// by max_tokens anyway.
const maxNaturalTokens = 65_536

// ParseLengthDist reads the forms LengthDist documents.
func ParseLengthDist(s string) (LengthDist, error) {
	parts := strings.Split(s, ":")
	num := func(i int) (float64, error) {
		v, err := strconv.ParseFloat(parts[i], 64)
		if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
			return 0, fmt.Errorf("%w: %q in %q is not a number", ErrBadReplyModel, parts[i], s)
		}
		return v, nil
	}
	d := LengthDist{Kind: parts[0]}
	var err error
	switch {
	case d.Kind == "fixed" && len(parts) == 2:
		if d.A, err = num(1); err == nil && d.A < 1 {
			err = fmt.Errorf("%w: fixed length %v, want at least 1", ErrBadReplyModel, d.A)
		}
	case (d.Kind == "lognormal" || d.Kind == "uniform") && len(parts) == 3:
		if d.A, err = num(1); err != nil {
			return d, err
		}
		if d.B, err = num(2); err != nil {
			return d, err
		}
		switch {
		case d.Kind == "lognormal" && (d.A < 1 || d.B < 0):
			err = fmt.Errorf("%w: lognormal median %v and sigma %v, want median >= 1, sigma >= 0", ErrBadReplyModel, d.A, d.B)
		case d.Kind == "uniform" && (d.A < 1 || d.B < d.A):
			err = fmt.Errorf("%w: uniform %v to %v, want 1 <= min <= max", ErrBadReplyModel, d.A, d.B)
		}
	default:
		err = fmt.Errorf("%w: %q (want lognormal:MEDIAN:SIGMA, uniform:MIN:MAX or fixed:N)", ErrBadReplyModel, s)
	}
	return d, err
}

// String is the form ParseLengthDist reads.
func (d LengthDist) String() string {
	g := func(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }
	if d.Kind == "fixed" {
		return "fixed:" + g(d.A)
	}
	return d.Kind + ":" + g(d.A) + ":" + g(d.B)
}

// draw returns a length for the uniform variates u1, u2 in (0, 1).
func (d LengthDist) draw(u1, u2 float64) int {
	var v float64
	switch d.Kind {
	case "fixed":
		v = d.A
	case "uniform":
		v = d.A + math.Floor(u1*(d.B-d.A+1))
	default: // lognormal, by Box-Muller
		z := math.Sqrt(-2*math.Log(u1)) * math.Cos(2*math.Pi*u2)
		v = math.Round(d.A * math.Exp(d.B*z))
	}
	return int(min(max(v, 1), maxNaturalTokens))
}

// Check reports a reply model that cannot be drawn from.
func (m ReplyModel) Check() error {
	if m.ToolUse < 0 || m.ToolUse > 1 || math.IsNaN(m.ToolUse) {
		return fmt.Errorf("%w: tool-use share %v, want 0 to 1", ErrBadReplyModel, m.ToolUse)
	}
	if _, err := ParseLengthDist(m.Lengths.String()); err != nil {
		return err
	}
	return nil
}

// unit turns the k-th draw of a seed into a uniform variate in (0, 1).
func unit(seed uint64, k uint64) float64 {
	return (float64(mix64(seed^(k+1)*0x9e3779b97f4a7c15)>>11) + 0.5) / (1 << 53)
}

// fillerText is n tokens of the words the simulated model "writes".
func fillerText(seed uint64, n int) string {
	var b strings.Builder
	b.Grow(n * BytesPerToken)
	for i := range n {
		_, w := outputToken(seed, i)
		b.WriteString(w)
	}
	return b.String()
}

// replyPlan is everything one reply would generate if nothing cut it short
// (4 bytes a token) and, for a tool call, where the call sits in it.
type replyPlan struct {
	text string
	call *plannedCall
}

// plannedCall locates a tool call in a replyPlan's text: the call's
// rendering (toolCallText) starts at start (after the text before it and a
// newline, if there is text), its arguments span [argsStart, argsEnd).
type plannedCall struct {
	name, args                string
	start, argsStart, argsEnd int
}

// plan draws the reply to a prompt with this seed. With tools offered (and
// tool_choice allowing it) a ToolUse share of replies is one call of an
// offered tool with arguments generated from its schema, sometimes after a
// short sentence; the rest are text of a length drawn from Lengths, at
// least minTokens long.
func (m ReplyModel) plan(seed uint64, tools []offeredTool, choice toolChoice, minTokens int) replyPlan {
	if t, ok := pickTool(seed, tools, choice, m.ToolUse); ok {
		// A sentence before the call renders as a text block then the
		// call, joined by a newline (FlattenContent).
		var lead string
		if unit(seed, 3) < 0.5 {
			lead = fillerText(seed, 4+int(unit(seed, 4)*20)) + "\n"
		}
		args, err := encodeCanonical(generateArgs(t.schema, seed^0xa5a5_5a5a_0f0f_f0f0))
		if err != nil {
			args = "{}"
		}
		call := toolCallText(t.name, args)
		at := len(lead)
		argsAt := at + len(call) - len(toolCallClose) - len(args)
		return replyPlan{text: lead + call, call: &plannedCall{name: t.name, args: args,
			start: at, argsStart: argsAt, argsEnd: argsAt + len(args)}}
	}
	n := max(m.Lengths.draw(unit(seed, 1), unit(seed, 2)), minTokens)
	return replyPlan{text: fillerText(seed, n)}
}

// textEnd is where the reply's visible text ends: all of it for a text
// reply, the sentence before the newline for a call.
func (p replyPlan) textEnd() int {
	if p.call == nil {
		return math.MaxInt
	}
	return max(p.call.start-1, 0)
}

// complete says whether text, the output of a finished request, is the
// whole planned tool call (not cut by max_tokens or a stop sequence).
func (p replyPlan) complete(res Result) bool {
	return p.call != nil && res.FinishReason == "stop" && res.StopSequence == "" && len(res.OutputText) == len(p.text)
}

// pickTool decides whether this reply is a tool call, and of which tool.
func pickTool(seed uint64, tools []offeredTool, choice toolChoice, share float64) (offeredTool, bool) {
	if len(tools) == 0 || choice.mode == "none" {
		return offeredTool{}, false
	}
	switch choice.mode {
	case "tool":
		for _, t := range tools {
			if t.name == choice.name {
				return t, true
			}
		}
		return offeredTool{}, false
	case "any":
	default:
		if unit(seed, 0) >= share {
			return offeredTool{}, false
		}
	}
	var callable []offeredTool
	for _, t := range tools {
		if !t.reserved {
			callable = append(callable, t)
		}
	}
	if len(callable) == 0 {
		if choice.mode != "any" {
			return offeredTool{}, false
		}
		callable = tools // a call is required: any of them
	}
	return callable[int(unit(seed, 5)*float64(len(callable)))%len(callable)], true
}

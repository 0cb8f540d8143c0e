package bench

import (
	"fmt"
	"sync"
	"time"

	"github.com/lmwarden/lmwarden/sim"
)

// ccSession is a Claude Code session as a flow (flow.go): the main agent's
// turns one after another, each segment (prefix reset) a conversation of
// its own under the session id; after some turns a group of subagents
// starts at once, each a conversation of its own with the parent's session
// id and its own agent id, and the parent's next turn waits for the whole
// group to finish.
type ccSession struct {
	w       *Workload
	index   int
	variant uint64
	plan    ccPlan
	limit   int
	id      string // the session id
	header  string // what X-Claude-Code-Session-Id carries ("": none)
	tokens  bool   // render prompts (virtual runs)
	stats   *ccStats

	seg     int      // the main agent's segment
	main    *ccConv  // its conversation
	turn    int      // main-agent turns answered
	agents  int      // subagents of the running group not yet done
	group   int      // the running group's main turn
	sysMain int      // the main system section's tokens
	sysSub  int      // the subagents'
	ended   []string // conversations ended since Ended was called
	failed  bool
	done    bool
}

// ccConv is one conversation of a session in flight.
type ccConv struct {
	c        *Conversation
	key      string // per-conversation statistics
	agent    string // x-claude-code-agent-id ("": the main agent)
	system   string
	sys      int      // its system section's tokens
	prev     []uint32 // the last prompt (virtual runs)
	reused   int      // what an ideal cache holds of the next prompt
	lastSent int      // the last answered turn's prompt, for the growth
}

// newCCSession is session i of the workload for a window's variant.
func newCCSession(w *Workload, i int, variant uint64, limit int, noHeader, tokens bool, stats *ccStats) *ccSession {
	s := &ccSession{w: w, index: i, variant: variant, plan: ccSessionPlan(w.Seed, i, limit), limit: limit,
		tokens: tokens, stats: stats}
	s.id = uuid(ccText(w, variant, i, 0))
	if !noHeader {
		s.header = s.id
	}
	main, agent := w.ccSystems()
	s.sysMain, s.sysSub = systemSection(main), systemSection(agent)
	return s
}

func (s *ccSession) ID() string { return s.id }

// Ended names the subagents that ended, and the main agent at the end.
func (s *ccSession) Ended() []string {
	e := s.ended
	s.ended = nil
	return e
}
func (s *ccSession) Done() bool   { return s.done }
func (s *ccSession) Failed() bool { return s.failed }

// Start opens the first segment.
func (s *ccSession) Start(now time.Duration) []flowSend { return s.openSegment(now) }

func (s *ccSession) openSegment(now time.Duration) []flowSend {
	main, _ := s.w.ccSystems()
	c := ccConversation(s.index, s.id, fmt.Sprintf("Task %s/%d:", s.id, s.seg), s.plan.segments[s.seg],
		ccText(s.w, s.variant, s.index, 1+s.seg), s.limit)
	s.main = &ccConv{c: c, key: s.id, system: main, sys: s.sysMain, reused: s.sysMain}
	if s.seg > 0 {
		s.stats.gap(c.Session.Pauses[0])
	}
	return []flowSend{s.next(s.main, now+c.Session.Pauses[0])}
}

// next is a conversation's next request, at.
func (s *ccSession) next(cv *ccConv, at time.Duration) flowSend {
	req := cv.c.NextRequest()
	if req.Fresh {
		cv.prev, cv.reused = nil, cv.sys
	}
	f := flowSend{At: at, Conv: cv.key, Session: s.header, System: cv.system, Messages: req.Messages,
		MaxTokens: req.MaxTokens, First: req.First && cv.agent == "" && s.seg == 0, Fresh: req.Fresh,
		Reused: cv.reused, Compaction: req.Compaction, Turn: cv.c.Turn,
		SubagentLater: cv.agent != "" && !req.First && !req.Fresh}
	if s.header != "" {
		f.Agent = cv.agent
	}
	if s.tokens {
		f.Prompt = nextPrompt(cv.system, cv.prev, req.Messages)
		cv.prev = f.Prompt
	}
	f.tag = cv
	return f
}

// Answered moves the conversation the answer belongs to.
func (s *ccSession) Answered(f *flowSend, a flowAnswer, now time.Duration) []flowSend {
	cv, _ := f.tag.(*ccConv)
	if cv == nil {
		return nil
	}
	if cv.agent != "" {
		return s.agentAnswered(cv, f, a, now)
	}
	if a.Err != nil {
		s.failed, s.done = true, true
		s.ended = append(s.ended, s.id)
		return nil
	}
	s.stats.answered(f, a, cv, false)
	cv.c.Answer(a.Text, a.Prompt, a.Output)
	cv.reused = a.Prompt + a.Output
	if f.Compaction {
		return []flowSend{s.next(cv, now)}
	}
	s.turn++
	if group, ok := s.plan.groups[s.turn-1]; ok {
		return s.launch(group, now)
	}
	return s.mainNext(now, false)
}

// mainNext continues the main agent: its next turn after the tools' time
// (after a group, the group was the tools' time: at once), the next
// segment, or the end of the session.
func (s *ccSession) mainNext(now time.Duration, afterGroup bool) []flowSend {
	c := s.main.c
	if !c.Done() {
		pause := c.Session.Pauses[c.Turn]
		if afterGroup {
			pause = PauseMin
		} else {
			s.stats.gap(pause)
		}
		return []flowSend{s.next(s.main, now+pause)}
	}
	if s.seg++; s.seg < len(s.plan.segments) {
		s.stats.reset()
		return s.openSegment(now)
	}
	s.stats.sessionDone(s.turn)
	s.done = true
	s.ended = append(s.ended, s.id)
	return nil
}

// launch starts a group's subagents at once.
func (s *ccSession) launch(group []sessionPlan, now time.Duration) []flowSend {
	_, system := s.w.ccSystems()
	s.agents, s.group = len(group), s.turn-1
	s.stats.group(len(group))
	out := make([]flowSend, 0, len(group))
	for a, p := range group {
		r := ccText(s.w, s.variant, s.index, 1<<16|s.group<<8|a)
		id := agentID(r)
		c := ccConversation(s.index, s.id+"/"+id, "Subtask "+id+":", p, r, s.limit)
		cv := &ccConv{c: c, key: s.id + "/" + id, agent: id, system: system, sys: s.sysSub, reused: s.sysSub}
		out = append(out, s.next(cv, now+c.Session.Pauses[0]))
	}
	return out
}

// agentAnswered moves a subagent; the last of its group to end lets the
// parent go on (a failed subagent ends, and its parent goes on without it,
// as the CLI reports a failed task to the model).
func (s *ccSession) agentAnswered(cv *ccConv, f *flowSend, a flowAnswer, now time.Duration) []flowSend {
	if a.Err == nil {
		s.stats.answered(f, a, cv, true)
		cv.c.Answer(a.Text, a.Prompt, a.Output)
		cv.reused = a.Prompt + a.Output
		if !cv.c.Done() {
			pause := cv.c.Session.Pauses[cv.c.Turn]
			if f.Compaction {
				pause = 0
			}
			return []flowSend{s.next(cv, now+pause)}
		}
	}
	s.ended = append(s.ended, cv.key)
	if s.agents--; s.agents > 0 {
		return nil
	}
	return s.mainNext(now, true)
}

// systemSection is the tokens a rendered system prompt takes.
func systemSection(system string) int { return len(sim.RenderPrompt(system, nil)) - 1 }

// ccOptions are a window's settings for its sessions.
type ccOptions struct {
	seed     uint64
	variant  uint64
	limit    int           // the model's context
	window   time.Duration // warm-up and measure, for the open loop's arrivals
	noHeader bool
	tokens   bool
	stats    *ccStats
}

// ccFlows is a window of Claude Code sessions: step.Sessions at a time in
// a closed loop (each slot's first at its own offset, a finished one
// replaced at once), or arriving at the step's rate; session i is the
// i-th to start.
func (w *Workload) ccFlows(step Step, o ccOptions) flowPlan {
	var mu sync.Mutex
	next := 0
	newFlow := func() flow {
		mu.Lock()
		i := next
		next++
		mu.Unlock()
		return newCCSession(w, i, o.variant, o.limit, o.noHeader, o.tokens, o.stats)
	}
	main, agent := w.ccSystems()
	plan := flowPlan{sysTokens: systemSection(main) + systemSection(agent)}
	if step.Open() {
		for _, at := range arrivalTimes(o.seed, step, o.window) {
			plan.starts = append(plan.starts, flowStart{at: at, f: newFlow})
		}
		return plan
	}
	for slot := range step.Sessions {
		plan.starts = append(plan.starts, flowStart{at: w.StartOffset(slot), f: newFlow})
	}
	plan.next = newFlow
	return plan
}

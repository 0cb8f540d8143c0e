package bench

import (
	"context"
	"time"

	"github.com/lmwarden/lmwarden/agent/placement"
	"github.com/lmwarden/lmwarden/sim"
)

// flowLoop plays flows (flow.go) in a virtual window.
type flowLoop struct {
	a       *armWindow
	plan    flowPlan
	started int                      // flows started
	pending int                      // of those, not done
	convs   map[flow]map[string]bool // each flow's live conversations
	last    time.Time                // the last answer's time
}

// replayCap bounds a window that lasts until its flows are done: a replay
// slow enough to pass it is overloaded past measuring.
const replayCap = 48 * time.Hour

// runFlows plays plan in one window: for its duration, or, for a replay,
// until every flow is done (the window's seconds then run to the last
// answer).
func (w *virtualWorld) runFlows(ctx context.Context, plan flowPlan, step Step, arm Arm) (Result, error) {
	a, err := w.openWindow(step, arm, false)
	if err != nil {
		return Result{}, err
	}
	if plan.untilDone {
		a.end = a.begin.Add(plan.span) // nominal, for the progress shown
	}
	l := &flowLoop{a: a, plan: plan, convs: map[flow]map[string]bool{}}
	for _, s := range plan.starts {
		w.v.At(a.begin.Add(s.at), func() { l.start(s.f()) })
	}
	end, idle := a.end, (func() bool)(nil)
	if plan.untilDone {
		end = a.begin.Add(replayCap)
		idle = func() bool { return l.started == len(plan.starts) && l.pending == 0 }
	}
	if err := a.play(ctx, end, idle); err != nil {
		return Result{}, err
	}
	seconds := w.cfg.Duration.Seconds()
	if plan.untilDone {
		seconds = 0
		if !l.last.IsZero() {
			seconds = l.last.Sub(a.start).Seconds()
		}
	}
	return a.close(seconds, plan.sysTokens, false), nil
}

// offset is t as a flow's time: from the window's first start.
func (l *flowLoop) offset(t time.Time) time.Duration { return t.Sub(l.a.begin) }

func (l *flowLoop) start(f flow) {
	l.started++
	l.pending++
	l.convs[f] = map[string]bool{}
	l.schedule(f, f.Start(l.offset(l.a.w.v.Now())))
}

// schedule sends each request at its time, and ends a flow with nothing
// left to do.
func (l *flowLoop) schedule(f flow, sends []flowSend) {
	w := l.a.w
	for i := range sends {
		s := &sends[i]
		w.v.At(l.a.begin.Add(s.At), func() { l.send(f, s) })
	}
	if f.Done() {
		l.finish(f, w.v.Now())
	}
}

// finish records a flow's end and, in a closed loop, starts the next.
func (l *flowLoop) finish(f flow, at time.Time) {
	a := l.a
	if _, ok := l.convs[f]; !ok {
		return // finished already
	}
	for c := range l.convs[f] {
		a.w.live.end(c)
	}
	delete(l.convs, f)
	l.pending--
	if f.Failed() {
		a.rec.tasks.sessionFailed(f.ID())
	} else {
		a.rec.completed++
		a.rec.tasks.sessionFinished(f.ID(), a.since(at))
	}
	if l.plan.next != nil && a.open {
		l.start(l.plan.next())
	}
}

func (l *flowLoop) send(f flow, s *flowSend) {
	a, w := l.a, l.a.w
	if !a.open {
		return
	}
	prompt := s.Prompt
	if prompt == nil {
		prompt = sim.RenderPrompt(s.System, s.Messages)
	}
	sent := w.v.Now()
	a.rec.tasks.sessionStarted(f.ID(), a.since(sent)) // its first request only
	l.convs[f][s.Conv] = true
	w.live.set(s.Conv, len(prompt))
	bytes := s.Bytes
	if bytes <= 0 {
		bytes = bodyBytes(s.System, s.Messages)
	}
	// the request reaches the front end over the clients' network
	// (network.go), as the session workloads' do
	w.v.At(sent.Add(w.net.upload(bytes)), func() {
		if !a.open {
			return
		}
		arrived := w.v.Now()
		req := placement.Request{PromptBytes: bytes, Now: arrived}
		w.keyRequest(&req, s)
		w.admit(req, s.Turn,
			func(p placement.Placement, err error) { l.submit(f, s, prompt, sent, arrived, p, err) })
	})
}

func (l *flowLoop) submit(f flow, s *flowSend, prompt []uint32, sent, arrived time.Time, p placement.Placement, err error) {
	a, w := l.a, l.a.w
	parked := w.v.Now().Sub(arrived).Seconds()
	if parked > 0 {
		a.rec.tasks.parkedFor(parked, false)
	}
	if err != nil {
		a.rec.failed("placement", false, err)
		l.schedule(f, f.Answered(s, flowAnswer{Err: err, TTFT: nanSec, FinishedAt: l.offset(w.v.Now())}, l.offset(w.v.Now())))
		return
	}
	a.rec.placed(s.Conv, p.Replica)
	w.nextID++
	id := w.nextID
	ttft := nanSec
	a.inFlight[id] = flight{replica: p.Replica, place: p}
	w.v.Submit(p.Replica, &sim.Request{
		ID: id, Prompt: prompt, MaxTokens: s.MaxTokens,
		OnFirstToken: func(at time.Time) { ttft = at.Add(w.net.down()).Sub(sent).Seconds() },
		OnDone: func(served time.Time, r sim.Result) {
			at := served.Add(w.net.down()) // the last token at the client
			delete(a.inFlight, id)
			w.model.Done(p, served)
			w.wakeParked()
			if !a.open {
				a.rec.cut++
				if w.cfg.Trace != nil && a.rec == a.window {
					w.cfg.Trace.Request(cutRequest(s.Conv, s.Turn, p, sent, ttft, at, parked))
				}
				return
			}
			l.answered(f, s, len(prompt), p, sent, ttft, parked, at, r)
		},
	})
}

// answered records an answer and hands it to its flow.
func (l *flowLoop) answered(f flow, s *flowSend, promptLen int, p placement.Placement, sent time.Time,
	ttft, parked float64, at time.Time, r sim.Result) {
	a, w := l.a, l.a.w
	rec := a.rec
	l.last = at
	ans := flowAnswer{Text: r.OutputText, Prompt: r.PromptTokens, Cached: r.CachedTokens, Output: r.OutputTokens,
		Err: r.Err, FinishedAt: l.offset(at), TTFT: ttft}
	if r.Err != nil {
		rec.failed("replica: "+r.Err.Error(), false, r.Err)
	} else {
		w.live.set(s.Conv, promptLen+r.OutputTokens)
		rec.answered(s.Conv, s.First, ttft, r.PromptTokens, r.CachedTokens, r.OutputTokens, s.Reused)
		if s.SubagentLater {
			rec.tasks.subagentLater(r.PromptTokens, r.CachedTokens)
		}
		if w.cfg.Trace != nil && rec == a.window {
			w.cfg.Trace.Request(TraceRequest{Session: s.Conv, Turn: s.Turn, Replica: p.Replica,
				Kind: p.Kind.String(), Sent: sent, TTFT: ttft, Done: at,
				Prompt: r.PromptTokens, Cached: r.CachedTokens, Output: r.OutputTokens, Parked: parked})
		}
		if s.Compaction {
			rec.compactions++
		}
	}
	next := f.Answered(s, ans, l.offset(at))
	for _, c := range f.Ended() {
		w.live.end(c)
		delete(l.convs[f], c)
	}
	l.schedule(f, next)
}

package bench

import (
	"time"

	"github.com/lmwarden/lmwarden/agent/placement"
	"github.com/lmwarden/lmwarden/sim"
)

// sessionLoop plays the session workloads (agent, big, long) in a virtual
// window: each session's turns one after the other, a closed loop
// replacing a session that ended.
type sessionLoop struct {
	a           *armWindow
	wl          *Workload
	variant     uint64
	sys         int // the system section's tokens
	nextSession int
}

// ended: a session finished or failed; a closed loop replaces it.
func (l *sessionLoop) ended(at time.Time) {
	if !l.a.step.Open() {
		l.startSession(at)
	}
}

func (l *sessionLoop) startSession(at time.Time) {
	w := l.a.w
	c := NewConversation(l.wl.SessionVariant(l.nextSession, l.variant))
	c.Limit = w.cfg.MaxContext
	l.nextSession++
	w.v.At(at.Add(c.Session.Pauses[0]), func() { l.sendTurn(c, nil, l.sys) })
}

func (l *sessionLoop) sendTurn(c *Conversation, prev []uint32, reused int) {
	a, w := l.a, l.a.w
	if !a.open {
		return
	}
	req := c.NextRequest()
	prompt := nextPrompt(l.wl.System, prev, req.Messages)
	if req.Fresh {
		reused = l.sys // a fresh history shares only the system prompt
	}
	sent := w.v.Now()
	if req.First {
		a.rec.tasks.sessionStarted(c.Session.ID, a.since(sent))
	}
	w.live.set(c.Session.ID, len(prompt))
	header := c.Session.ID
	if w.cfg.NoSessionHeader {
		header = ""
	}
	w.admit(placement.Request{SessionID: header, PromptBytes: bodyBytes(l.wl.System, req.Messages), Now: sent}, c.Turn,
		func(p placement.Placement, err error) { l.submitTurn(c, req, prompt, reused, sent, p, err) })
}

func (l *sessionLoop) submitTurn(c *Conversation, req Request, prompt []uint32, reused int, sent time.Time, p placement.Placement, err error) {
	a, w := l.a, l.a.w
	rec := a.rec
	parked := w.v.Now().Sub(sent).Seconds()
	if parked > 0 {
		rec.tasks.parkedFor(parked, false)
	}
	if err != nil {
		rec.failed("placement", false, err)
		rec.tasks.sessionFailed(c.Session.ID)
		w.live.end(c.Session.ID)
		l.ended(w.v.Now())
		return
	}
	rec.placed(c.Session.ID, p.Replica)
	w.nextID++
	id := w.nextID
	ttft := nanSec
	a.inFlight[id] = flight{replica: p.Replica, place: p}
	w.v.Submit(p.Replica, &sim.Request{
		ID: id, Prompt: prompt, MaxTokens: req.MaxTokens,
		OnFirstToken: func(at time.Time) { ttft = at.Sub(sent).Seconds() },
		OnDone: func(at time.Time, r sim.Result) {
			delete(a.inFlight, id)
			w.model.Done(p, at)
			w.wakeParked()
			rec := a.rec // the recorder of the moment (the window's once measuring)
			if !a.open {
				rec.cut++
				if w.cfg.Trace != nil && rec == a.window {
					w.cfg.Trace.Request(cutRequest(c.Session.ID, c.Turn, p, sent, ttft, at, parked))
				}
				return
			}
			l.answered(c, req, prompt, reused, rec, p, sent, ttft, parked, at, r)
		},
	})
}

// answered records an answered turn and schedules the session's next.
func (l *sessionLoop) answered(c *Conversation, req Request, prompt []uint32, reused int, rec *recorder,
	p placement.Placement, sent time.Time, ttft, parked float64, at time.Time, r sim.Result) {
	a, w := l.a, l.a.w
	if r.Err != nil {
		rec.failed("replica: "+r.Err.Error(), false, r.Err)
		rec.tasks.sessionFailed(c.Session.ID)
		w.live.end(c.Session.ID)
		l.ended(at)
		return
	}
	w.live.set(c.Session.ID, len(prompt)+r.OutputTokens)
	rec.answered(c.Session.ID, req.First, ttft, r.PromptTokens, r.CachedTokens, r.OutputTokens, reused)
	if w.cfg.Trace != nil && rec == a.window {
		w.cfg.Trace.Request(TraceRequest{Session: c.Session.ID, Turn: c.Turn, Replica: p.Replica,
			Kind: p.Kind.String(), Sent: sent, TTFT: ttft, Done: at,
			Prompt: r.PromptTokens, Cached: r.CachedTokens, Output: r.OutputTokens, Parked: parked})
	}
	if req.Compaction {
		rec.compactions++
	}
	c.Answer(r.OutputText, r.PromptTokens, r.OutputTokens)
	if c.Done() {
		rec.completed++
		rec.tasks.sessionFinished(c.Session.ID, a.since(at))
		w.live.end(c.Session.ID)
		l.ended(at)
		return
	}
	next := len(prompt) + r.OutputTokens
	w.v.At(at.Add(c.Session.Pauses[c.Turn]), func() { l.sendTurn(c, prompt, next) })
}

package bench

import (
	"time"

	"github.com/lmwarden/lmwarden/agent/placement"
	"github.com/lmwarden/lmwarden/sim"
)

// sessionLoop plays the session workloads (agent, big, long) in a virtual
// window: each session's turns one after the other across the clients'
// network (network.go), a closed loop replacing a session that ended. A
// closed loop on shared replicas keeps its sessionLoop from window to
// window (runArm): a later window only moves a to itself, starts the
// sessions its count adds, and records what is answered within it.
type sessionLoop struct {
	a           *armWindow // the window of the moment
	wl          *Workload
	variant     uint64 // text of the sessions started now (SessionVariant)
	sys         int    // the system section's tokens
	nextSession int
	target      int                  // sessions a closed loop keeps going
	live        int                  // sessions started (or about to be) and not ended
	began       map[string]time.Time // when each live session sent its first request
}

// grow starts the sessions a closed loop lacks: slot k's first session
// after the workload's StartOffset(k) from begin.
func (l *sessionLoop) grow(begin time.Time) {
	w := l.a.w
	for slot := l.live; slot < l.target; slot++ {
		l.live++
		w.v.At(begin.Add(l.wl.StartOffset(slot)), func() { l.start(w.v.Now()) })
	}
}

// adopt tells a window's task view about the sessions already going, so
// that those it sees finish count as tasks with their whole time.
func (l *sessionLoop) adopt(t *taskView) {
	for id, at := range l.began {
		t.sessionStarted(id, l.a.since(at))
	}
}

// ended: session id finished or failed at; a closed loop replaces it while
// it has fewer sessions than its window wants.
func (l *sessionLoop) ended(id string, at time.Time) {
	l.live--
	delete(l.began, id)
	l.a.w.live.end(id)
	if !l.a.step.Open() && l.live < l.target {
		l.live++
		l.start(at)
	}
}

// startSession starts an open loop's arriving session.
func (l *sessionLoop) startSession(at time.Time) {
	l.live++
	l.start(at)
}

func (l *sessionLoop) start(at time.Time) {
	w := l.a.w
	c := NewConversation(l.wl.SessionVariant(l.nextSession, l.variant))
	c.Limit = w.cfg.MaxContext
	l.nextSession++
	w.v.At(at.Add(c.Session.Pauses[0]), func() { l.sendTurn(c, nil, l.sys) })
}

// sendTurn sends c's next request; it reaches the front end (the warden,
// or vLLM's API servers) once the connection is up and the body across.
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
		l.began[c.Session.ID] = sent
		a.rec.tasks.sessionStarted(c.Session.ID, a.since(sent))
	}
	w.live.set(c.Session.ID, len(prompt))
	header := c.Session.ID
	if w.cfg.NoSessionHeader {
		header = ""
	}
	body := bodyBytes(l.wl.System, req.Messages)
	w.v.At(sent.Add(w.net.upload(body)), func() {
		if !l.a.open {
			return
		}
		arrived := w.v.Now()
		w.admit(placement.Request{SessionID: header, PromptBytes: body, Now: arrived}, c.Turn,
			func(p placement.Placement, err error) { l.submitTurn(c, req, prompt, reused, sent, arrived, p, err) })
	})
}

func (l *sessionLoop) submitTurn(c *Conversation, req Request, prompt []uint32, reused int, sent, arrived time.Time, p placement.Placement, err error) {
	a, w := l.a, l.a.w
	rec := a.rec
	parked := w.v.Now().Sub(arrived).Seconds()
	if parked > 0 {
		rec.tasks.parkedFor(parked, false)
	}
	if err != nil {
		rec.failed("placement", false, err)
		rec.tasks.sessionFailed(c.Session.ID)
		l.ended(c.Session.ID, w.v.Now())
		return
	}
	rec.placed(c.Session.ID, p.Replica)
	w.nextID++
	id := w.nextID
	ttft := nanSec
	a.inFlight[id] = flight{replica: p.Replica, place: p}
	w.v.Submit(p.Replica, &sim.Request{
		ID: id, Prompt: prompt, MaxTokens: req.MaxTokens,
		OnFirstToken: func(at time.Time) { ttft = at.Add(w.net.down()).Sub(sent).Seconds() },
		OnDone: func(served time.Time, r sim.Result) {
			a := l.a // the window of the moment: a session goes on across windows
			delete(a.inFlight, id)
			w.model.Done(p, served)
			w.wakeParked()
			at := served.Add(w.net.down()) // the last token at the client
			rec := a.rec                   // the recorder of the moment (the window's once measuring)
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
		l.ended(c.Session.ID, at)
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
		l.ended(c.Session.ID, at)
		return
	}
	next := len(prompt) + r.OutputTokens
	w.v.At(at.Add(c.Session.Pauses[c.Turn]), func() { l.sendTurn(c, prompt, next) })
}

package bench

import (
	"math"
	"time"

	"github.com/lmwarden/lmwarden/agent"
	"github.com/lmwarden/lmwarden/sim"
)

// sessionRun drives sessions on the virtual clock: it starts them, sends
// every turn across the clients' network and through the warden's placement
// to the replicas, and tells the window being measured what happened. A
// closed loop on shared replicas keeps one sessionRun from window to window,
// as the reference's harness kept its sessions running from one step and
// arm to the next (docs/bench.md, "Windows"): a window only changes the
// policy, starts the sessions its count adds, and measures what is answered
// within it.
type sessionRun struct {
	w        *virtualWorld
	wl       *Workload
	sys      int       // the rendered system prompt's tokens
	variant  uint64    // text variant of the sessions started now (SessionVariant)
	open     bool      // requests are sent and answers recorded
	openLoop bool      // a finished session is not replaced
	target   int       // sessions a closed loop keeps going
	live     int       // sessions started (or about to) and not ended
	next     int       // index of the next session
	rec      *recorder // where answers go now: the window's, a warm-up's, or nil
	start    time.Time // the measured window's start
	began    map[string]time.Time
	inFlight map[uint64]flight
}

func newSessionRun(w *virtualWorld, wl *Workload, openLoop bool) *sessionRun {
	return &sessionRun{w: w, wl: wl, sys: wl.SystemSectionTokens(), open: true, openLoop: openLoop,
		began: map[string]time.Time{}, inFlight: map[uint64]flight{}}
}

// since is seconds from the measured window's start to t.
func (r *sessionRun) since(t time.Time) float64 { return t.Sub(r.start).Seconds() }

// measured says whether answers now go to the window being measured.
func (r *sessionRun) measured() bool { return r.rec != nil && r.rec == r.w.rec }

// grow starts the sessions a closed loop lacks: slot k's first session
// after the workload's StartOffset(k) from begin.
func (r *sessionRun) grow(begin time.Time) {
	for slot := r.live; slot < r.target; slot++ {
		r.live++
		r.w.v.At(begin.Add(r.wl.StartOffset(slot)), func() { r.startSession(r.w.v.Now()) })
	}
}

// adopt tells a new window's task view about the sessions already running,
// so that those it sees finish count as tasks with their whole time.
func (r *sessionRun) adopt(t *taskView) {
	for id, at := range r.began {
		t.sessionStarted(id, r.since(at))
	}
}

// startSession begins a session now; a closed loop counted it in live
// when it scheduled it, an open loop counts it here.
func (r *sessionRun) startSession(at time.Time) {
	if !r.open {
		return
	}
	if r.openLoop {
		r.live++
	}
	c := NewConversation(r.wl.SessionVariant(r.next, r.variant))
	c.Limit = r.w.cfg.MaxContext
	r.next++
	r.w.v.At(at.Add(c.Session.Pauses[0]), func() { r.sendTurn(c, nil, r.sys) })
}

// ended: a session finished or failed at; a closed loop replaces it while
// it has fewer sessions than its window wants.
func (r *sessionRun) ended(id string, at time.Time) {
	r.live--
	delete(r.began, id)
	r.w.live.end(id)
	if !r.openLoop && r.live < r.target {
		r.live++
		r.startSession(at)
	}
}

// sendTurn sends c's next request: it reaches the front end (the warden,
// or vLLM's API servers) once the connection is up and the body across.
func (r *sessionRun) sendTurn(c *Conversation, prev []uint32, reused int) {
	if !r.open {
		return
	}
	req := c.NextRequest()
	prompt := nextPrompt(r.wl.System, prev, req.Messages)
	if req.Fresh {
		reused = r.sys // a fresh history shares only the system prompt
	}
	sent := r.w.v.Now()
	if req.First {
		r.began[c.Session.ID] = sent
		if r.rec != nil {
			r.rec.tasks.sessionStarted(c.Session.ID, r.since(sent))
		}
	}
	r.w.live.set(c.Session.ID, len(prompt))
	body := bodyBytes(r.wl.System, req.Messages)
	r.w.v.At(sent.Add(r.w.net.upload(body)), func() {
		if !r.open {
			return
		}
		arrived := r.w.v.Now()
		r.w.admit(agent.Request{SessionID: c.Session.ID, PromptBytes: body, Now: arrived}, c.Turn,
			func(p agent.Placement, err error) { r.submit(c, req, prompt, reused, sent, arrived, p, err) })
	})
}

// submit hands a placed request to its replica.
func (r *sessionRun) submit(c *Conversation, req Request, prompt []uint32, reused int, sent, arrived time.Time, p agent.Placement, err error) {
	parked := r.w.v.Now().Sub(arrived).Seconds()
	if parked > 0 && r.rec != nil {
		r.rec.tasks.parkedFor(parked, false)
	}
	if err != nil {
		if r.rec != nil {
			r.rec.failed("placement", false, err)
			r.rec.tasks.sessionFailed(c.Session.ID)
		}
		r.ended(c.Session.ID, r.w.v.Now())
		return
	}
	if r.rec != nil {
		r.rec.placed(c.Session.ID, p.Replica)
	}
	r.w.nextID++
	id := r.w.nextID
	t := &turnInFlight{run: r, c: c, req: req, prompt: prompt, reused: reused, sent: sent, parked: parked, place: p, id: id, ttft: math.NaN()}
	r.inFlight[id] = flight{replica: p.Replica, place: p}
	r.w.v.Submit(p.Replica, &sim.Request{
		ID: id, Prompt: prompt, MaxTokens: req.MaxTokens,
		OnFirstToken: func(at time.Time) { t.ttft = at.Add(r.w.net.down()).Sub(sent).Seconds() },
		OnDone:       t.done,
	})
}

// turnInFlight is one request between its replica and its answer.
type turnInFlight struct {
	run          *sessionRun
	c            *Conversation
	req          Request
	prompt       []uint32
	reused       int
	sent         time.Time
	parked, ttft float64
	place        agent.Placement
	id           uint64
}

// done is the replica's end of the request (served); the client sees the
// last token half a round trip later.
func (t *turnInFlight) done(served time.Time, res sim.Result) {
	r, w, c := t.run, t.run.w, t.c
	delete(r.inFlight, t.id)
	w.model.Done(t.place, served)
	w.wakeParked()
	at := served.Add(w.net.down())
	rec := r.rec
	if !r.open {
		if rec != nil {
			rec.cut++
			if w.cfg.Trace != nil && r.measured() {
				w.cfg.Trace.Request(cutRequest(c.Session.ID, c.Turn, t.place, t.sent, t.ttft, at, t.parked))
			}
		}
		return
	}
	if res.Err != nil {
		if rec != nil {
			rec.failed("replica: "+res.Err.Error(), false, res.Err)
			rec.tasks.sessionFailed(c.Session.ID)
		}
		r.ended(c.Session.ID, at)
		return
	}
	w.live.set(c.Session.ID, len(t.prompt)+res.OutputTokens)
	if rec != nil {
		rec.answered(c.Session.ID, t.req.First, t.ttft, res.PromptTokens, res.CachedTokens, res.OutputTokens, t.reused)
		if w.cfg.Trace != nil && r.measured() {
			w.cfg.Trace.Request(TraceRequest{Session: c.Session.ID, Turn: c.Turn, Replica: t.place.Replica,
				Kind: t.place.Kind.String(), Sent: t.sent, TTFT: t.ttft, Done: at,
				Prompt: res.PromptTokens, Cached: res.CachedTokens, Output: res.OutputTokens, Parked: t.parked})
		}
		if t.req.Compaction {
			rec.compactions++
		}
	}
	c.Answer(res.OutputText, res.PromptTokens, res.OutputTokens)
	if c.Done() {
		if rec != nil {
			rec.completed++
			rec.tasks.sessionFinished(c.Session.ID, r.since(at))
		}
		r.ended(c.Session.ID, at)
		return
	}
	next := len(t.prompt) + res.OutputTokens
	w.v.At(at.Add(c.Session.Pauses[c.Turn]), func() { r.sendTurn(c, t.prompt, next) })
}

// stop ends the sessions: requests parked at the warden are dropped and
// those in flight aborted (their OnDone counts them cut).
func (r *sessionRun) stop() {
	r.open = false
	r.w.cancelParked()
	for id, f := range r.inFlight {
		r.w.v.Abort(f.replica, id)
	}
}

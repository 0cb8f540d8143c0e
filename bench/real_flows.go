package bench

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/lmwarden/lmwarden/sim"
)

// Flows (flow.go) over real HTTP: a goroutine per flow decides, and a
// goroutine per request sends at the request's time and hands the answer
// back to its flow's goroutine, so a flow is only ever called from one
// goroutine, whatever it has in flight at once (a Claude Code session's
// subagents).

// flowWindow plays plan in one window: for the configured duration, or,
// for a replay, until every flow is done.
func (r *realRun) flowWindow(ctx context.Context, plan flowPlan, step Step, arm Arm, perSession float64) (Result, error) {
	ws := r.openWindow(ctx, perSession)
	var wctx context.Context
	var cancel context.CancelFunc
	var total time.Duration
	if plan.untilDone {
		total = r.scaled(plan.span) // nominal, for the progress shown
		wctx, cancel = context.WithCancel(ctx)
	} else {
		total = r.scaled(r.cfg.Warmup + r.cfg.Duration)
		wctx, cancel = context.WithTimeout(ctx, total)
	}
	defer cancel()
	pollCtx, stopPoll := context.WithCancel(wctx)
	pollDone := r.poll(ctx, pollCtx, ws, total)
	var wg sync.WaitGroup
	var last time.Time // the last answer (replays: the window's end)
	var lastMu sync.Mutex
	fr := &flowRunner{r: r, ws: ws, wctx: wctx, onAnswer: func(t time.Time) {
		lastMu.Lock()
		last = t
		lastMu.Unlock()
	}}
	for _, st := range plan.starts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case <-wctx.Done():
				return
			case <-time.After(time.Until(ws.begin.Add(r.scaled(st.at)))):
			}
			f := st.f()
			for {
				ok := fr.play(f)
				if plan.next == nil || wctx.Err() != nil {
					return
				}
				if !ok {
					r.backOff(wctx)
				}
				f = plan.next()
			}
		}()
	}
	wg.Wait()
	stopPoll()
	<-pollDone
	r.closeWindow(ctx, ws)
	seconds := r.cfg.Duration.Seconds()
	if plan.untilDone {
		seconds = max(0, ws.since(last))
	}
	return ws.window.result(step, arm.Name, seconds, plan.sysTokens), nil
}

// flowRunner sends a window's flows.
type flowRunner struct {
	r        *realRun
	ws       *realWindow
	wctx     context.Context
	onAnswer func(time.Time)
}

// flowReply is an answer on its way back to its flow.
type flowReply struct {
	s *flowSend
	a flowAnswer
}

// play runs one flow to its end (or the window's); false when it failed.
func (fr *flowRunner) play(f flow) bool {
	r, ws := fr.r, fr.ws
	now := func() time.Duration { return time.Duration(float64(time.Since(ws.begin)) * r.cfg.Speed) }
	replies := make(chan flowReply)
	inFlight := 0
	convs := map[string]bool{}
	schedule := func(sends []flowSend) {
		for i := range sends {
			s := &sends[i]
			convs[s.Conv] = true
			inFlight++
			go func() {
				select {
				case <-fr.wctx.Done():
					replies <- flowReply{s, flowAnswer{Err: context.Canceled, TTFT: nanSec}}
					return
				case <-time.After(time.Until(ws.begin.Add(r.scaled(s.At)))):
				}
				replies <- flowReply{s, fr.send(f, s)}
			}()
		}
	}
	schedule(f.Start(now()))
	for inFlight > 0 {
		rep := <-replies
		inFlight--
		if fr.wctx.Err() != nil {
			continue // the window closed: collect what is still out
		}
		next := f.Answered(rep.s, rep.a, now())
		ws.mu.Lock()
		for _, c := range f.Ended() {
			ws.live.end(c)
			delete(convs, c)
		}
		ws.mu.Unlock()
		schedule(next)
	}
	ws.mu.Lock()
	defer ws.mu.Unlock()
	for c := range convs {
		ws.live.end(c)
	}
	switch {
	case fr.wctx.Err() != nil && !f.Done():
		// unfinished at the close
	case f.Failed():
		ws.rec.tasks.sessionFailed(f.ID())
	default:
		ws.rec.completed++
		ws.rec.tasks.sessionFinished(f.ID(), ws.since(time.Now()))
	}
	return !f.Failed()
}

// send sends one request of flow f and records it.
func (fr *flowRunner) send(f flow, s *flowSend) flowAnswer {
	r, ws, mu := fr.r, fr.ws, fr.ws.mu
	sent := time.Now()
	mu.Lock()
	ws.rec.tasks.sessionStarted(f.ID(), ws.since(sent)) // its first request only
	ws.live.set(s.Conv, promptEstimate(s))
	mu.Unlock()
	rctx, cancel := context.WithTimeout(fr.wctx, r.scaled(r.cfg.RequestTimeout))
	res, err := streamTurn(rctx, r.client, r.cfg.API, r.cfg.Target, r.model, turnHeaders{Session: s.Session, Agent: s.Agent},
		s.System, s.Messages, s.MaxTokens)
	timedOut := rctx.Err() != nil && fr.wctx.Err() == nil
	cancel()
	at := time.Now()
	fr.onAnswer(at)
	ans := flowAnswer{Text: res.text, Prompt: res.promptTokens, Cached: res.cachedTokens, Output: res.outputTokens,
		FinishedAt: time.Duration(float64(at.Sub(ws.begin)) * r.cfg.Speed), TTFT: res.ttft.Seconds() * r.cfg.Speed}
	mu.Lock()
	defer mu.Unlock()
	rec := ws.rec
	if res.parked > 0 {
		rec.tasks.parkedFor(res.parked.Seconds()*r.cfg.Speed, false)
	}
	switch {
	case fr.wctx.Err() != nil:
		rec.cut++ // the window closed with the request in flight
		ans.Err = context.Canceled
	case timedOut:
		ans.Err = fmt.Errorf("no complete answer within %v", r.cfg.RequestTimeout)
		rec.failed("timeout", true, ans.Err)
	case err != nil:
		ans.Err = err
		rec.failed(failureKind(err, res), false, err)
	default:
		rec.answered(s.Conv, s.First, ans.TTFT, res.promptTokens, res.cachedTokens, res.outputTokens, s.Reused)
		if s.SubagentLater {
			rec.tasks.subagentLater(res.promptTokens, res.cachedTokens)
		}
		ws.live.set(s.Conv, res.promptTokens+res.outputTokens)
		if s.Compaction {
			rec.compactions++
		}
	}
	return ans
}

// promptEstimate is a request's prompt size before its answer says it: the
// rendered prompt if the flow made it, else its text at 4 bytes a token.
func promptEstimate(s *flowSend) int {
	if s.Prompt != nil {
		return len(s.Prompt)
	}
	n := sim.TokenCount(s.System)
	for _, m := range s.Messages {
		n += 2 + sim.TokenCount(m.Content)
	}
	return n
}

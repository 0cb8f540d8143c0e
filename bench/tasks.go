package bench

import (
	"math"
	"sort"
)

// What an agent user waits for, beside the per-request numbers: a task (a
// session's turns, from its first request sent to the last token of its
// last turn), the first turn against the later ones, and the time a
// request spent parked at the warden (admission) before it was placed.
// Both runners feed a window's recorder through these methods; times are
// seconds since the window's start, in the replicas' time.

// taskView is the part of a window's recorder that follows sessions.
type taskView struct {
	started  map[string]float64 // session: when its first request was sent
	finished map[string]float64 // session: its task time, first request to last token
	failed   map[string]bool    // sessions a failed request ended

	first, later []float64 // TTFT of first turns, of every later request

	// prompt and cached tokens of subagents' later requests (workload
	// claude-code): each continues a subagent's own history, which its
	// replica holds unless the placement moved it or LRU evicted it.
	subPrompt, subCached int

	parked     []float64 // waits at the warden of the requests that left the queue
	parkedOpen []float64 // waits so far of the requests still parked at the close

	// live context: the summed context of the sessions started and not
	// finished (parked ones included: their prompt is demand all the same),
	// sampled at every poll, against the replicas' summed KV capacity.
	liveSum    float64
	livePolls  int
	kvCapacity []float64 // per replica, the last capacity read (0: unknown)
}

func newTaskView(replicas int) *taskView {
	return &taskView{started: map[string]float64{}, finished: map[string]float64{}, failed: map[string]bool{},
		kvCapacity: make([]float64, replicas)}
}

// sessionStarted records that a session sent its first request at
// (seconds since the window's start; negative during a warm-up).
func (t *taskView) sessionStarted(session string, at float64) {
	if _, ok := t.started[session]; !ok {
		t.started[session] = at
	}
}

// sessionFinished records the last token of a session's last turn at. A
// task of the window is one that ends within it (at ≥ 0), whenever it
// started (a warm-up, if any, included); one that ended during the
// warm-up is forgotten.
func (t *taskView) sessionFinished(session string, at float64) {
	start, ok := t.started[session]
	switch {
	case !ok:
	case at < 0:
		delete(t.started, session)
	default:
		t.finished[session] = at - start
	}
}

// sessionFailed records that a failed request ended a session: it is
// neither finished nor left unfinished by the close (the errors say it).
func (t *taskView) sessionFailed(session string) {
	if _, ok := t.started[session]; ok {
		t.failed[session] = true
	}
}

// turn records an answered request's time to first token, split by
// whether it was its session's first request.
func (t *taskView) turn(first bool, ttftSec float64) {
	if math.IsNaN(ttftSec) {
		return
	}
	if first {
		t.first = append(t.first, ttftSec)
	} else {
		t.later = append(t.later, ttftSec)
	}
}

// subagentLater records a subagent's later request's prompt and the part
// of it served from cache.
func (t *taskView) subagentLater(prompt, cached int) {
	t.subPrompt += prompt
	t.subCached += cached
}

// parkedFor records a request that waited sec at the warden; stillParked:
// it was still waiting when the window closed (sec is a lower bound).
func (t *taskView) parkedFor(sec float64, stillParked bool) {
	if stillParked {
		t.parkedOpen = append(t.parkedOpen, sec)
	} else {
		t.parked = append(t.parked, sec)
	}
}

// liveContext samples the live sessions' summed context, in tokens.
func (t *taskView) liveContext(tokens float64) {
	t.liveSum += tokens
	t.livePolls++
}

// kvSample keeps each replica's last read KV capacity (tokens).
func (t *taskView) kvSample(replica int, tokens float64) {
	if replica >= 0 && replica < len(t.kvCapacity) && tokens > 0 {
		t.kvCapacity[replica] = tokens
	}
}

// fill sets the Result's task, turn, parked and live-context fields for a
// window of seconds.
func (t *taskView) fill(res *Result, seconds float64) {
	done := make([]float64, 0, len(t.finished))
	for _, d := range t.finished {
		done = append(done, d)
	}
	withOpen := append([]float64(nil), done...)
	for s, start := range t.started {
		if _, ok := t.finished[s]; ok || t.failed[s] {
			continue
		}
		res.TasksUnfinished++
		withOpen = append(withOpen, seconds-start)
	}
	res.TaskP50 = Num(Percentile(done, 50))
	res.TaskP95 = Num(Percentile(done, 95))
	res.TaskP50Open = Num(Percentile(withOpen, 50))
	res.TaskP95Open = Num(Percentile(withOpen, 95))
	res.TTFTFirstP50 = Num(Percentile(t.first, 50))
	res.TTFTFirstP95 = Num(Percentile(t.first, 95))
	res.TTFTLaterP50 = Num(Percentile(t.later, 50))
	res.TTFTLaterP95 = Num(Percentile(t.later, 95))
	res.SubagentCached = Num(math.NaN())
	if t.subPrompt > 0 {
		res.SubagentCached = Num(float64(t.subCached) / float64(t.subPrompt))
	}

	all := append(append([]float64(nil), t.parked...), t.parkedOpen...)
	res.Parked, res.ParkedAtClose = len(all), len(t.parkedOpen)
	res.ParkedP50 = Num(Percentile(all, 50))
	res.ParkedP95 = Num(Percentile(all, 95))
	res.ParkedMax = Num(math.NaN())
	if len(all) > 0 {
		sort.Float64s(all)
		res.ParkedMax = Num(all[len(all)-1])
	}

	res.LiveContext, res.LiveContextX = Num(math.NaN()), Num(math.NaN())
	if t.livePolls > 0 {
		res.LiveContext = Num(t.liveSum / float64(t.livePolls))
		var capacity float64
		for _, c := range t.kvCapacity {
			if c <= 0 {
				capacity = 0 // one replica unknown: no honest total
				break
			}
			capacity += c
		}
		if capacity > 0 {
			res.LiveContextX = Num(float64(res.LiveContext) / capacity)
		}
	}
}

// liveSet follows the context each live session holds, for the
// live-context samples: a session's entry is its latest prompt (its reply
// added once it ends) from its first request until it finishes or fails.
type liveSet map[string]int

// set records a session's current context in tokens.
func (l liveSet) set(session string, tokens int) { l[session] = tokens }

// end forgets a session that finished or failed.
func (l liveSet) end(session string) { delete(l, session) }

// sum is the context of every live session.
func (l liveSet) sum() float64 {
	var n int
	for _, t := range l {
		n += t
	}
	return float64(n)
}

package bench

import (
	"context"
	"time"

	"github.com/lmwarden/lmwarden/agent/placement"
)

// armWindow is one step-arm window of a virtual run: what every kind of
// workload shares (the placement's arm, the measured span after an
// optional warm-up, the recorder, the requests in flight, the close).
type armWindow struct {
	w                 *virtualWorld
	step              Step
	arm               Arm
	begin, start, end time.Time // sessions start at begin; the measure at start
	window            *recorder // the measured window's
	// rec is where requests are recorded now: a throw-away recorder
	// during the warm-up (sharing the window's task view), then window
	rec      *recorder
	admitted placement.AdmissionStats // the model's counts at the start
	open     bool                     // false once the window closed
	inFlight map[uint64]flight
}

// openWindow switches the placement to arm, lets the replicas drain and
// prepares the window's recorders; the measure starts after the warm-up.
// With keep the last window's sessions go on (w.loop, virtual_sessions.go):
// nothing drains, and their requests in flight are this window's.
func (w *virtualWorld) openWindow(step Step, arm Arm, keep bool) (*armWindow, error) {
	w.model.SetAffinity(arm.Affinity)
	if err := w.model.SetPolicy(arm.Policy); err != nil {
		return nil, err
	}
	a := &armWindow{w: w, step: step, arm: arm, open: true, inFlight: map[uint64]flight{}}
	if keep {
		a.inFlight = w.loop.a.inFlight
	} else {
		w.drain()
		w.live = liveSet{}
	}
	a.begin = w.v.Now()
	a.start = a.begin.Add(w.cfg.Warmup)
	a.end = a.start.Add(w.cfg.Duration)
	a.window = newRecorder(w.cfg.Replicas)
	a.window.requestsPerSession = w.perSession
	a.rec = newRecorder(w.cfg.Replicas)
	a.rec.tasks = a.window.tasks
	if w.cfg.Warmup > 0 {
		w.rec = nil
		w.v.At(a.start, a.measure)
	} else {
		a.measure()
	}
	return a, nil
}

// measure starts the measured window: counters' baselines.
func (a *armWindow) measure() {
	a.rec = a.window
	a.w.rec = a.window
	a.admitted = a.w.model.AdmissionStatsAt(a.w.v.Now())
	if a.w.cfg.Trace != nil {
		a.w.cfg.Trace.Window(a.step, a.arm.Name, a.start)
	}
	a.w.observe() // a sample at the window's start: counters' baseline
}

// since is seconds from the measured window's start to t.
func (a *armWindow) since(t time.Time) float64 { return t.Sub(a.start).Seconds() }

// play runs the virtual clock to limit in slices (ctx is checked between
// them), or until idle says nothing is left to do. Progress is shown
// against the window's end.
func (a *armWindow) play(ctx context.Context, limit time.Time, idle func() bool) error {
	const slice = 5 * time.Second
	for t := a.begin; t.Before(limit); {
		if err := ctx.Err(); err != nil {
			return err
		}
		t = minTime(t.Add(slice), limit)
		a.w.v.RunUntil(t)
		a.w.cfg.Progress.Update(min(1, t.Sub(a.begin).Seconds()/a.end.Sub(a.begin).Seconds()))
		if idle != nil && idle() {
			return nil
		}
	}
	return nil
}

// stop ends the window's requests: parked ones are dropped, those in
// flight aborted (OnDone counts them cut and ends them in the model).
func (a *armWindow) stop() {
	a.open = false
	a.w.cancelParked()
	for id, f := range a.inFlight {
		a.w.v.Abort(f.replica, id)
	}
}

// close ends the window: a closing sample, parked and in-flight requests
// cut (unless keep: the sessions go on into the next window), and the
// result over seconds of measure.
func (a *armWindow) close(seconds float64, sysTokens int, keep bool) Result {
	w := a.w
	w.observe() // the window's closing sample
	if !keep {
		a.stop()
	}
	w.rec = nil
	res := a.window.result(a.step, a.arm.Name, seconds, sysTokens)
	res.Admission = admissionCounts(a.admitted, w.model.AdmissionStatsAt(w.v.Now()))
	return res
}

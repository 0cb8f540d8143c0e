package bench

import (
	"github.com/lmwarden/lmwarden/agent/placement"
)

// Cache-capacity admission in the virtual runner: a request that
// placement.Model.Admit parks waits on the virtual clock until the model grants
// it room (checked after every request end and poll, the moments the model
// frees room) or its timeout passes, then is placed with Claim, exactly as
// the shim does on real time. Its wait counts in its time to first token.

// parkedTurn is one request waiting at the warden.
type parkedTurn struct {
	wait    *placement.Wait
	session string // for the trace
	turn    int
	claim   func()
	claimed bool
}

// admit places req (turn is its session's turn, for the trace) now, or
// parks it; then runs once with the placement.
func (w *virtualWorld) admit(req placement.Request, turn int, then func(placement.Placement, error)) {
	p, wait, err := w.model.Admit(req)
	if wait == nil {
		then(p, err)
		return
	}
	pt := &parkedTurn{wait: wait, session: req.SessionID, turn: turn}
	pt.claim = func() {
		if pt.claimed {
			return
		}
		pt.claimed = true
		p, err := w.model.Claim(wait, w.v.Now())
		then(p, err)
	}
	w.parked = append(w.parked, pt)
	w.v.At(wait.Deadline, func() { w.wakeParked(); pt.claim() })
}

// wakeParked claims every parked request the model has granted room to.
func (w *virtualWorld) wakeParked() {
	keep := w.parked[:0]
	var ready []*parkedTurn
	for _, pt := range w.parked {
		if pt.claimed {
			continue
		}
		select {
		case <-pt.wait.Ready:
			ready = append(ready, pt)
		default:
			keep = append(keep, pt)
		}
	}
	w.parked = keep
	for _, pt := range ready {
		pt.claim()
	}
}

// cancelParked drops the requests still parked when a window closes; they
// count as cut, like the requests still in flight.
func (w *virtualWorld) cancelParked() {
	for _, pt := range w.parked {
		if !pt.claimed {
			pt.claimed = true
			w.model.Abandon(pt.wait, w.v.Now())
			if w.rec != nil {
				w.rec.cut++
				w.rec.tasks.parkedFor(w.v.Now().Sub(pt.wait.Since).Seconds(), true)
			}
			if w.cfg.Trace != nil {
				w.cfg.Trace.Request(TraceRequest{Session: pt.session, Turn: pt.turn, Replica: -1, Kind: "parked",
					Sent: pt.wait.Since, TTFT: w.v.Now().Sub(pt.wait.Since).Seconds(), Done: w.v.Now(), Cut: true,
					Parked: w.v.Now().Sub(pt.wait.Since).Seconds()})
			}
		}
	}
	w.parked = nil
}

// setAdmission applies the run's admission settings (zero: the model's).
func (w *virtualWorld) setAdmission() error {
	if w.cfg.Admission.Mode == "" {
		return nil
	}
	return w.model.SetAdmission(w.cfg.Admission)
}

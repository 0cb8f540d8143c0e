package sim

import (
	"container/heap"
	"time"
)

// Epoch is where every virtual clock starts.
var Epoch = time.Unix(1_700_000_000, 0).UTC()

// Virtual runs N replica engines on simulated time in one goroutine: discrete
// events, no sockets, no sleeping. Callbacks (Request's and At's) run inside
// RunUntil on the virtual clock and may call Submit, Abort and At. Not safe
// for concurrent use; the real-mode server serializes its calls.
type Virtual struct {
	now     time.Time
	engines []*engine
	kicked  []bool
	q       eventQueue
	seq     uint64
}

type eventKind uint8

const (
	evCall    eventKind = iota // run fn
	evKick                     // start a step on an idle replica
	evStepEnd                  // a replica's step ends
)

type event struct {
	at      time.Time
	seq     uint64 // FIFO among events at the same instant
	kind    eventKind
	replica int
	fn      func()
}

// NewVirtual returns replicas engines of profile p at Epoch.
func NewVirtual(p Profile, replicas int) *Virtual {
	v := &Virtual{now: Epoch, engines: make([]*engine, replicas), kicked: make([]bool, replicas)}
	for i := range v.engines {
		v.engines[i] = newEngine(p)
	}
	return v
}

// Now is the virtual time.
func (v *Virtual) Now() time.Time { return v.now }

// Replicas is the number of replicas.
func (v *Virtual) Replicas() int { return len(v.engines) }

// At schedules fn at t (at once, in order, if t is not after Now).
func (v *Virtual) At(t time.Time, fn func()) {
	v.push(event{at: maxTime(t, v.now), kind: evCall, fn: fn})
}

// Submit hands r to a replica now. The replica starts a step after every
// other event of this instant, so simultaneous arrivals share a step. An
// unknown replica finishes r at once with ErrNoReplica.
func (v *Virtual) Submit(replica int, r *Request) {
	if replica < 0 || replica >= len(v.engines) {
		done(r, v.now, Result{PromptTokens: len(r.Prompt), Err: ErrNoReplica, FinishReason: "abort"})
		return
	}
	v.engines[replica].submit(v.now, r)
	v.kick(replica)
}

// Abort ends request id on a replica (no-op when unknown or finished).
func (v *Virtual) Abort(replica int, id uint64) {
	if replica < 0 || replica >= len(v.engines) {
		return
	}
	v.engines[replica].abort(v.now, id)
}

// Stats returns a replica's numbers.
func (v *Virtual) Stats(replica int) Stats { return v.engines[replica].snapshot() }

// RunUntil processes every event up to t and leaves the clock at t.
func (v *Virtual) RunUntil(t time.Time) {
	for len(v.q) > 0 && !v.q[0].at.After(t) {
		v.dispatch(heap.Pop(&v.q).(event))
	}
	if t.After(v.now) {
		v.now = t
	}
}

// NextEvent is the time of the earliest pending event.
func (v *Virtual) NextEvent() (time.Time, bool) {
	if len(v.q) == 0 {
		return time.Time{}, false
	}
	return v.q[0].at, true
}

func (v *Virtual) dispatch(ev event) {
	v.now = ev.at
	switch ev.kind {
	case evCall:
		ev.fn()
	case evKick:
		v.kicked[ev.replica] = false
		if !v.engines[ev.replica].stepping {
			v.startStep(ev.replica)
		}
	case evStepEnd:
		v.engines[ev.replica].endStep(v.now)
		v.startStep(ev.replica)
	}
}

func (v *Virtual) kick(i int) {
	e := v.engines[i]
	if e.stepping || v.kicked[i] || !e.hasWork() {
		return
	}
	v.kicked[i] = true
	v.push(event{at: v.now, kind: evKick, replica: i})
}

func (v *Virtual) startStep(i int) {
	if end, ok := v.engines[i].beginStep(v.now); ok {
		v.push(event{at: end, kind: evStepEnd, replica: i})
	}
}

func (v *Virtual) push(ev event) {
	v.seq++
	ev.seq = v.seq
	heap.Push(&v.q, ev)
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

type eventQueue []event

func (q eventQueue) Len() int { return len(q) }
func (q eventQueue) Less(i, j int) bool {
	if !q[i].at.Equal(q[j].at) {
		return q[i].at.Before(q[j].at)
	}
	return q[i].seq < q[j].seq
}
func (q eventQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *eventQueue) Push(x any)   { *q = append(*q, x.(event)) }
func (q *eventQueue) Pop() any {
	old := *q
	ev := old[len(old)-1]
	old[len(old)-1] = event{}
	*q = old[:len(old)-1]
	return ev
}

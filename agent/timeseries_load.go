package agent

import (
	"maps"
	"time"

	"github.com/lmwarden/lmwarden/agent/adminapi"
	"github.com/lmwarden/lmwarden/agent/placement"
)

// The rest of the dashboard's hour, beside the token rates: what each
// replica reported at every poll (running, waiting, KV used; the hit rate
// comes from the token deltas), the time to first byte the shim measured,
// and the errors by status code. Same slots and ring as the tokens: one
// step each, one hour, oldest overwritten.

// loadSlot sums one slot's polls of one replica.
type loadSlot struct {
	n                    int64 // slot number (math.MinInt64: unused)
	polls                float64
	running, waiting, kv float64
}

// latencySlot is one slot's time-to-first-byte histogram.
type latencySlot struct {
	n int64
	h placement.Histogram
}

// errorSlot counts one slot's error responses by status code.
type errorSlot struct {
	n     int64
	codes map[int]uint64
}

// ring is a fixed ring of slots indexed by slot number; a slot holding
// another number reads as empty.
type ring[T any] struct {
	slots []T
	num   func(*T) *int64
}

func newRing[T any](n int, num func(*T) *int64) ring[T] {
	r := ring[T]{slots: make([]T, n), num: num}
	for i := range r.slots {
		*num(&r.slots[i]) = -1 << 63
	}
	return r
}

func (r *ring[T]) at(n int64) *T {
	i := int(n % int64(len(r.slots)))
	if i < 0 {
		i += len(r.slots)
	}
	return &r.slots[i]
}

// get is slot n, or nil when it holds no data for n.
func (r *ring[T]) get(n int64) *T {
	s := r.at(n)
	if *r.num(s) != n {
		return nil
	}
	return s
}

// put is slot n, emptied first when it held another.
func (r *ring[T]) put(n int64, fresh func() T) *T {
	s := r.at(n)
	if *r.num(s) != n {
		*s = fresh()
		*r.num(s) = n
	}
	return s
}

func loadNum(s *loadSlot) *int64       { return &s.n }
func latencyNum(s *latencySlot) *int64 { return &s.n }
func errorNum(s *errorSlot) *int64     { return &s.n }

// extraSeries is what a replica (or, pooled, a model) keeps beside its
// token deltas.
type extraSeries struct {
	load    ring[loadSlot]
	latency ring[latencySlot]
	errors  ring[errorSlot] // pooled only
}

func newExtraSeries(slots int) extraSeries {
	return extraSeries{
		load:    newRing(slots, loadNum),
		latency: newRing(slots, latencyNum),
		errors:  newRing(slots, errorNum),
	}
}

// modelOf finds or makes the model's series and its first i+1 replicas.
func (ts *TokenSeries) modelOf(model string, i int) *modelSeries {
	ms := ts.byName[model]
	if ms == nil {
		ms = &modelSeries{name: model, pooled: newSlotRing(ts.slots), extra: newExtraSeries(ts.slots)}
		ts.byName[model] = ms
		ts.models = append(ts.models, ms)
	}
	for len(ms.replicas) <= i {
		ms.replicas = append(ms.replicas, &replicaSeries{ring: newSlotRing(ts.slots), extra: newExtraSeries(ts.slots)})
	}
	return ms
}

// ObserveLoad records one successful poll of replica i: its running and
// waiting requests and KV cache use (the dashboard draws their mean over
// each slot).
func (ts *TokenSeries) ObserveLoad(model string, i int, running, waiting, kv float64, now time.Time) {
	if i < 0 {
		return
	}
	ts.mu.Lock()
	defer ts.mu.Unlock()
	rs := ts.modelOf(model, i).replicas[i]
	s := rs.extra.load.put(ts.slotOf(now), func() loadSlot { return loadSlot{} })
	s.polls++
	s.running += running
	s.waiting += waiting
	s.kv += kv
}

// ObserveResponse records the time to first byte of one response the
// shim relayed, for its replica and pooled.
func (ts *TokenSeries) ObserveResponse(model string, t placement.ResponseTiming, now time.Time) {
	if t.Replica < 0 {
		return
	}
	ts.mu.Lock()
	defer ts.mu.Unlock()
	ms := ts.modelOf(model, t.Replica)
	n := ts.slotOf(now)
	fresh := func() latencySlot { return latencySlot{h: placement.NewHistogram(placement.FirstByteBuckets)} }
	ms.replicas[t.Replica].extra.latency.put(n, fresh).h.Observe(t.FirstByte.Seconds())
	ms.extra.latency.put(n, fresh).h.Observe(t.FirstByte.Seconds())
	if t.Status >= 400 {
		ts.countError(ms, t.Status, n)
	}
}

// ObserveAnswered records an error the warden answered itself.
func (ts *TokenSeries) ObserveAnswered(model string, code int, now time.Time) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	ts.countError(ts.modelOf(model, 0), code, ts.slotOf(now))
}

func (ts *TokenSeries) countError(ms *modelSeries, code int, n int64) {
	ms.extra.errors.put(n, func() errorSlot { return errorSlot{codes: map[int]uint64{}} }).codes[code]++
}

// fillExtra adds the load, latency and error fields to a series' points
// (built by series for slots first..last) and its summary. pooled: the
// model's series, where running and waiting add up over the replicas and
// KV is their mean.
func (ts *TokenSeries) fillExtra(s *adminapi.SeriesStats, own *extraSeries, replicas []*replicaSeries, first, last int64) {
	total := placement.NewHistogram(placement.FirstByteBuckets)
	errs := map[int]uint64{}
	for k := range s.Points {
		n, p := first+int64(k), &s.Points[k]
		if len(replicas) == 0 {
			if l := own.load.get(n); l != nil && l.polls > 0 {
				p.Running, p.Waiting, p.KVUsed = ptr(l.running/l.polls), ptr(l.waiting/l.polls), ptr(l.kv/l.polls)
			}
		} else {
			var run, wait, kv float64
			seen := 0
			for _, rs := range replicas {
				if l := rs.extra.load.get(n); l != nil && l.polls > 0 {
					run, wait, kv = run+l.running/l.polls, wait+l.waiting/l.polls, kv+l.kv/l.polls
					seen++
				}
			}
			if seen > 0 {
				p.Running, p.Waiting, p.KVUsed = ptr(run), ptr(wait), ptr(kv/float64(seen))
			}
			if e := own.errors.get(n); e != nil {
				p.Errors = placement.CodeCounts(e.codes)
				for c, v := range e.codes {
					errs[c] += v
				}
			}
		}
		if l := own.latency.get(n); l != nil {
			p.Responses = l.h.N
			p.FirstByteP50, p.FirstByteP95 = placement.QuantilePtr(&l.h, .5), placement.QuantilePtr(&l.h, .95)
			total.Add(&l.h)
		}
	}
	s.Summary.Responses = total.N
	s.Summary.FirstByteP50, s.Summary.FirstByteP95 = placement.QuantilePtr(&total, .5), placement.QuantilePtr(&total, .95)
	if len(replicas) > 0 {
		s.Summary.Errors = placement.CodeCounts(maps.Clone(errs))
	}
}

func ptr(v float64) *float64 { return &v }

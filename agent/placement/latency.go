package placement

import (
	"maps"
	"math"
	"sort"
	"sync"
	"time"
)

// What clients feel, as the shim measures it: per model and replica, the
// time to the first response byte and the whole request's duration, and
// per model the time admission parked a request. They are histograms
// (lmwarden_*_seconds in metrics.go), kept here as bucket counts that the
// collector reads at scrape time; the time to first byte also goes to the
// dashboard's hour of slots (Options.OnResponse, the token series).

// ResponseTiming is what the shim measured of one exchange that got a
// response from its replica.
type ResponseTiming struct {
	Replica int
	// FirstByte: from the request head read to the first response byte
	// the shim saw after the response head (the first streamed event), or
	// to the response head when the body came with it, was not streamed,
	// or was carried by the kernel datapath (which does not report when
	// its first byte passed).
	FirstByte time.Duration
	// Duration: from the request head read to the response's end.
	Duration time.Duration
	// Parked: how long admission kept it waiting at the warden (0: not).
	Parked time.Duration
	// Status is the replica's response status (relayed to the client).
	Status int
	// SessionHash is the placement's (0: none); BodyBytes the request
	// body the replica took. A session's weight in the table is set from
	// them (evict.go): the body's tokens on a 2xx, else 0.
	SessionHash uint64
	BodyBytes   int64
}

// Bucket bounds in seconds. Time to first byte spans a warm turn's tens of
// milliseconds to a cold 100k-token prefill under load; a request's
// duration adds the generation; a parked request waits up to
// admission.timeout (30 s by default).
var (
	FirstByteBuckets = []float64{.01, .025, .05, .1, .2, .3, .5, .75, 1, 1.5, 2, 3, 5, 7.5, 10, 15, 20, 30, 60, 120}
	durationBuckets  = []float64{.05, .1, .25, .5, 1, 2, 3, 5, 7.5, 10, 15, 20, 30, 45, 60, 90, 120, 180, 300, 600}
	parkedBuckets    = []float64{.01, .05, .1, .25, .5, 1, 2, 5, 10, 15, 20, 30, 45, 60, 120}
)

// Histogram counts observations per bucket (not cumulative; the last
// count is above the last bound).
type Histogram struct {
	bounds []float64
	counts []uint64
	Sum    float64 // of the values observed
	N      uint64  // values observed
}

// NewHistogram is an empty histogram over bounds (ascending, in seconds).
func NewHistogram(bounds []float64) Histogram {
	return Histogram{bounds: bounds, counts: make([]uint64, len(bounds)+1)}
}

// Observe counts one value.
func (h *Histogram) Observe(v float64) {
	h.counts[sort.SearchFloat64s(h.bounds, v)]++
	h.Sum += v
	h.N++
}

// Add adds o's counts (same bounds) to h's.
func (h *Histogram) Add(o *Histogram) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.Sum += o.Sum
	h.N += o.N
}

// Cumulative is the bucket map client_golang's const histogram takes.
func (h *Histogram) Cumulative() map[float64]uint64 {
	out := make(map[float64]uint64, len(h.bounds))
	var acc uint64
	for i, b := range h.bounds {
		acc += h.counts[i]
		out[b] = acc
	}
	return out
}

// Quantile estimates the q-quantile as Prometheus' histogram_quantile
// does: linear within the bucket that holds it (the top bucket's lower
// bound stands for anything above it). NaN without observations.
func (h *Histogram) Quantile(q float64) float64 {
	if h.N == 0 {
		return math.NaN()
	}
	rank := q * float64(h.N)
	var acc float64
	for i, c := range h.counts {
		if acc+float64(c) >= rank && c > 0 {
			if i == len(h.bounds) {
				return h.bounds[len(h.bounds)-1]
			}
			lo := 0.0
			if i > 0 {
				lo = h.bounds[i-1]
			}
			return lo + (h.bounds[i]-lo)*(rank-acc)/float64(c)
		}
		acc += float64(c)
	}
	return h.bounds[len(h.bounds)-1]
}

// latencyStats is one model's histograms and its hour of slots.
type latencyStats struct {
	mu        sync.Mutex
	firstByte []Histogram // per replica
	duration  []Histogram // per replica
	parked    Histogram
	statuses  []map[int]uint64 // per replica: relayed responses by status
	answered  map[int]uint64   // statuses the shim answered itself
	// onResponse and onAnswered also get every event (the warden's
	// series for the dashboard); nil: none.
	onResponse func(ResponseTiming, time.Time)
	onAnswered func(int, time.Time)
}

func newLatencyStats(replicas int) *latencyStats {
	l := &latencyStats{parked: NewHistogram(parkedBuckets), answered: map[int]uint64{}}
	for range replicas {
		l.firstByte = append(l.firstByte, NewHistogram(FirstByteBuckets))
		l.duration = append(l.duration, NewHistogram(durationBuckets))
		l.statuses = append(l.statuses, map[int]uint64{})
	}
	return l
}

// ObserveAnswered records a response the shim answered itself (a 400 to a
// malformed head, a 503 with no healthy replica, ...; l7 calls it).
func (m *Model) ObserveAnswered(code int, now time.Time) {
	l := m.lat
	l.mu.Lock()
	l.answered[code]++
	hook := l.onAnswered
	l.mu.Unlock()
	if hook != nil {
		hook(code, now)
	}
}

// SetSeriesHooks has every response and every answered error also fed to
// the warden's series.
func (m *Model) SetSeriesHooks(onResponse func(ResponseTiming, time.Time), onAnswered func(int, time.Time)) {
	m.lat.mu.Lock()
	defer m.lat.mu.Unlock()
	m.lat.onResponse, m.lat.onAnswered = onResponse, onAnswered
}

// ObserveResponse records one exchange the shim completed (l7 calls it
// for every response it relayed to its end).
func (m *Model) ObserveResponse(t ResponseTiming, now time.Time) {
	l := m.lat
	if t.Replica < 0 || t.Replica >= len(l.firstByte) {
		return
	}
	l.mu.Lock()
	l.firstByte[t.Replica].Observe(t.FirstByte.Seconds())
	l.duration[t.Replica].Observe(t.Duration.Seconds())
	if t.Status > 0 {
		l.statuses[t.Replica][t.Status]++
	}
	if t.Parked > 0 {
		l.parked.Observe(t.Parked.Seconds())
	}
	hook := l.onResponse
	l.mu.Unlock()
	if hook != nil {
		hook(t, now)
	}
	if t.SessionHash != 0 {
		m.credit(t, now)
	}
}

// credit weighs the session of a turn that ended (evict.go).
func (m *Model) credit(t ResponseTiming, now time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var tokens int64
	if t.Status >= 200 && t.Status < 300 {
		tokens = int64(m.promptTokens(Request{PromptBytes: t.BodyBytes}))
	}
	m.sessions.credit(t.SessionHash, tokens, now.UnixNano())
}

// LatencySnapshot is a copy of the histograms and status counts for the
// collector and the status.
type LatencySnapshot struct {
	FirstByte, Duration []Histogram
	Parked              Histogram
	Statuses            []map[int]uint64
	Answered            map[int]uint64
}

// Latency copies the model's histograms and status counts.
func (m *Model) Latency() LatencySnapshot {
	l := m.lat
	l.mu.Lock()
	defer l.mu.Unlock()
	cp := func(h Histogram) Histogram {
		h.counts = append([]uint64(nil), h.counts...)
		return h
	}
	s := LatencySnapshot{Parked: cp(l.parked), Answered: maps.Clone(l.answered)}
	for i := range l.firstByte {
		s.FirstByte = append(s.FirstByte, cp(l.firstByte[i]))
		s.Duration = append(s.Duration, cp(l.duration[i]))
		s.Statuses = append(s.Statuses, maps.Clone(l.statuses[i]))
	}
	return s
}

// QuantilePtr is h's q-quantile, nil without observations (null in JSON).
func QuantilePtr(h *Histogram, q float64) *float64 {
	v := h.Quantile(q)
	if math.IsNaN(v) {
		return nil
	}
	return &v
}

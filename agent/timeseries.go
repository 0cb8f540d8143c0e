package agent

import (
	"math"
	"sync"
	"time"

	"github.com/lmwarden/lmwarden/agent/adminapi"
	"github.com/lmwarden/lmwarden/agent/placement"
)

// Token time series for the dashboard's stats page and GET /api/v1/stats.
//
// The replicas' own counters (prompt tokens, prefix-cache queries and hits,
// generation tokens) only grow, so each poll yields a delta per replica. The
// deltas are summed into fixed time slots (10 s by default) kept in a ring of
// one hour, per replica and pooled per model. Nothing is written to disk: a
// restarted warden starts with an empty hour, as its counters do.

const (
	// DefaultSeriesStep is the resolution of the token time series.
	DefaultSeriesStep = 10 * time.Second
	// SeriesSpan is how far back the time series reach.
	SeriesSpan = time.Hour
)

// TokenCounters are one replica's cumulative counters at one poll, as vLLM
// exports them (vllmmetrics.PromptTokens, PrefixQueries, PrefixHits and
// GenerationTokens).
type TokenCounters struct {
	PromptTokens     float64
	PrefixQueries    float64
	PrefixHits       float64
	GenerationTokens float64
}

// tokenDelta is what happened between two polls of one replica.
type tokenDelta struct {
	cached     float64 // prompt tokens served from the prefix cache (delta of hits)
	computed   float64 // prompt tokens prefilled (delta prompt minus delta hits, >= 0)
	completion float64 // generated tokens
	queries    float64 // prefix-cache lookups, in tokens
	hits       float64 // prefix-cache hits, in tokens
}

func (d tokenDelta) scaled(f float64) tokenDelta {
	return tokenDelta{d.cached * f, d.computed * f, d.completion * f, d.queries * f, d.hits * f}
}

func (d tokenDelta) minus(o tokenDelta) tokenDelta {
	return tokenDelta{d.cached - o.cached, d.computed - o.computed, d.completion - o.completion, d.queries - o.queries, d.hits - o.hits}
}

func (d *tokenDelta) add(o tokenDelta) {
	d.cached += o.cached
	d.computed += o.computed
	d.completion += o.completion
	d.queries += o.queries
	d.hits += o.hits
}

// counterIncrease is the increase of a counter between two reads. A value
// below the previous one means the replica restarted and its counter began
// again at zero, so the whole new value is the increase (as Prometheus'
// rate() treats resets).
func counterIncrease(prev, cur float64) float64 {
	if cur < prev {
		return cur
	}
	return cur - prev
}

func deltaBetween(prev, cur TokenCounters) tokenDelta {
	prompt := counterIncrease(prev.PromptTokens, cur.PromptTokens)
	hits := counterIncrease(prev.PrefixHits, cur.PrefixHits)
	return tokenDelta{
		cached:     hits,
		computed:   math.Max(0, prompt-hits),
		completion: counterIncrease(prev.GenerationTokens, cur.GenerationTokens),
		queries:    counterIncrease(prev.PrefixQueries, cur.PrefixQueries),
		hits:       hits,
	}
}

// slotRing keeps one tokenDelta per time slot for the last len(slots) slots.
// A slot remembers its own number, so a stale entry from a lap ago reads as
// empty without any sweeping.
type slotRing struct {
	slots []slotEntry
}

type slotEntry struct {
	n int64 // slot number: unix nanoseconds / step; math.MinInt64 when unused
	d tokenDelta
}

func newSlotRing(n int) slotRing {
	r := slotRing{slots: make([]slotEntry, n)}
	for i := range r.slots {
		r.slots[i].n = math.MinInt64
	}
	return r
}

func (r *slotRing) index(n int64) int {
	i := int(n % int64(len(r.slots)))
	if i < 0 {
		i += len(r.slots)
	}
	return i
}

func (r *slotRing) add(n int64, d tokenDelta) {
	e := &r.slots[r.index(n)]
	if e.n != n {
		*e = slotEntry{n: n}
	}
	e.d.add(d)
}

func (r *slotRing) get(n int64) tokenDelta {
	e := r.slots[r.index(n)]
	if e.n != n {
		return tokenDelta{}
	}
	return e.d
}

type replicaSeries struct {
	last   TokenCounters
	lastAt time.Time
	seen   bool // last holds a previous poll; the first poll is only a baseline
	ring   slotRing
	extra  extraSeries // load and latency (timeseries_load.go)
}

type modelSeries struct {
	name     string
	replicas []*replicaSeries
	pooled   slotRing
	extra    extraSeries // latency and errors, pooled (timeseries_load.go)
}

// TokenSeries is the in-memory store of token rates. It is safe for
// concurrent use: the poller writes, the admin API reads.
type TokenSeries struct {
	step    time.Duration
	slots   int
	started time.Time // when the store (and the warden's counters) began

	mu     sync.Mutex
	models []*modelSeries // in order of first observation
	byName map[string]*modelSeries
}

// NewTokenSeries returns a store of SeriesSpan at the given resolution
// (DefaultSeriesStep if step <= 0). Tests use a short step so that a bar
// appears in well under a second.
func NewTokenSeries(step time.Duration) *TokenSeries {
	if step <= 0 {
		step = DefaultSeriesStep
	}
	slots := int(SeriesSpan / step)
	if slots < 1 {
		slots = 1
	}
	return &TokenSeries{step: step, slots: slots, started: time.Now(), byName: map[string]*modelSeries{}}
}

// SetStep changes the resolution and forgets everything recorded so far.
// It exists for tests and demos that want bars in seconds rather than
// every 10 s; call it before the poller starts.
func (ts *TokenSeries) SetStep(step time.Duration) {
	fresh := NewTokenSeries(step)
	ts.mu.Lock()
	defer ts.mu.Unlock()
	ts.step, ts.slots = fresh.step, fresh.slots
	ts.models, ts.byName = nil, fresh.byName
}

// Started is when the store was made: the warden builds it with its models,
// so it is also since when the warden's own counters run.
func (ts *TokenSeries) Started() time.Time { return ts.started }

// Step is the resolution of the series.
func (ts *TokenSeries) Step() time.Duration {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return ts.step
}

func (ts *TokenSeries) slotOf(t time.Time) int64 {
	ns, step := t.UnixNano(), ts.step.Nanoseconds()
	n := ns / step
	if ns%step < 0 { // floor, not truncation, before 1970
		n--
	}
	return n
}

// Observe records one successful poll of replica i of the named model. The
// first poll of a replica only sets its baseline; later polls add their
// delta to the slot that holds now. Call it only with counters actually
// read: a failed scrape must be skipped, not reported as zeros (zeros would
// look like a restart and the next good read like a burst).
func (ts *TokenSeries) Observe(model string, i int, c TokenCounters, now time.Time) {
	if i < 0 {
		return
	}
	ts.mu.Lock()
	defer ts.mu.Unlock()
	ms := ts.modelOf(model, i)
	rs := ms.replicas[i]
	if !rs.seen {
		rs.last, rs.lastAt, rs.seen = c, now, true
		return
	}
	d := deltaBetween(rs.last, c)
	from := rs.lastAt
	rs.last, rs.lastAt = c, now
	ts.spread(rs, ms, d, from, now)
}

// spread adds the delta of (from, to] to the slots it covers, in proportion
// to the time in each. Polls come every 100-250 ms, so this is nearly always
// one slot; after a gap (scrapes failing for a while, the process stopped)
// the tokens are spread over the gap instead of making one tall bar.
func (ts *TokenSeries) spread(rs *replicaSeries, ms *modelSeries, d tokenDelta, from, to time.Time) {
	first, last := ts.slotOf(from), ts.slotOf(to)
	if !to.After(from) || first == last {
		rs.ring.add(last, d)
		ms.pooled.add(last, d)
		return
	}
	step := ts.step.Nanoseconds()
	t0, t1 := from.UnixNano(), to.UnixNano()
	total := float64(t1 - t0)
	// Slots older than the ring would be forgotten at once: skip them (their
	// share is dropped, as it would be an hour from now anyway).
	// The newest slot takes what the others left rather than its own
	// product, so the parts add up to the delta (products of fractions
	// would turn 800 tokens into 799.9999999999999).
	var given tokenDelta
	if oldest := last - int64(ts.slots) + 1; first < oldest {
		given = d.scaled(float64(oldest*step-t0) / total)
		first = oldest
	}
	for n := first; n <= last; n++ {
		start, end := max(t0, n*step), min(t1, (n+1)*step)
		if end <= start {
			continue
		}
		part := d.minus(given)
		if n < last {
			part = d.scaled(float64(end-start) / total)
		}
		given.add(part)
		rs.ring.add(n, part)
		ms.pooled.add(n, part)
	}
}

// ObserveReplica is Observe fed with what the poller hands to
// Model.ObserveReplica. A failed read (Healthy false) carries no counters and
// is skipped.
func (ts *TokenSeries) ObserveReplica(model string, i int, s placement.ReplicaMetrics, now time.Time) {
	if !s.Healthy {
		return
	}
	ts.Observe(model, i, TokenCounters{
		PromptTokens:     s.PromptTokens,
		PrefixQueries:    s.PrefixQueries,
		PrefixHits:       s.PrefixHits,
		GenerationTokens: s.GenerationTokens,
	}, now)
}

// Snapshot returns the complete slots of the last window before now
// (window capped at SeriesSpan, at least one step).
func (ts *TokenSeries) Snapshot(window time.Duration, now time.Time) adminapi.StatsResponse {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	window = min(max(window, ts.step), SeriesSpan)
	count := int64(window / ts.step)
	last := ts.slotOf(now) - 1 // the newest complete slot
	first := last - count + 1

	resp := adminapi.StatsResponse{
		Now:           now,
		StartedAt:     ts.started,
		StepSeconds:   ts.step.Seconds(),
		WindowSeconds: (time.Duration(count) * ts.step).Seconds(),
		Models:        make([]adminapi.ModelStats, 0, len(ts.models)),
	}
	for _, ms := range ts.models {
		m := adminapi.ModelStats{Name: ms.name, Pooled: ts.series(&ms.pooled, first, last)}
		ts.fillExtra(&m.Pooled, &ms.extra, ms.replicas, first, last)
		m.Replicas = make([]adminapi.ReplicaStats, len(ms.replicas))
		for i, rs := range ms.replicas {
			m.Replicas[i] = adminapi.ReplicaStats{Replica: i, SeriesStats: ts.series(&rs.ring, first, last)}
			ts.fillExtra(&m.Replicas[i].SeriesStats, &rs.extra, nil, first, last)
		}
		resp.Models = append(resp.Models, m)
	}
	return resp
}

func (ts *TokenSeries) series(r *slotRing, first, last int64) adminapi.SeriesStats {
	secs := ts.step.Seconds()
	s := adminapi.SeriesStats{Points: make([]adminapi.StatsPoint, 0, last-first+1)}
	var total tokenDelta
	for n := first; n <= last; n++ {
		d := r.get(n)
		total.add(d)
		s.Points = append(s.Points, adminapi.StatsPoint{
			T:                    time.Unix(0, n*ts.step.Nanoseconds()).UTC(),
			PromptCachedPerSec:   d.cached / secs,
			PromptComputedPerSec: d.computed / secs,
			CompletionPerSec:     d.completion / secs,
			HitRate:              ratio(d.hits, d.queries),
		})
	}
	s.Summary = adminapi.StatsSummary{
		PromptCachedTokens:   total.cached,
		PromptComputedTokens: total.computed,
		CompletionTokens:     total.completion,
		PrefixQueries:        total.queries,
		PrefixHits:           total.hits,
		HitRate:              ratio(total.hits, total.queries),
	}
	return s
}

// ratio is num/den, or nil when den is zero (no lookups: no rate, not 0%).
func ratio(num, den float64) *float64 {
	if den <= 0 {
		return nil
	}
	r := num / den
	return &r
}

package agent

import "math"

// What policy cost predicts, beside ModelStatus (GET /api/v1/models): the
// numbers it learned and, per replica, the time to first token it would
// predict now for a new session of the usual prompt size. Operators read it
// to see why a session went where it went; only models on policy cost carry
// it.

// CostStatus is the model-wide part.
type CostStatus struct {
	PrefillRate  float64 `json:"prefill_tokens_per_s"` // learned (0: nothing yet, the prior is used)
	MeanUncached float64 `json:"mean_uncached_tokens"` // uncached prompt tokens a request, learned
	PromptTokens float64 `json:"prompt_tokens"`        // the usual prompt size the predictions below assume
	Admission    string  `json:"admission"`            // auto, queue, spill or off
	Parked       int     `json:"parked"`               // requests waiting at the warden now
	// AdmissionState is what admission does now and has done.
	AdmissionState AdmissionState `json:"admission_state"`
}

// AdmissionState is admission's part of GET /api/v1/models.
type AdmissionState struct {
	Engaged      bool     `json:"engaged"`              // requests that find no room wait now
	LiveLoad     float64  `json:"live_load"`            // live context over the caches (average): auto engages above 1.2, lets go under 1.0
	SharedPrefix float64  `json:"shared_prefix_tokens"` // counted once a replica
	OldestWait   float64  `json:"oldest_wait_s"`        // of the requests parked now
	WaitP50      *float64 `json:"wait_p50_s"`           // waits that ended (null: none yet)
	WaitP95      *float64 `json:"wait_p95_s"`
	MaxWait      *float64 `json:"max_wait_s"`
	Timeout      float64  `json:"timeout_s"` // the longest wait
	QueueMax     int      `json:"queue_max"` // more waiting get 503
	Quantum      float64  `json:"quantum"`   // re-prefill times a session keeps its room while others wait
	Waits        uint64   `json:"waits"`     // requests ever parked
	Rejected     uint64   `json:"rejected"`  // refused with 503, queue full
	TimedOut     uint64   `json:"timed_out"` // placed at the timeout
	Yields       uint64   `json:"yields"`    // rooms given up after a quantum
	Evicted      uint64   `json:"evicted"`   // rooms taken for a request at its timeout or a grown session
	Released     uint64   `json:"released"`  // rooms of sessions that had likely ended, given to a waiter
}

// ReplicaCost is one replica's part.
type ReplicaCost struct {
	PredictedTTFT float64 `json:"predicted_ttft_s"`   // for a new session of PromptTokens, now
	Capacity      float64 `json:"kv_capacity_tokens"` // as placement uses it
	Live          float64 `json:"live_tokens"`        // context of the live sessions held here (the shared prefix once)
	Budget        float64 `json:"live_budget_tokens"` // what they may hold: fill × capacity
	Backlog       float64 `json:"backlog_tokens"`     // predicted prefill still queued
}

// costStatus fills s's cost fields; call with m.mu held.
func (m *Model) costStatus(s *ModelStatus, now int64) {
	if m.policy != PolicyCost {
		return
	}
	prompt := m.meanPromptTokens
	a := &m.peer.admission
	s.Cost = &CostStatus{PrefillRate: m.peer.rate, MeanUncached: m.peer.meanUncached, PromptTokens: prompt,
		Admission: string(a.cfg.Mode), Parked: len(a.parked), AdmissionState: AdmissionState{
			Engaged: a.engaged, LiveLoad: a.loadAvg, SharedPrefix: m.peer.sharedPrefix,
			WaitP50: finite(a.waited.quantile(0.5)), WaitP95: finite(a.waited.quantile(0.95)),
			Timeout: a.cfg.Timeout.Seconds(), QueueMax: a.cfg.QueueMax, Quantum: a.cfg.Quantum,
			Waits: a.waits, Rejected: a.rejected, TimedOut: a.timedOut, Yields: a.yields, Evicted: a.evicted, Released: a.released,
		}}
	if a.waited.n > 0 {
		s.Cost.AdmissionState.MaxWait = finite(a.maxWait)
	}
	for _, w := range a.parked {
		s.Cost.AdmissionState.OldestWait = max(s.Cost.AdmissionState.OldestWait, float64(now-w.Since.UnixNano())/1e9)
	}
	for i := range s.Replicas {
		c := &ReplicaCost{Capacity: m.capacity(i), Live: m.physical(i), Budget: a.cfg.Fill * m.capacity(i)}
		// predictTTFT drains the backlog to now: let it, on a copy, so that
		// reading the status never changes what placement sees (the virtual
		// bench runs on its own clock)
		saved := m.peer.reps[i]
		if m.reps[i].healthy {
			c.PredictedTTFT = m.predictTTFT(i, nil, prompt, now)
		}
		c.Backlog = m.peer.reps[i].backlog
		m.peer.reps[i] = saved
		s.Replicas[i].Cost = c
	}
}

// finite is &v, or nil for NaN (JSON null).
func finite(v float64) *float64 {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return nil
	}
	return &v
}

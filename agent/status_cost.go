package agent

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
	Admission    string  `json:"admission"`            // off, spill or queue
	Parked       int     `json:"parked"`               // requests waiting at the warden (admission queue)
}

// ReplicaCost is one replica's part.
type ReplicaCost struct {
	PredictedTTFT float64 `json:"predicted_ttft_s"`   // for a new session of PromptTokens, now
	Capacity      float64 `json:"kv_capacity_tokens"` // as placement uses it
	Live          float64 `json:"live_tokens"`        // context of the live sessions held here
	Backlog       float64 `json:"backlog_tokens"`     // predicted prefill still queued
}

// costStatus fills s's cost fields; call with m.mu held.
func (m *Model) costStatus(s *ModelStatus, now int64) {
	if m.policy != PolicyCost {
		return
	}
	prompt := m.meanPromptTokens
	s.Cost = &CostStatus{PrefillRate: m.peer.rate, MeanUncached: m.peer.meanUncached, PromptTokens: prompt,
		Admission: string(m.peer.admission.Mode), Parked: len(m.peer.parked)}
	for i := range s.Replicas {
		c := &ReplicaCost{Capacity: m.capacity(i), Live: m.peer.reps[i].live}
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

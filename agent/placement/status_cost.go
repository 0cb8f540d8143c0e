package placement

import (
	"math"

	"github.com/lmwarden/lmwarden/agent/adminapi"
)

// What policy cost predicts, beside ModelStatus (GET /api/v1/models): the
// numbers it learned and, per replica, the time to first token it would
// predict now for a new session of the usual prompt size. Operators read it
// to see why a session went where it went; only models on a policy that
// parks under admission (cost, sticky) carry it.

// costStatus fills s's cost fields; call with m.mu held.
func (m *Model) costStatus(s *adminapi.ModelStatus, now int64) {
	if !admissionPolicy(m.policy) {
		return
	}
	prompt := m.meanPromptTokens
	a := &m.peer.admission
	s.Cost = &adminapi.CostStatus{PrefillRate: m.peer.rate, MeanUncached: m.peer.meanUncached, PromptTokens: prompt,
		Admission: string(a.cfg.Mode), Parked: len(a.parked), AdmissionState: adminapi.AdmissionState{
			Engaged: a.engaged, LiveLoad: a.loadAvg, SharedPrefix: m.peer.sharedPrefix,
			WaitP50: finite(a.waited.Quantile(0.5)), WaitP95: finite(a.waited.Quantile(0.95)),
			Timeout: a.cfg.Timeout.Seconds(), QueueMax: a.cfg.QueueMax, Quantum: a.cfg.Quantum,
			Waits: a.waits, Rejected: a.rejected, TimedOut: a.timedOut, Yields: a.yields, Evicted: a.evicted, Released: a.released,
		}}
	if a.waited.N > 0 {
		s.Cost.AdmissionState.MaxWait = finite(a.maxWait)
	}
	for _, w := range a.parked {
		s.Cost.AdmissionState.OldestWait = max(s.Cost.AdmissionState.OldestWait, float64(now-w.Since.UnixNano())/1e9)
	}
	for i := range s.Replicas {
		c := &adminapi.ReplicaCost{Capacity: m.capacity(i), Live: m.physical(i), Budget: a.cfg.Fill * m.capacity(i)}
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

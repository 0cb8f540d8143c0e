package adminapi

import "time"

// StatsResponse is the body of GET /api/v1/stats.
type StatsResponse struct {
	Now time.Time `json:"now"`
	// StartedAt is when the series began (the warden's start): nothing
	// before it was recorded.
	StartedAt     time.Time    `json:"started_at"`
	StepSeconds   float64      `json:"step_seconds"`
	WindowSeconds float64      `json:"window_seconds"`
	Models        []ModelStats `json:"models"`
}

// ModelStats holds one model's series, pooled over its replicas and per
// replica (index as in GET /api/v1/models).
type ModelStats struct {
	Name     string         `json:"name"`
	Pooled   SeriesStats    `json:"pooled"`
	Replicas []ReplicaStats `json:"replicas"`
}

// ReplicaStats is one replica's series.
type ReplicaStats struct {
	Replica int `json:"replica"`
	SeriesStats
}

// SeriesStats is one series: a summary over the window and one point per
// complete slot, oldest first. The slot in progress is left out, so a bar
// never shrinks or grows while one looks at it.
type SeriesStats struct {
	Summary StatsSummary `json:"summary"`
	Points  []StatsPoint `json:"points"`
}

// StatsSummary totals a series over the window. HitRate is prefix-cache
// hits over queries (nil when there were no queries).
type StatsSummary struct {
	PromptCachedTokens   float64  `json:"prompt_cached_tokens"`
	PromptComputedTokens float64  `json:"prompt_computed_tokens"`
	CompletionTokens     float64  `json:"completion_tokens"`
	PrefixQueries        float64  `json:"prefix_queries"`
	PrefixHits           float64  `json:"prefix_hits"`
	HitRate              *float64 `json:"hit_rate"`
	// Responses relayed to their end in the window, and their time to
	// first byte (p50, p95 in seconds; nil without responses).
	Responses    uint64   `json:"responses"`
	FirstByteP50 *float64 `json:"first_byte_p50"`
	FirstByteP95 *float64 `json:"first_byte_p95"`
	// Errors by status code (pooled only): the warden's own answers and
	// the replicas' responses of 400 and above.
	Errors map[string]uint64 `json:"errors,omitempty"`
}

// StatsPoint is one slot: rates in tokens a second over [T, T+step).
type StatsPoint struct {
	T                    time.Time `json:"t"`
	PromptCachedPerSec   float64   `json:"prompt_cached_tps"`
	PromptComputedPerSec float64   `json:"prompt_computed_tps"`
	CompletionPerSec     float64   `json:"completion_tps"`
	HitRate              *float64  `json:"hit_rate"`
	// Mean over the slot's polls (nil: no poll in it). Pooled, running and
	// waiting add up over the replicas and KV is their mean.
	Running *float64 `json:"running"`
	Waiting *float64 `json:"waiting"`
	KVUsed  *float64 `json:"kv_used"`
	// Responses that ended in the slot and their time to first byte
	// (seconds; nil without responses).
	Responses    uint64   `json:"responses"`
	FirstByteP50 *float64 `json:"first_byte_p50"`
	FirstByteP95 *float64 `json:"first_byte_p95"`
	// Errors by status code (pooled only; absent without any).
	Errors map[string]uint64 `json:"errors,omitempty"`
}

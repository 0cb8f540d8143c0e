package sim

import "time"

// Request is one request to a replica engine. Callbacks run on the engine's
// clock (virtual time in Virtual; in real mode, the modelled time the server
// maps to wall time) and must not block.
type Request struct {
	ID        uint64
	Prompt    []uint32
	MaxTokens int      // longest output in tokens; < 1 counts as 1
	Stop      []string // optional stop sequences: the output ends before the first match
	// Reply is what the model says when nothing cuts it short: it is
	// generated 4 bytes a token and ends by itself (finish reason "stop")
	// once all of it is out, or at MaxTokens ("length"). Empty: the model
	// never ends by itself (vLLM's ignore_eos) and generates exactly
	// MaxTokens tokens of filler words, as the benchmark asks.
	Reply string

	OnScheduled  func(at time.Time, cachedTokens int) // first admission, with the prefix-cache hit; may be nil
	OnFirstToken func(at time.Time)                   // may be nil
	OnToken      func(at time.Time, text string)      // may be nil
	OnDone       func(at time.Time, r Result)         // always called exactly once (may be nil)
}

// Result is what a finished (or failed) request reports.
type Result struct {
	PromptTokens, CachedTokens, OutputTokens int
	OutputText                               string
	FinishReason                             string // "stop" (the reply ended or a stop sequence matched), "length" (MaxTokens) or "abort"
	StopSequence                             string // the stop sequence matched, if any
	Err                                      error  // ErrAborted, ErrPromptTooLong, ErrEmptyPrompt, ErrNoReplica
}

// Stats are the numbers a replica's /metrics exports (counters only grow).
type Stats struct {
	Running, Waiting int
	KVUsage          float64 // 0-1: share of blocks neither free nor evictable
	KVCapacityTokens int

	PrefixQueries, PrefixHits      uint64 // tokens
	PromptTokens, GenerationTokens uint64
	TTFTSum                        float64 // seconds of modelled time
	TTFTCount                      uint64
	ITLSum                         float64 // seconds between a request's consecutive output tokens
	ITLCount                       uint64
	RequestsDone                   uint64
	Preemptions                    uint64
	AdmissionWaits                 uint64 // steps the queue's head could not be admitted (no blocks)
}

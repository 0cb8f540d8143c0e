package sim

import (
	"fmt"
	"sort"
	"time"
)

// Profile describes one hardware+model pairing as data: the scheduler limits
// vLLM would run with, and the numbers the step-time model needs. A second
// profile is one more entry in profiles, never more code.
type Profile struct {
	Name string

	// Scheduler and cache limits (vLLM's own knobs).
	KVCapacityTokens    int // tokens of KV cache after weights and activations
	BlockSize           int // tokens per KV block (16)
	MaxNumBatchedTokens int // tokens scheduled per step (prefill chunk budget)
	MaxNumSeqs          int // sequences running at once
	MaxModelLen         int // longest prompt+output accepted

	// Model shape.
	Params       float64 // parameters
	WeightBytes  float64 // bytes read per step for the weights
	Layers       int
	QueryHeads   int
	KVHeads      int
	HeadDim      int
	HiddenSize   int // d_model, for the attention FLOPs
	KVDtypeBytes int // bytes per K or V element

	// Hardware.
	PeakFLOPS         float64 // dense tensor FLOP/s at the model's dtype
	MemBytesPerSec    float64 // HBM/GDDR bandwidth
	ComputeEfficiency float64 // share of PeakFLOPS reached in prefill
	MemoryEfficiency  float64 // share of MemBytesPerSec reached in decode
	StepOverhead      time.Duration
}

// profiles is the table of known profiles. a4000-qwen3-4b is the reference
// hardware (docs/sim.md, "Calibration"): one RTX A4000 (16 GiB) serving Qwen3-4B bf16.
var profiles = map[string]Profile{
	"a4000-qwen3-4b": {
		Name:                "a4000-qwen3-4b",
		KVCapacityTokens:    40_000, // 6 GB / 147,456 B a token, rounded to 2,500 blocks
		BlockSize:           16,
		MaxNumBatchedTokens: 2048,
		MaxNumSeqs:          256,
		MaxModelLen:         32_768,
		Params:              4.0e9,
		WeightBytes:         8.05e9,
		Layers:              36,
		QueryHeads:          32,
		KVHeads:             8,
		HeadDim:             128,
		HiddenSize:          4096,
		KVDtypeBytes:        2,
		PeakFLOPS:           76.7e12,
		MemBytesPerSec:      448e9,
		ComputeEfficiency:   0.5,
		MemoryEfficiency:    0.6,
		StepOverhead:        3 * time.Millisecond,
	},
	// The reference's second box (docs/placement.md): one 32 GiB card (RTX
	// 5090: 1.79 TB/s, about 105 TFLOP/s dense bf16 with fp32 accumulate)
	// per replica serving Gemma-3-27B with int4 weights (W4A16, about 16 GB
	// read a step with the tied lm_head). 10 of its 62 layers attend
	// globally; the other 52 use a 1024-token sliding window, whose KV and
	// attention are bounded and left out, so Layers is the global layers.
	// KV: 2 x 10 x 16 x 128 x 2 B = 81,920 B a token; 0.9 x 32 GiB less
	// weights and activations leaves about 12.5 GB: 152,000 tokens.
	"rtx5090-gemma3-27b-int4": {
		Name:                "rtx5090-gemma3-27b-int4",
		KVCapacityTokens:    152_000,
		BlockSize:           16,
		MaxNumBatchedTokens: 2048,
		MaxNumSeqs:          256,
		MaxModelLen:         131_072,
		Params:              27.0e9,
		WeightBytes:         16.0e9,
		Layers:              10,
		QueryHeads:          32,
		KVHeads:             16,
		HeadDim:             128,
		HiddenSize:          4096, // query heads x head dim: the attention FLOPs' width
		KVDtypeBytes:        2,
		PeakFLOPS:           104.8e12,
		MemBytesPerSec:      1792e9,
		ComputeEfficiency:   0.5,
		MemoryEfficiency:    0.6,
		StepOverhead:        4 * time.Millisecond,
	},
}

// LookupProfile returns the named profile.
func LookupProfile(name string) (Profile, error) {
	p, ok := profiles[name]
	if !ok {
		return Profile{}, fmt.Errorf("%w: %q (known: %v)", ErrUnknownProfile, name, ProfileNames())
	}
	return p, nil
}

// ProfileNames lists the known profiles, sorted.
func ProfileNames() []string {
	names := make([]string, 0, len(profiles))
	for n := range profiles {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// ContextLimit is the longest prompt+output a request may ask for: the
// model's context, and never more than the KV cache holds (a longer request
// could never run to its end).
func (p Profile) ContextLimit() int { return min(p.MaxModelLen, p.NumBlocks()*p.BlockSize) }

// NumBlocks is the KV capacity in blocks.
func (p Profile) NumBlocks() int { return p.KVCapacityTokens / p.BlockSize }

// KVBytesPerToken is K and V for every layer and KV head of one token.
func (p Profile) KVBytesPerToken() float64 {
	return float64(2 * p.Layers * p.KVHeads * p.HeadDim * p.KVDtypeBytes)
}

// Chunk is one sequence's share of a step: Tokens new tokens computed on top
// of Context tokens already in its KV cache. A decode is Tokens == 1.
type Chunk struct{ Context, Tokens int }

// StepCost is the modelled duration of one engine step: the larger of its
// memory time (weights once, plus every sequence's KV read) and its compute
// time (2·params FLOP a token for the weights, plus 4·layers·hidden FLOP per
// token per token of context for attention), plus the fixed overhead.
func (p Profile) StepCost(chunks []Chunk) time.Duration {
	var l stepLoad
	for _, c := range chunks {
		l.add(c.Context, c.Tokens)
	}
	return p.cost(l)
}

// stepLoad accumulates a step's work without allocating, so the scheduler can
// price a step while it builds it.
type stepLoad struct{ newTokens, kvTokens, attnPairs float64 }

func (l *stepLoad) add(context, tokens int) {
	n, ctx := float64(tokens), float64(context)
	l.newTokens += n
	l.kvTokens += ctx + n
	// token i of the chunk attends to ctx+i+1 positions
	l.attnPairs += n*ctx + n*(n+1)/2
}

// costParts returns the memory and compute seconds of a step.
func (p Profile) costParts(l stepLoad) (memSec, computeSec float64) {
	bytes := p.WeightBytes + l.kvTokens*p.KVBytesPerToken()
	flops := 2*p.Params*l.newTokens + 4*float64(p.Layers*p.HiddenSize)*l.attnPairs
	return bytes / (p.MemBytesPerSec * p.MemoryEfficiency),
		flops / (p.PeakFLOPS * p.ComputeEfficiency)
}

func (p Profile) cost(l stepLoad) time.Duration {
	m, c := p.costParts(l)
	return time.Duration(max(m, c)*1e9) + p.StepOverhead
}

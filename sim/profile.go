package sim

import (
	"bytes"
	"embed"
	"fmt"
	"math"
	"os"
	"path"
	"sort"
	"strings"
	"time"

	"go.yaml.in/yaml/v4"

	"github.com/lmwarden/lmwarden/internal/vllmlb"
)

// Profile describes one hardware+model+vLLM deployment as data: the card,
// the model's shape, the terms of vLLM's start-up memory arithmetic that
// decide the KV cache, the scheduler's limits, and the vLLM behaviours that
// changed across versions. The built-in profiles are YAML files embedded
// from sim/profiles; `--profile FILE` reads a user's own (same fields).
type Profile struct {
	Name        string `yaml:"name"`
	Description string `yaml:"description,omitempty"`

	// The card.
	GPU               string        `yaml:"gpu,omitempty"`
	GPUMemoryBytes    float64       `yaml:"gpu_memory_bytes"`   // total, as cudaMemGetInfo (and nvidia-smi) report it
	PeakFLOPS         float64       `yaml:"peak_flops"`         // dense tensor FLOP/s at the model's dtype
	MemBytesPerSec    float64       `yaml:"memory_bandwidth"`   // HBM/GDDR bytes a second
	ComputeEfficiency float64       `yaml:"compute_efficiency"` // share of PeakFLOPS reached in prefill
	MemoryEfficiency  float64       `yaml:"memory_efficiency"`  // share of the bandwidth reached in decode
	StepOverhead      time.Duration `yaml:"step_overhead"`      // per engine step: scheduling, launches, sampling
	// PrefillFloor and PrefillContextRate are two terms of a profile
	// fitted to a measured forward pass (h200-qwen3-4b; docs/sim.md,
	// "Profile h200-qwen3-4b"); zero leaves them out. A step that carries
	// prefill tokens takes at least PrefillFloor before StepOverhead (the
	// forward pass's own launch cost, hidden behind longer GPU work), and
	// each prefill chunk pays its context (the tokens already in its KV
	// cache: a cached prefix, or the prompt's earlier chunks) at
	// PrefillContextRate tokens a second on top of its FLOPs.
	PrefillFloor       time.Duration `yaml:"prefill_floor,omitempty"`
	PrefillContextRate float64       `yaml:"prefill_context_tokens_per_second,omitempty"`

	// The model.
	Model        string  `yaml:"model,omitempty"`
	Params       float64 `yaml:"params"`       // parameters (2 FLOP each a token)
	WeightBytes  float64 `yaml:"weight_bytes"` // read once a step; also what loading them takes
	Layers       int     `yaml:"layers"`       // layers holding long-context KV
	QueryHeads   int     `yaml:"query_heads"`
	KVHeads      int     `yaml:"kv_heads"`
	HeadDim      int     `yaml:"head_dim"`
	HiddenSize   int     `yaml:"attention_width"`                   // query heads x head dim: the attention FLOPs' width
	KVDtypeBytes int     `yaml:"kv_dtype_bytes"`                    // bytes per K or V element
	MaxPositions int     `yaml:"max_position_embeddings,omitempty"` // the model's own context: vLLM's default max_model_len

	// vLLM's start-up memory arithmetic (vllm/v1/worker/gpu_worker.py,
	// Worker.determine_available_memory): the KV cache gets
	// GPUMemoryBytes x GPUMemoryUtilization less the weights, the
	// activation peak of the profiling forward pass, the memory outside
	// PyTorch, and (since vLLM 0.21) the CUDA-graph estimate.
	VLLMVersion          string  `yaml:"vllm_version,omitempty"`
	GPUMemoryUtilization float64 `yaml:"gpu_memory_utilization"`
	ActivationPeakBytes  float64 `yaml:"activation_peak_bytes"`
	NonTorchBytes        float64 `yaml:"non_torch_bytes"`
	CUDAGraphBytes       float64 `yaml:"cudagraph_bytes"` // 0: the estimate off (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0, or vLLM before 0.21)
	// KVCapacityTokens, if set, replaces the arithmetic (vLLM's
	// num_gpu_blocks_override, in tokens; `--kv-tokens`).
	KVCapacityTokens int `yaml:"kv_tokens,omitempty"`

	// The scheduler (vLLM's own knobs).
	BlockSize           int     `yaml:"block_size"`
	MaxNumBatchedTokens int     `yaml:"max_num_batched_tokens"` // tokens a step (the prefill chunk budget)
	MaxNumSeqs          int     `yaml:"max_num_seqs"`
	MaxModelLen         int     `yaml:"max_model_len"` // longest prompt+output; 0: MaxPositions
	Watermark           float64 `yaml:"watermark,omitempty"`
	// ReserveFullISL is vLLM's scheduler_reserve_full_isl (on by default
	// since it was added, pull request 37307): a waiting request is admitted
	// only if its whole prompt fits the free blocks, not just its first chunk.
	ReserveFullISL bool `yaml:"scheduler_reserve_full_isl"`
	// DPLBStats is what the engines tell vLLM's data-parallel balancer
	// (internal/vllmlb's stats modes: fresh, stale, none), the balancer of
	// a one-endpoint deployment and of a benchmark's arm "off": vLLM 0.22
	// to 0.26 publish no queue counts for a dense model (none). Empty:
	// fresh.
	DPLBStats string `yaml:"dp_lb_stats,omitempty"`
	// ClientRTT is the round-trip time between the benchmark's clients and
	// the replicas' front end that this profile's reference measured over
	// (bench --virtual adds what the network does to each turn; 0: clients
	// next to the replicas).
	ClientRTT time.Duration `yaml:"client_rtt,omitempty"`
	// PrefixStats is when the prefix-cache counters count a request:
	// "admitted" (once, when it is scheduled: vLLM since pull request 48860)
	// or "every-lookup" (each time the scheduler looks a waiting request up,
	// even when it cannot admit it: earlier vLLM, which inflates the counts
	// while requests wait).
	PrefixStats string `yaml:"prefix_stats"`
}

// Prefix-stats modes.
const (
	PrefixStatsAdmitted    = "admitted"
	PrefixStatsEveryLookup = "every-lookup"
)

//go:embed profiles/*.yaml
var profileFiles embed.FS

// profiles holds the built-in profiles, by name.
var profiles = func() map[string]Profile {
	out := map[string]Profile{}
	entries, err := profileFiles.ReadDir("profiles")
	if err != nil {
		panic(err)
	}
	for _, e := range entries {
		b, err := profileFiles.ReadFile(path.Join("profiles", e.Name()))
		if err != nil {
			panic(err)
		}
		p, err := ParseProfile(b)
		if err != nil {
			panic(fmt.Sprintf("sim: built-in profile %s: %v", e.Name(), err))
		}
		out[p.Name] = p
	}
	return out
}()

// ParseProfile reads a profile from YAML; unknown fields are an error.
func ParseProfile(b []byte) (Profile, error) {
	var p Profile
	d := yaml.NewDecoder(bytes.NewReader(b))
	d.KnownFields(true)
	if err := d.Decode(&p); err != nil {
		return Profile{}, fmt.Errorf("%w: %v", ErrBadProfile, err)
	}
	if p.PrefixStats == "" {
		p.PrefixStats = PrefixStatsAdmitted
	}
	if p.MaxModelLen == 0 {
		p.MaxModelLen = p.MaxPositions
	}
	return p, p.Check()
}

// WriteProfile is the YAML of a profile (its fields' tags) after a header
// comment.
func WriteProfile(p Profile, header string) ([]byte, error) {
	body, err := yaml.Marshal(p)
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	for _, line := range strings.Split(strings.TrimRight(header, "\n"), "\n") {
		b.WriteString("# " + line + "\n")
	}
	b.Write(body)
	return b.Bytes(), nil
}

// LookupProfile returns a built-in profile by name, or reads a profile file
// when nameOrFile names one (it contains a slash or ends in .yaml/.yml).
func LookupProfile(nameOrFile string) (Profile, error) {
	if strings.ContainsRune(nameOrFile, '/') || strings.HasSuffix(nameOrFile, ".yaml") || strings.HasSuffix(nameOrFile, ".yml") {
		b, err := os.ReadFile(nameOrFile)
		if err != nil {
			return Profile{}, fmt.Errorf("%w: %v", ErrBadProfile, err)
		}
		p, err := ParseProfile(b)
		if err != nil {
			return Profile{}, fmt.Errorf("%s: %w", nameOrFile, err)
		}
		return p, nil
	}
	p, ok := profiles[nameOrFile]
	if !ok {
		return Profile{}, fmt.Errorf("%w: %q (known: %v, or a profile file)", ErrUnknownProfile, nameOrFile, ProfileNames())
	}
	return p, nil
}

// ProfileNames lists the built-in profiles, sorted.
func ProfileNames() []string {
	names := make([]string, 0, len(profiles))
	for n := range profiles {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Check reports what vLLM would refuse: missing or impossible values, and a
// max_model_len one request of which the KV cache cannot hold (vLLM stops at
// start-up: vllm/v1/core/kv_cache_utils.py, check_enough_kv_cache_memory).
func (p Profile) Check() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: profile %q: %s", ErrBadProfile, p.Name, fmt.Sprintf(format, args...))
	}
	switch {
	case p.Name == "":
		return bad("name: required")
	case p.BlockSize < 1 || p.MaxNumBatchedTokens < 1 || p.MaxNumSeqs < 1:
		return bad("block_size, max_num_batched_tokens and max_num_seqs must be at least 1")
	case p.MaxModelLen < 1:
		return bad("max_model_len (or max_position_embeddings): required")
	case p.Params <= 0 || p.WeightBytes <= 0 || p.Layers < 1 || p.KVHeads < 1 || p.HeadDim < 1 || p.KVDtypeBytes < 1 || p.HiddenSize < 1:
		return bad("params, weight_bytes, layers, kv_heads, head_dim, attention_width and kv_dtype_bytes must be positive")
	case p.PeakFLOPS <= 0 || p.MemBytesPerSec <= 0 || p.ComputeEfficiency <= 0 || p.MemoryEfficiency <= 0:
		return bad("peak_flops, memory_bandwidth and the efficiencies must be positive")
	case p.StepOverhead < 0 || p.PrefillFloor < 0 || p.PrefillContextRate < 0:
		return bad("step_overhead, prefill_floor and prefill_context_tokens_per_second must not be negative")
	case p.PrefixStats != PrefixStatsAdmitted && p.PrefixStats != PrefixStatsEveryLookup:
		return bad("prefix_stats %q: want %s or %s", p.PrefixStats, PrefixStatsAdmitted, PrefixStatsEveryLookup)
	case !validLBStats(p.DPLBStats):
		return bad("dp_lb_stats %q: want fresh, stale or none", p.DPLBStats)
	case p.ClientRTT < 0:
		return bad("client_rtt: negative")
	case p.Watermark < 0 || p.Watermark >= 1:
		return bad("watermark %v: want 0 <= watermark < 1", p.Watermark)
	case p.KVCapacityTokens == 0 && (p.GPUMemoryBytes <= 0 || p.GPUMemoryUtilization <= 0 || p.GPUMemoryUtilization > 1):
		return bad("gpu_memory_bytes and gpu_memory_utilization (0-1] are needed unless kv_tokens is set")
	}
	blocks := p.NumBlocks()
	if blocks < 2 {
		m := p.KVMemory()
		return bad("No available memory for the cache blocks: %.2f GiB for the KV cache (%s). Try increasing gpu_memory_utilization", m.Available/gib, m.String())
	}
	// the null block is never handed out
	if need := (p.MaxModelLen + p.BlockSize - 1) / p.BlockSize; need > blocks-1 {
		fit := (blocks - 1) * p.BlockSize
		return bad("To serve at least one request with the model's max seq len (%d), (%.2f GiB KV cache is needed, which is larger than the available KV cache memory (%.2f GiB). Based on the available memory, the estimated maximum model length is %d. Try increasing gpu_memory_utilization or decreasing max_model_len when initializing the engine",
			p.MaxModelLen, float64(need*p.BlockSize)*p.KVBytesPerToken()/gib, float64(blocks*p.BlockSize)*p.KVBytesPerToken()/gib, fit)
	}
	return nil
}

const gib = 1 << 30

func validLBStats(s string) bool {
	_, err := vllmlb.ParseStatsMode(s)
	return err == nil
}

// LBStats is the profile's stats mode of vLLM's data-parallel balancer.
func (p Profile) LBStats() vllmlb.StatsMode {
	m, _ := vllmlb.ParseStatsMode(p.DPLBStats) // checked by Check
	return m
}

// KVMemory is vLLM's start-up arithmetic for the KV cache, term by term.
type KVMemory struct {
	Requested, Weights, Activation, NonTorch, CUDAGraphs float64 // bytes
	Available                                            float64 // for the KV cache
	Override                                             bool    // kv_tokens replaced the arithmetic
}

// KVMemory computes the KV cache's share of the card as vLLM does:
// requested = total x gpu_memory_utilization, minus weights, the
// profiling run's activation peak, non-torch memory and the CUDA-graph
// estimate.
func (p Profile) KVMemory() KVMemory {
	m := KVMemory{Requested: p.GPUMemoryBytes * p.GPUMemoryUtilization, Weights: p.WeightBytes,
		Activation: p.ActivationPeakBytes, NonTorch: p.NonTorchBytes, CUDAGraphs: p.CUDAGraphBytes}
	m.Available = m.Requested - m.Weights - m.Activation - m.NonTorch - m.CUDAGraphs
	if p.KVCapacityTokens > 0 {
		m.Override, m.Available = true, float64(p.KVCapacityTokens)*p.KVBytesPerToken()
	}
	return m
}

func (m KVMemory) String() string {
	return fmt.Sprintf("%.2f GiB requested - %.2f weights - %.2f activation peak - %.2f non-torch - %.2f CUDA graphs",
		m.Requested/gib, m.Weights/gib, m.Activation/gib, m.NonTorch/gib, m.CUDAGraphs/gib)
}

// NumBlocks is the KV cache in blocks, vLLM's num_gpu_blocks: the available
// bytes over the bytes of one block of every layer (kv_cache_utils.py,
// get_num_blocks), or the override. One of them is vLLM's null block.
func (p Profile) NumBlocks() int {
	if p.KVCapacityTokens > 0 {
		return p.KVCapacityTokens / p.BlockSize
	}
	perBlock := float64(p.BlockSize) * p.KVBytesPerToken()
	if perBlock <= 0 {
		return 0
	}
	return int(math.Max(0, math.Floor(p.KVMemory().Available/perBlock)))
}

// KVTokens is num_gpu_blocks x block_size: the capacity vLLM reports.
func (p Profile) KVTokens() int { return p.NumBlocks() * p.BlockSize }

// ContextLimit is the longest prompt+output a request may ask for.
func (p Profile) ContextLimit() int { return min(p.MaxModelLen, (p.NumBlocks()-1)*p.BlockSize) }

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
// token per token of context for attention, plus the prefill chunks'
// context at PrefillContextRate), at least PrefillFloor when it carries
// prefill, plus the fixed overhead.
func (p Profile) StepCost(chunks []Chunk) time.Duration {
	var l stepLoad
	for _, c := range chunks {
		l.add(c.Context, c.Tokens)
	}
	return p.cost(l)
}

// stepLoad accumulates a step's work without allocating, so the scheduler can
// price a step while it builds it.
type stepLoad struct {
	newTokens, kvTokens, attnPairs float64
	// prefillContext sums the context of the step's prefill chunks (more
	// than one token: a decode computes one)
	prefillContext float64
	prefill        bool
}

func (l *stepLoad) add(context, tokens int) {
	n, ctx := float64(tokens), float64(context)
	l.newTokens += n
	l.kvTokens += ctx + n
	// token i of the chunk attends to ctx+i+1 positions
	l.attnPairs += n*ctx + n*(n+1)/2
	if tokens > 1 {
		l.prefill = true
		l.prefillContext += ctx
	}
}

// costParts returns the memory and compute seconds of a step.
func (p Profile) costParts(l stepLoad) (memSec, computeSec float64) {
	bytes := p.WeightBytes + l.kvTokens*p.KVBytesPerToken()
	flops := 2*p.Params*l.newTokens + 4*float64(p.Layers*p.HiddenSize)*l.attnPairs
	return bytes / (p.MemBytesPerSec * p.MemoryEfficiency), flops / (p.PeakFLOPS * p.ComputeEfficiency)
}

func (p Profile) cost(l stepLoad) time.Duration {
	m, c := p.costParts(l)
	sec := max(m, c)
	if l.prefill {
		sec = max(sec, p.PrefillFloor.Seconds())
		if p.PrefillContextRate > 0 {
			sec += l.prefillContext / p.PrefillContextRate
		}
	}
	return time.Duration(sec*1e9) + p.StepOverhead
}

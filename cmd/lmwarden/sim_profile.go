package main

import (
	"flag"
	"fmt"
	"strconv"
	"strings"

	"github.com/lmwarden/lmwarden/sim"
)

// profileFlags pick a replica profile and override what a deployment sets
// on vLLM's command line. They override the profile's values and are
// checked as vLLM checks them at start-up.
type profileFlags struct {
	name        string
	kvTokens    int
	maxModelLen int
	gpuUtil     float64
	fullISL     *bool
	prefixStats string
}

func (f *profileFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.name, "profile", "a4000-qwen3-4b", "replica profile: "+strings.Join(sim.ProfileNames(), ", ")+", or a profile file (YAML)")
	f.registerOverrides(fs)
}

// overrideFlags are the flags registerOverrides adds, for a command that
// must refuse them where they do not apply.
var overrideFlags = []string{"kv-tokens", "max-model-len", "gpu-memory-utilization", "scheduler-reserve-full-isl", "prefix-stats"}

// registerOverrides adds the vLLM settings that override a profile, for a
// command that registers --profile itself.
func (f *profileFlags) registerOverrides(fs *flag.FlagSet) {
	fs.IntVar(&f.kvTokens, "kv-tokens", 0, "KV cache size in tokens, instead of the profile's memory arithmetic (vLLM's num_gpu_blocks_override x block size)")
	fs.IntVar(&f.maxModelLen, "max-model-len", 0, "vLLM's --max-model-len (default: the profile's)")
	fs.Float64Var(&f.gpuUtil, "gpu-memory-utilization", 0, "vLLM's --gpu-memory-utilization (default: the profile's)")
	fs.BoolFunc("scheduler-reserve-full-isl", "vLLM's scheduler_reserve_full_isl: admit a waiting request only if its whole prompt fits (default: the profile's, true); false: its first chunk, as older vLLM", func(s string) error {
		v, err := strconv.ParseBool(s)
		if err != nil {
			return err
		}
		f.fullISL = &v
		return nil
	})
	fs.StringVar(&f.prefixStats, "prefix-stats", "", "when the prefix-cache counters count a request: admitted (once, vLLM after 0.26) or every-lookup (at each look-up of a waiting request, vLLM 0.26 and before) (default: the profile's)")
}

// resolve returns the profile with the overrides, or vLLM's own start-up
// error (a max_model_len the KV cache cannot hold, say).
func (f *profileFlags) resolve() (sim.Profile, error) {
	p, err := sim.LookupProfile(f.name)
	if err != nil {
		return p, fmt.Errorf("--profile: %v: %w", err, errUsage)
	}
	if f.kvTokens < 0 || f.maxModelLen < 0 || f.gpuUtil < 0 || f.gpuUtil > 1 {
		return p, fmt.Errorf("--kv-tokens and --max-model-len must be >= 0, --gpu-memory-utilization in (0, 1]: %w", errUsage)
	}
	if f.kvTokens > 0 {
		p.KVCapacityTokens = f.kvTokens
	}
	if f.maxModelLen > 0 {
		p.MaxModelLen = f.maxModelLen
	}
	if f.gpuUtil > 0 {
		p.GPUMemoryUtilization = f.gpuUtil
	}
	if f.fullISL != nil {
		p.ReserveFullISL = *f.fullISL
	}
	if f.prefixStats != "" {
		p.PrefixStats = f.prefixStats
	}
	if err := p.Check(); err != nil {
		return p, err
	}
	return p, nil
}

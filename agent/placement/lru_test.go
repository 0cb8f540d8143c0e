package placement

import (
	"fmt"
	"testing"
	"time"

	"github.com/lmwarden/lmwarden/agent/config"
)

func TestHeldCountsOnlyTheBlocksNeighboursAllocate(t *testing.T) {
	// One 40k replica, sessions a and b of 12k on it. a is idle while b
	// runs a cold turn (12k new tokens) and two that hit its cache (500
	// new each), each generating 200. LRU evicts a only once the new
	// blocks fill what b's more recent context leaves free: after b's
	// turns (13.6k new beside b's 13.7k) a is whole, though 37k prompt
	// tokens were placed on a 40k cache; a cold 20k prompt then evicts it.
	m := mustModel(t, func(mc *config.ModelConfig) { mc.Policy = config.PolicyCost; mc.Replicas = mc.Replicas[:1] })
	now := costEpoch
	var prompt, hits, gen float64
	poll := func() {
		now = now.Add(250 * time.Millisecond)
		m.ObserveReplica(0, ReplicaMetrics{Healthy: true, KVCapacityTokens: 40_000,
			PromptTokens: prompt, PrefixHits: hits, GenerationTokens: gen}, now)
	}
	poll()
	a := mustPlace(t, m, Request{SessionID: "a", PromptBytes: promptBytes(12_000), Now: now})
	prompt, gen = prompt+12_000, gen+200
	poll()
	m.Done(a, now)
	for turn := range 3 {
		b := mustPlace(t, m, Request{SessionID: "b", PromptBytes: promptBytes(12_000 + 700*turn), Now: now})
		prompt, hits, gen = prompt+12_000+700*float64(turn), hits+11_500+700*float64(turn), gen+200
		if turn == 0 {
			hits -= 11_500 // b's first turn is cold
		}
		poll()
		m.Done(b, now)
	}
	s := m.peer.sessions[m.HashSession("a")]
	if h := m.held(s); h < s.ctx {
		t.Fatalf("held %.0f of a's %.0f tokens after b's turns allocated 13.6k", h, s.ctx)
	}
	prompt, gen = prompt+20_000, gen+200 // a cold 20k prompt of someone else
	poll()
	if h := m.held(s); h > 0 {
		t.Fatalf("held %.0f of a's tokens after 34k new tokens beside b's 14k on a 40k cache", h)
	}
}

func TestHeldCountsANewNeighbourOnceNotAsRecentAndAsNew(t *testing.T) {
	// One 40k replica: a (12k) idle, then three new sessions of 8k each,
	// every token of theirs computed (24k new blocks): a keeps its 12k
	// beside them (12k + 24k fits in 40k). Counting their contexts as
	// used more recently than a's as well as the new blocks they took
	// made a look evicted, and cost moved sessions whose cache still held
	// them (on the Mooncake trace, a third of the later turns).
	m := mustModel(t, func(mc *config.ModelConfig) { mc.Policy = config.PolicyCost; mc.Replicas = mc.Replicas[:1] })
	now := costEpoch
	var prompt, gen float64
	poll := func() {
		now = now.Add(250 * time.Millisecond)
		m.ObserveReplica(0, ReplicaMetrics{Healthy: true, KVCapacityTokens: 40_000,
			PromptTokens: prompt, GenerationTokens: gen}, now)
	}
	poll()
	a := mustPlace(t, m, Request{SessionID: "a", PromptBytes: promptBytes(12_000), Now: now})
	prompt = 12_000
	poll()
	m.Done(a, now)
	for k := range 3 {
		p := mustPlace(t, m, Request{SessionID: fmt.Sprint("new", k), PromptBytes: promptBytes(8_000), Now: now})
		prompt += 8_000
		poll()
		m.Done(p, now)
	}
	s := m.peer.sessions[m.HashSession("a")]
	if h := m.held(s); h < s.ctx-1_000 {
		t.Fatalf("held %.0f of a's %.0f tokens beside 24k new ones on a 40k cache", h, s.ctx)
	}
}

package sim

import (
	"testing"
	"time"
)

func TestA4000ProfileMatchesWorkloadArithmetic(t *testing.T) {
	p, err := LookupProfile("a4000-qwen3-4b")
	if err != nil {
		t.Fatal(err)
	}
	if got := p.KVBytesPerToken(); got != 147456 {
		t.Fatalf("KV bytes a token = %v, want 147456", got)
	}
	if p.NumBlocks() != 2500 {
		t.Fatalf("blocks = %d, want 2500", p.NumBlocks())
	}
	// a 4B model at batch 1 on this card reaches roughly 30 tokens a second
	d := p.StepCost([]Chunk{{Context: 100, Tokens: 1}})
	if tps := float64(time.Second) / float64(d); tps < 25 || tps > 35 {
		t.Fatalf("batch-1 decode %.1f tok/s (step %v), want about 30", tps, d)
	}
	if _, err := LookupProfile("nope"); err == nil {
		t.Fatal("unknown profile accepted")
	}
}

package sim

import (
	"math"
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
	// vLLM's arithmetic: 0.92 of 16,376 MiB, less 8.05 GB of weights, the
	// activation peak, non-torch memory and the CUDA-graph estimate, in
	// blocks of 16 tokens x 147,456 B
	avail := 0.92*17171480576 - 8.05e9 - 865792000 - 418759229 - 697932185
	want := int(math.Floor(avail / (16 * 147456)))
	if p.NumBlocks() != want || want != 2443 {
		t.Fatalf("blocks = %d, want %d (2443)", p.NumBlocks(), want)
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

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
	// vLLM 0.26's arithmetic: 0.92 of 16,376 MiB, less the 7.68 GiB vLLM
	// logs loading the weights, the activation peak and non-torch memory;
	// model runner V2 subtracts no CUDA-graph estimate. Blocks of 16 tokens
	// x 147,456 B.
	avail := 0.92*17171480576 - 8244797030 - 243859456 - 418759229
	want := int(math.Floor(avail / (16 * 147456)))
	if p.NumBlocks() != want || want != 2920 || p.CUDAGraphBytes != 0 {
		t.Fatalf("blocks = %d, want %d (2920), CUDA-graph term %v", p.NumBlocks(), want, p.CUDAGraphBytes)
	}
	// a 4B model at batch 1 on this card reaches roughly 30 tokens a second
	// at the workload's contexts (decode reads the weights and 12-15k tokens
	// of KV a step at 77% of the card's bandwidth)
	d := p.StepCost([]Chunk{{Context: 13500, Tokens: 1}})
	if tps := float64(time.Second) / float64(d); tps < 25 || tps > 35 {
		t.Fatalf("batch-1 decode %.1f tok/s (step %v), want about 30", tps, d)
	}
	if _, err := LookupProfile("nope"); err == nil {
		t.Fatal("unknown profile accepted")
	}
}

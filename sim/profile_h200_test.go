package sim

import (
	"bufio"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"strings"
	"testing"
	"time"
)

// prefillRow is one measured prefill of sim/testdata/calibration.
type prefillRow struct {
	Kind   string  `json:"kind"` // cold_prefill or cached_turn
	Tokens int     `json:"tokens"`
	Prefix int     `json:"prefix"`
	New    int     `json:"new"`
	MS     float64 `json:"ms"`
}

func readPrefillRows(tb testing.TB, path string) []prefillRow {
	tb.Helper()
	f, err := os.Open(path)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	var rows []prefillRow
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var r prefillRow
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			tb.Fatalf("%s: %v", path, err)
		}
		rows = append(rows, r)
	}
	if err := sc.Err(); err != nil {
		tb.Fatal(err)
	}
	return rows
}

// simulatedPrefill is the time to first token of new tokens on top of a
// cached prefix (0: a cold prompt), alone on one replica of p: the prefix
// is computed first by a request of its own, as a replica's earlier turn.
func simulatedPrefill(p Profile, prefix, n int) time.Duration {
	v := NewVirtual(p, 1)
	prompt := make([]uint32, prefix+n)
	for i := range prompt {
		prompt[i] = firstTextToken + uint32(i)
	}
	ttft := func(id uint64, pr []uint32) time.Duration {
		var first time.Time
		start := v.Now()
		v.Submit(0, &Request{ID: id, Prompt: pr, MaxTokens: 1, OnFirstToken: func(at time.Time) { first = at }})
		for {
			t, ok := v.NextEvent()
			if !ok {
				break
			}
			v.RunUntil(t)
		}
		return first.Sub(start)
	}
	if prefix > 0 {
		ttft(1, prompt[:prefix+1]) // its full blocks stay cached
	}
	return ttft(2, prompt)
}

// TestH200ProfileReproducesMeasuredPrefill holds profile h200-qwen3-4b to
// the prefill times measured on the card: cold prompts of 2k-32k tokens
// (compute-bound; the smaller ones measure the forward pass's per-call
// overhead) within 15%, turns over a cached prefix within 25%.
func TestH200ProfileReproducesMeasuredPrefill(t *testing.T) {
	p, err := LookupProfile("h200-qwen3-4b")
	if err != nil {
		t.Fatal(err)
	}
	var table strings.Builder
	table.WriteString("| measured | new tokens | cached | card | simulator | off |\n| --- | ---: | ---: | ---: | ---: | ---: |\n")
	checked := 0
	for _, r := range readPrefillRows(t, "testdata/calibration/h200-qwen3-4b-prefill.jsonl") {
		var got time.Duration
		limit := 0.25
		switch r.Kind {
		case "cold_prefill":
			got, limit = simulatedPrefill(p, 0, r.Tokens), 0.15
			if r.Tokens < 2048 {
				limit = math.Inf(1) // overhead-bound: shown, not held
			}
		case "cached_turn":
			got = simulatedPrefill(p, r.Prefix, r.New)
		default:
			t.Fatalf("unknown row kind %q", r.Kind)
		}
		ms := float64(got) / float64(time.Millisecond)
		off := (ms - r.MS) / r.MS
		fmt.Fprintf(&table, "| %s | %d | %d | %.1f ms | %.1f ms | %+.1f%% |\n",
			strings.ReplaceAll(r.Kind, "_", " "), r.Tokens+r.New, r.Prefix, r.MS, ms, 100*off)
		if math.Abs(off) > limit {
			t.Errorf("%s %d+%d tokens: simulated %.1f ms, measured %.1f ms (%+.1f%%, limit %.0f%%)",
				r.Kind, r.Prefix, r.Tokens+r.New, ms, r.MS, 100*off, 100*limit)
		}
		if !math.IsInf(limit, 1) {
			checked++
		}
	}
	if checked != 18 {
		t.Fatalf("%d rows checked, want the 6 cold rows of 2k-32k and the 12 cached ones", checked)
	}
	t.Logf("profile %s against the measured card:\n%s", p.Name, table.String())
}

// TestH200ProfileKVArithmetic: vLLM's start-up arithmetic on 141 GB leaves
// about 855,000 tokens of KV, and the model's own 262,144-token context is
// accepted (one request of it fits).
func TestH200ProfileKVArithmetic(t *testing.T) {
	p, err := LookupProfile("h200-qwen3-4b")
	if err != nil {
		t.Fatal(err)
	}
	avail := 0.92*150754820096 - 8.05e9 - 3463184384 - 418759229 - 697932185
	want := int(math.Floor(avail / (16 * 147456)))
	if p.NumBlocks() != want || p.KVTokens() < 850_000 || p.KVTokens() > 860_000 {
		t.Fatalf("blocks = %d (%d tokens), want %d", p.NumBlocks(), p.KVTokens(), want)
	}
	if p.MaxModelLen != 262144 || p.ContextLimit() != 262144 {
		t.Fatalf("max_model_len %d, context limit %d: want the model's 262144", p.MaxModelLen, p.ContextLimit())
	}
	// decode is memory-bound: the weights and the KV read once a step at
	// the card's measured 4.3 TB/s, plus the step overhead
	d := p.StepCost([]Chunk{{Context: 200_000, Tokens: 1}})
	want200k := (8.05e9+200_001*147456)/4.3e12 + 0.004
	if math.Abs(d.Seconds()-want200k)/want200k > 0.01 {
		t.Fatalf("decode step at 200k context %v, want %.2f ms", d, want200k*1e3)
	}
}

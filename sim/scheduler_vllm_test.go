package sim

import (
	"testing"
	"time"
)

// waitingHeadScenario runs a request that holds 61 of 100 blocks (one of
// them vLLM's null block) while a second one, whose 640-token prompt needs 40
// blocks but whose first 256-token chunk needs 16, arrives. It returns when
// the second was admitted and what the counters said while it waited.
func waitingHeadScenario(t *testing.T, fullISL bool, stats string) (admittedAt time.Duration, waitQueries uint64, v *Virtual) {
	t.Helper()
	p := mustProfile(t, 100)
	p.MaxNumBatchedTokens = 256
	p.ReserveFullISL, p.PrefixStats = fullISL, stats
	v = NewVirtual(p, 1)
	a, _ := newReq(1, Tokenize(textOf("a", 960)), 60) // 61 blocks when b comes, 64 at its end
	v.Submit(0, a)
	for v.Stats(0).GenerationTokens < 5 { // a is decoding
		next, _ := v.NextEvent()
		v.RunUntil(next)
	}
	start := v.Now()
	b, _ := newReq(2, Tokenize(textOf("b", 640)), 4)
	var at time.Time
	b.OnScheduled = func(t time.Time, _ int) { at = t }
	v.Submit(0, b)
	before := v.Stats(0).PrefixQueries
	for at.IsZero() {
		next, ok := v.NextEvent()
		if !ok {
			t.Fatal("b never admitted")
		}
		v.RunUntil(next)
		if at.IsZero() {
			waitQueries = v.Stats(0).PrefixQueries - before
		}
	}
	runIdle(t, v)
	return at.Sub(start), waitQueries, v
}

func TestFullPromptAdmissionKeepsTheHeadWaitingUntilAllOfItFits(t *testing.T) {
	fullAt, _, vf := waitingHeadScenario(t, true, PrefixStatsAdmitted)
	chunkAt, _, vc := waitingHeadScenario(t, false, PrefixStatsAdmitted)
	// with the first chunk only, b starts at once and then runs the cache
	// out under a's decode: preemptions; with the whole prompt it waits for
	// a to finish
	if chunkAt > 50*time.Millisecond {
		t.Fatalf("first-chunk admission waited %v", chunkAt)
	}
	if fullAt <= chunkAt || vf.Stats(0).AdmissionWaits == 0 {
		t.Fatalf("full-prompt admission at %v (first chunk at %v), %d waits", fullAt, chunkAt, vf.Stats(0).AdmissionWaits)
	}
	if vc.Stats(0).Preemptions == 0 || vf.Stats(0).Preemptions != 0 {
		t.Fatalf("preemptions: first chunk %d (want some), full prompt %d (want none)", vc.Stats(0).Preemptions, vf.Stats(0).Preemptions)
	}
}

func TestEveryLookupCountsAWaitingHeadAtEachStep(t *testing.T) {
	_, once, vOnce := waitingHeadScenario(t, true, PrefixStatsAdmitted)
	_, every, vEvery := waitingHeadScenario(t, true, PrefixStatsEveryLookup)
	if once != 0 {
		t.Fatalf("counting at admission, %d queries counted while b waited", once)
	}
	// b's 640 tokens at every step it waited
	if every < 10*640 || every%640 != 0 {
		t.Fatalf("counting every look-up, %d queries while b waited (want many times 640)", every)
	}
	if vOnce.Stats(0).PrefixQueries >= vEvery.Stats(0).PrefixQueries {
		t.Fatal("every-lookup counted no more than admission")
	}
}

func TestNullBlockIsNeverHandedOut(t *testing.T) {
	p := mustProfile(t, 10) // 10 blocks, 9 usable: 144 tokens
	p.MaxModelLen = 144
	v := NewVirtual(p, 1)
	r, c := newReq(1, Tokenize(textOf("x", 130)), 14) // 144 tokens: exactly 9 blocks
	v.Submit(0, r)
	runIdle(t, v)
	if c.res.Err != nil || c.res.OutputTokens != 14 {
		t.Fatalf("9-block request: %+v", c.res)
	}
	if st := v.Stats(0); st.KVCapacityTokens != 160 {
		t.Fatalf("reported capacity %d, want num_gpu_blocks x block size = 160", st.KVCapacityTokens)
	}
	if err := (Profile{}).Check(); err == nil {
		t.Fatal("empty profile accepted")
	}
	p.MaxModelLen = 160 // 10 blocks: more than the 9 usable
	if err := p.Check(); err == nil {
		t.Fatal("max_model_len the cache cannot hold accepted")
	}
}

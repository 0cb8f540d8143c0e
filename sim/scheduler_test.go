package sim

import (
	"testing"
	"time"
)

func TestDecodeGoesFirstThenPrefillFillsTheBudget(t *testing.T) {
	p := mustProfile(t, 0)
	e := newEngine(p)
	now := Epoch
	r1, c1 := newReq(1, Tokenize(textOf("a", 100)), 50)
	e.submit(now, r1)
	for c1.tokens == 0 {
		end, ok := e.beginStep(now)
		if !ok {
			t.Fatal("idle with work")
		}
		e.endStep(end)
		now = end
	}
	r2, _ := newReq(2, Tokenize(textOf("b", 5000)), 10)
	e.submit(now, r2)
	if _, ok := e.beginStep(now); !ok {
		t.Fatal("no step")
	}
	if len(e.scheduled) != 2 || e.scheduled[0].req.ID != 1 || e.scheduled[0].stepTokens != 1 {
		t.Fatalf("decode not scheduled first: %+v", e.scheduled)
	}
	if got := e.scheduled[1].stepTokens; got != p.MaxNumBatchedTokens-1 {
		t.Fatalf("prefill chunk %d, want the rest of the budget %d", got, p.MaxNumBatchedTokens-1)
	}
}

func TestLongPromptIsPrefilledInBudgetSizedChunks(t *testing.T) {
	p := mustProfile(t, 0)
	e := newEngine(p)
	r, c := newReq(1, Tokenize(textOf("a", 5000)), 4)
	e.submit(Epoch, r)
	now := Epoch
	var chunks []int
	for c.tokens == 0 {
		end, _ := e.beginStep(now)
		chunks = append(chunks, e.scheduled[0].stepTokens)
		e.endStep(end)
		now = end
	}
	if len(chunks) != 3 || chunks[0] != 2048 || chunks[1] != 2048 || chunks[2] != 904 {
		t.Fatalf("chunks %v, want [2048 2048 904]", chunks)
	}
}

func TestRequestsWaitWhenBlocksRunOutAndPreemptionRecomputes(t *testing.T) {
	// 64 blocks = 1024 tokens; three requests growing to 800 tokens each
	p := mustProfile(t, 64)
	v := NewVirtual(p, 1)
	var cs []*collected
	for i := range 3 {
		r, c := newReq(uint64(i+1), Tokenize(textOf(string(rune('a'+i)), 300)), 500)
		v.Submit(0, r)
		cs = append(cs, c)
	}
	sawWaiting := false
	for {
		next, ok := v.NextEvent()
		if !ok {
			break
		}
		v.RunUntil(next)
		if st := v.Stats(0); st.Waiting > 0 && st.Running > 0 {
			sawWaiting = true
		}
	}
	if !sawWaiting {
		t.Fatal("no request ever waited for blocks")
	}
	st := v.Stats(0)
	if st.Preemptions == 0 {
		t.Fatal("no preemption although running requests outgrew the cache")
	}
	for i, c := range cs {
		if !c.done || c.res.Err != nil || c.res.OutputTokens != 500 || c.tokens != 500 {
			t.Fatalf("request %d: done=%v %+v streamed %d", i+1, c.done, c.res, c.tokens)
		}
	}
	// recompute gives the same text as an undisturbed run
	alone := NewVirtual(mustProfile(t, 0), 1)
	r, c := newReq(9, Tokenize(textOf("c", 300)), 500)
	alone.Submit(0, r)
	runIdle(t, alone)
	if c.res.OutputText != cs[2].res.OutputText {
		t.Fatal("preempted request's output differs from an undisturbed run")
	}
}

func TestMaxNumSeqsCapsRunning(t *testing.T) {
	p := mustProfile(t, 0)
	p.MaxNumSeqs = 2
	v := NewVirtual(p, 1)
	for i := range 5 {
		r, _ := newReq(uint64(i+1), Tokenize(textOf("x", 20+i)), 30)
		v.Submit(0, r)
	}
	for {
		next, ok := v.NextEvent()
		if !ok {
			break
		}
		v.RunUntil(next)
		if v.Stats(0).Running > 2 {
			t.Fatalf("running %d > max_num_seqs 2", v.Stats(0).Running)
		}
	}
	if v.Stats(0).RequestsDone != 5 {
		t.Fatal("not all done")
	}
}

func TestOutputIsExactlyMaxTokensAndDeterministic(t *testing.T) {
	run := func() Result {
		v := NewVirtual(mustProfile(t, 0), 1)
		r, c := newReq(1, Tokenize("hello there"), 37)
		v.Submit(0, r)
		runIdle(t, v)
		return c.res
	}
	a, b := run(), run()
	if a.OutputTokens != 37 || len(Tokenize(a.OutputText)) != 37 || a.FinishReason != "length" {
		t.Fatalf("%+v", a)
	}
	if a.OutputText != b.OutputText {
		t.Fatal("output not deterministic")
	}
}

func TestStopSequenceEndsOutputBeforeIt(t *testing.T) {
	v := NewVirtual(mustProfile(t, 0), 1)
	probe, pc := newReq(1, Tokenize("stop test"), 40)
	v.Submit(0, probe)
	runIdle(t, v)
	stop := pc.res.OutputText[20:26] // spans a piece boundary
	r, c := newReq(2, Tokenize("stop test"), 40)
	r.Stop = []string{stop}
	v.Submit(0, r)
	runIdle(t, v)
	if c.res.FinishReason != "stop" || c.res.StopSequence != stop {
		t.Fatalf("%+v", c.res)
	}
	if want := pc.res.OutputText[:20]; c.res.OutputText != want {
		t.Fatalf("text %q, want %q", c.res.OutputText, want)
	}
}

func TestAbortFreesBlocksToEvictable(t *testing.T) {
	v := NewVirtual(mustProfile(t, 0), 1)
	r, c := newReq(1, Tokenize(textOf("a", 3000)), 1000)
	v.Submit(0, r)
	v.RunUntil(Epoch.Add(5 * time.Second))
	if v.Stats(0).KVUsage == 0 {
		t.Fatal("no blocks in use while running")
	}
	v.Abort(0, 1)
	runIdle(t, v)
	if !c.done || c.res.Err != ErrAborted {
		t.Fatalf("%+v", c.res)
	}
	if st := v.Stats(0); st.KVUsage != 0 || st.Running != 0 {
		t.Fatalf("after abort: %+v", st)
	}
	// its computed blocks are still cached until evicted
	r2, c2 := newReq(2, Tokenize(textOf("a", 3000)), 1)
	v.Submit(0, r2)
	runIdle(t, v)
	if c2.res.CachedTokens < 2900 {
		t.Fatalf("aborted request's blocks not reusable: cached %d", c2.res.CachedTokens)
	}
}

func TestPromptLongerThanContextFails(t *testing.T) {
	v := NewVirtual(mustProfile(t, 0), 1)
	r, c := newReq(1, make([]uint32, 40000), 10)
	v.Submit(0, r)
	if !c.done || c.res.Err != ErrPromptTooLong {
		t.Fatalf("%+v", c.res)
	}
}

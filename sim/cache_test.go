package sim

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

func TestRepeatedPrefixHits(t *testing.T) {
	v := NewVirtual(mustProfile(t, 0), 1)
	hist := []Message{{Role: "user", Content: textOf("u", 2000)}}
	p1 := RenderPrompt("sys", hist)
	r1, c1 := newReq(1, p1, 256)
	v.Submit(0, r1)
	runIdle(t, v)
	if c1.res.CachedTokens != 0 || c1.res.OutputTokens != 256 {
		t.Fatalf("first turn: %+v", c1.res)
	}
	p2 := RenderPrompt("sys", append(hist,
		Message{Role: "assistant", Content: c1.res.OutputText},
		Message{Role: "user", Content: "next"}))
	r2, c2 := newReq(2, p2, 8)
	v.Submit(0, r2)
	runIdle(t, v)
	// every full block of prompt + generated tokens whose KV was computed
	// (the last sampled token never is) is a hit
	want := (len(p1) + 256 - 1) / 16 * 16
	if c2.res.CachedTokens != want {
		t.Fatalf("second turn cached %d tokens, want %d", c2.res.CachedTokens, want)
	}
	st := v.Stats(0)
	if st.PrefixHits != uint64(want) || st.PrefixQueries != uint64(len(p1)+len(p2)) {
		t.Fatalf("stats %+v", st)
	}
}

func TestPrefixPushedOutBeyondCapacityMisses(t *testing.T) {
	p := mustProfile(t, 0)
	v := NewVirtual(p, 1)
	a := RenderPrompt("", []Message{{Role: "user", Content: textOf("a", 3000)}})
	r, _ := newReq(1, a, 4)
	v.Submit(0, r)
	runIdle(t, v)
	// other prompts, one after another, worth more than the whole cache
	for i, total := 0, 0; total <= p.KVTokens(); i++ {
		o := RenderPrompt("", []Message{{Role: "user", Content: textOf(string(rune('b'+i)), 8000)}})
		r, _ := newReq(uint64(10+i), o, 4)
		v.Submit(0, r)
		runIdle(t, v)
		total += len(o)
	}
	r, c := newReq(2, a, 4)
	v.Submit(0, r)
	runIdle(t, v)
	if c.res.CachedTokens != 0 {
		t.Fatalf("evicted prefix still hit %d tokens", c.res.CachedTokens)
	}
}

func TestBlockHeldByRunningRequestIsNeverEvicted(t *testing.T) {
	c := newBlockCache(8)
	held := c.allocate()
	c.register(held, 42)
	for range 7 {
		b := c.allocate()
		c.register(b, uint64(b)+1000)
		c.release([]int32{b})
	}
	// churn: every further allocation must take an unreferenced block
	for i := range 100 {
		if c.free() != 7 {
			t.Fatalf("free = %d, want 7", c.free())
		}
		b := c.allocate()
		if b == held {
			t.Fatal("allocator took a referenced block")
		}
		c.register(b, uint64(2000+i))
		c.release([]int32{b})
	}
	if got, ok := c.lookup(42); !ok || got != held {
		t.Fatal("referenced block lost its key")
	}
}

func TestRunningRequestsKeepTheirBlocksUnderChurn(t *testing.T) {
	p := mustProfile(t, 300)
	v := NewVirtual(p, 1)
	e := v.engines[0]
	long, _ := newReq(1, RenderPrompt("", []Message{{Role: "user", Content: textOf("long", 1500)}}), 800)
	v.Submit(0, long)
	for i := range 20 {
		pr := RenderPrompt("", []Message{{Role: "user", Content: textOf(string(rune('a'+i)), 900)}})
		r, _ := newReq(uint64(100+i), pr, 16)
		v.At(Epoch.Add(time.Duration(i)*500*time.Millisecond), func() { v.Submit(0, r) })
	}
	for {
		next, ok := v.NextEvent()
		if !ok {
			break
		}
		v.RunUntil(next)
		for _, s := range e.running {
			for i, b := range s.blocks {
				if e.cache.ref[b] <= 0 || e.cache.inFree[b] {
					t.Fatalf("running request %d block %d (#%d) is evictable", s.req.ID, b, i)
				}
				if i < s.registered && (!e.cache.hashed[b] && e.cache.table[s.keys[i]] == b) {
					t.Fatalf("registered block %d lost its key", b)
				}
			}
		}
	}
}

func TestPrefixCountersOnlyGrowAndHitsNeverExceedQueries(t *testing.T) {
	p := mustProfile(t, 600)
	v := NewVirtual(p, 2)
	rng := rand.New(rand.NewPCG(1, 2))
	sys := textOf("system", 500)
	var id uint64
	for s := range 12 {
		hist := []Message{{Role: "user", Content: textOf(string(rune('A'+s)), 1000+rng.IntN(800))}}
		var turn func(at time.Time)
		turns := 0
		turn = func(time.Time) {
			id++
			r, _ := newReq(id, RenderPrompt(sys, hist), 32)
			r.OnDone = func(at time.Time, res Result) {
				turns++
				if turns < 4 {
					hist = append(hist, Message{Role: "assistant", Content: res.OutputText},
						Message{Role: "user", Content: textOf("more", 100+rng.IntN(300))})
					v.At(at.Add(20*time.Millisecond), func() { turn(at) })
				}
			}
			v.Submit(rng.IntN(2), r)
		}
		v.At(Epoch.Add(time.Duration(s)*100*time.Millisecond), func() { turn(v.Now()) })
	}
	prev := []Stats{v.Stats(0), v.Stats(1)}
	for {
		next, ok := v.NextEvent()
		if !ok {
			break
		}
		v.RunUntil(next)
		for i := range 2 {
			st := v.Stats(i)
			if st.PrefixHits > st.PrefixQueries {
				t.Fatalf("replica %d: hits %d > queries %d", i, st.PrefixHits, st.PrefixQueries)
			}
			o := prev[i]
			if st.PrefixHits < o.PrefixHits || st.PrefixQueries < o.PrefixQueries ||
				st.PromptTokens < o.PromptTokens || st.GenerationTokens < o.GenerationTokens ||
				st.TTFTCount < o.TTFTCount || st.TTFTSum < o.TTFTSum || st.RequestsDone < o.RequestsDone ||
				st.Preemptions < o.Preemptions {
				t.Fatalf("replica %d: a counter went down: %+v after %+v", i, st, o)
			}
			if st.KVUsage < 0 || st.KVUsage > 1 {
				t.Fatalf("kv usage %v", st.KVUsage)
			}
			prev[i] = st
		}
	}
	if prev[0].RequestsDone+prev[1].RequestsDone != 48 {
		t.Fatalf("done %d+%d, want 48", prev[0].RequestsDone, prev[1].RequestsDone)
	}
	if prev[0].PrefixHits+prev[1].PrefixHits == 0 {
		t.Fatal("no hits at all")
	}
}

func TestBlockKeysChainThroughParents(t *testing.T) {
	a := make([]uint32, 48)
	b := slices.Clone(a)
	b[0] = 7 // first block differs: every later key must differ too
	ka, kb := appendBlockKeys(nil, a, 16), appendBlockKeys(nil, b, 16)
	if len(ka) != 3 {
		t.Fatalf("%d keys for 48 tokens", len(ka))
	}
	for i := range ka {
		if ka[i] == kb[i] {
			t.Fatalf("block %d key equal despite different parent", i)
		}
	}
	if len(appendBlockKeys(nil, a[:47], 16)) != 2 {
		t.Fatal("partial block got a key")
	}
}
